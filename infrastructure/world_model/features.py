"""The feature encoder: one code path from an attempt to a feature row, for training and prediction.

The encoder sees an :class:`~infrastructure.data.schema.AttemptInput` only, which holds
what is known before an attempt runs: the operator, the generation, the parents (their
recorded scores are looked up in the same pool), the planned change, the tools and the
reasoning pattern. The attempt's own status, score, test results, metrics, failure
reasons, run time and cost never reach it; ``tests/infrastructure/world_model`` checks
that changing them leaves the features unchanged.

Its vocabularies and normalisation statistics are fitted on the training split and saved
as plain types with the model (:meth:`FeatureEncoder.state_dict`), so that prediction
after a restart encodes exactly as training did.

>>> encoder = FeatureEncoder.fit(attempts, parent_scores)  # doctest: +SKIP
>>> x = encoder.encode(attempts, parent_scores)  # doctest: +SKIP
>>> restored = FeatureEncoder.from_state(encoder.state_dict())  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from infrastructure.data.schema import OPERATORS, AttemptInput

ENCODER_VERSION = 1
NUMERIC_FEATURES: tuple[str, ...] = (
    "log_generation",
    "parents",
    "parent_score_mean",
    "parent_score_max",
    "parent_score_min",
    "parent_score_known",
    "log_change_lines",
    "log_change_chars",
    "log_modified_files",
    "log_strategy_words",
    "log_diagnosis_words",
    "tools",
)
_UNKNOWN_PARENT_SCORE = 0.5  # a parent without a recorded score: the middle, flagged


@dataclass(frozen=True)
class FeatureEncoder:
    """Turns attempts into a float32 matrix; fitted once, then frozen and saved."""

    tools: tuple[str, ...]
    patterns: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def n_features(self) -> int:
        # numeric, operators, tools + "other tools", patterns + "other pattern"
        return len(NUMERIC_FEATURES) + len(OPERATORS) + len(self.tools) + len(self.patterns) + 2

    @classmethod
    def fit(
        cls,
        attempts: Sequence[AttemptInput],
        parent_scores: Mapping[str, float],
        max_tools: int = 32,
        max_patterns: int = 16,
    ) -> FeatureEncoder:
        """Learn the vocabularies and the numeric features' mean and spread from ``attempts``."""
        if not attempts:
            raise ValueError("cannot fit a feature encoder on no attempts")
        tool_counts = Counter(tool for a in attempts for tool in a.tools_used)
        pattern_counts = Counter(a.reasoning_pattern for a in attempts if a.reasoning_pattern)
        # Most frequent first, ties by name, so that the vocabulary is deterministic.
        tools = tuple(sorted(tool_counts, key=lambda t: (-tool_counts[t], t))[:max_tools])
        patterns = tuple(
            sorted(pattern_counts, key=lambda p: (-pattern_counts[p], p))[:max_patterns]
        )
        numeric = torch.tensor([_numeric(a, parent_scores) for a in attempts], dtype=torch.float64)
        mean = numeric.mean(dim=0)
        std = numeric.std(dim=0, unbiased=False).clamp_min(1e-6)
        return cls(tools, patterns, tuple(mean.tolist()), tuple(std.tolist()))

    def encode(
        self, attempts: Sequence[AttemptInput], parent_scores: Mapping[str, float]
    ) -> torch.Tensor:
        """A ``(len(attempts), n_features)`` float32 matrix."""
        rows = [self._row(a, parent_scores) for a in attempts]
        if not rows:
            return torch.zeros((0, self.n_features), dtype=torch.float32)
        return torch.tensor(rows, dtype=torch.float32)

    def _row(self, attempt: AttemptInput, parent_scores: Mapping[str, float]) -> list[float]:
        numeric = _numeric(attempt, parent_scores)
        row = [(v - m) / s for v, m, s in zip(numeric, self.mean, self.std, strict=True)]
        row += [1.0 if attempt.operator == op else 0.0 for op in OPERATORS]
        used = set(attempt.tools_used)
        row += [1.0 if tool in used else 0.0 for tool in self.tools]
        row.append(float(len(used - set(self.tools))))
        row += [1.0 if attempt.reasoning_pattern == p else 0.0 for p in self.patterns]
        row.append(0.0 if attempt.reasoning_pattern in self.patterns else 1.0)
        return row

    def state_dict(self) -> dict[str, Any]:
        """Plain lists, strings and floats: safe for ``torch.load(weights_only=True)``."""
        return {
            "version": ENCODER_VERSION,
            "numeric_features": list(NUMERIC_FEATURES),
            "operators": list(OPERATORS),
            "tools": list(self.tools),
            "patterns": list(self.patterns),
            "mean": list(self.mean),
            "std": list(self.std),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FeatureEncoder:
        """Rebuild the encoder saved by :meth:`state_dict`; refuses another layout."""
        if state.get("version") != ENCODER_VERSION:
            raise ValueError(
                f"feature encoder version {state.get('version')!r} is not supported "
                f"(this build reads version {ENCODER_VERSION})"
            )
        if list(state["numeric_features"]) != list(NUMERIC_FEATURES) or list(
            state["operators"]
        ) != list(OPERATORS):
            raise ValueError("saved feature encoder has a different feature layout")
        return cls(
            tools=tuple(state["tools"]),
            patterns=tuple(state["patterns"]),
            mean=tuple(float(v) for v in state["mean"]),
            std=tuple(float(v) for v in state["std"]),
        )


def _numeric(attempt: AttemptInput, parent_scores: Mapping[str, float]) -> list[float]:
    known = [parent_scores[p] for p in attempt.parent_ids if p in parent_scores]
    lines = attempt.code_changes.count("\n") + 1 if attempt.code_changes else 0
    return [
        math.log1p(attempt.generation),
        float(len(attempt.parent_ids)),
        sum(known) / len(known) if known else _UNKNOWN_PARENT_SCORE,
        max(known) if known else _UNKNOWN_PARENT_SCORE,
        min(known) if known else _UNKNOWN_PARENT_SCORE,
        1.0 if known else 0.0,
        math.log1p(lines),
        math.log1p(len(attempt.code_changes)),
        math.log1p(len(attempt.modified_files)),
        math.log1p(len(attempt.proposed_strategy.split())),
        math.log1p(len(attempt.problem_diagnosis.split())),
        float(len(set(attempt.tools_used))),
    ]
