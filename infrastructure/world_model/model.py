"""The SE-Darwin world model: a shared MLP trunk and three heads, and its fp32 losses.

The heads predict, for one attempt before it runs: the logit of success, the expected
success_score (a logit, squashed by a sigmoid), and the logits of the outcome class
(failure / partial / success, in the order of ``infrastructure.data.schema.OUTCOMES``).

>>> model = WorldModel(ModelConfig.preset("default", in_features=30))
>>> out = model(torch.zeros(4, 30))
>>> out.outcome_logits.shape
torch.Size([4, 3])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from infrastructure.data.schema import OUTCOMES

# Module-name prefixes, for the precision probe's FP32 islands.
HEAD_MODULES: tuple[str, ...] = ("success_head", "score_head", "outcome_head")
TRUNK_MODULES: tuple[str, ...] = ("trunk",)

PRESETS: dict[str, dict[str, Any]] = {
    # Trains on 20,000 attempts in seconds on a CPU.
    "default": {"hidden": 64, "depth": 2, "dropout": 0.0},
    # For GPU benchmarks: wide enough that matmuls dominate.
    "large": {"hidden": 2048, "depth": 4, "dropout": 0.0},
}


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a :class:`WorldModel`; saved in checkpoints as a plain dict."""

    in_features: int
    hidden: int = 64
    depth: int = 2
    dropout: float = 0.0

    @classmethod
    def preset(cls, name: str, in_features: int, **overrides: Any) -> ModelConfig:
        if name not in PRESETS:
            raise ValueError(
                f"unknown world-model preset {name!r}; choose one of {', '.join(PRESETS)}"
            )
        return replace(cls(in_features=in_features, **PRESETS[name]), **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> ModelConfig:
        return cls(
            in_features=int(state["in_features"]),
            hidden=int(state["hidden"]),
            depth=int(state["depth"]),
            dropout=float(state["dropout"]),
        )


class WorldModelOutput(NamedTuple):
    success_logit: torch.Tensor  # (n,)
    score_logit: torch.Tensor  # (n,); sigmoid gives the expected success_score
    outcome_logits: torch.Tensor  # (n, 3)


class WorldModel(nn.Module):
    """MLP trunk (``depth`` blocks of Linear, LayerNorm, GELU) and three linear heads."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.depth < 1 or config.hidden < 1:
            raise ValueError(f"depth and hidden must be positive, got {config}")
        self.config = config
        layers: list[nn.Module] = []
        width = config.in_features
        for _ in range(config.depth):
            layers += [nn.Linear(width, config.hidden), nn.LayerNorm(config.hidden), nn.GELU()]
            if config.dropout:
                layers.append(nn.Dropout(config.dropout))
            width = config.hidden
        self.trunk = nn.Sequential(*layers)
        self.success_head = nn.Linear(width, 1)
        self.score_head = nn.Linear(width, 1)
        self.outcome_head = nn.Linear(width, len(OUTCOMES))

    def forward(self, x: torch.Tensor) -> WorldModelOutput:
        h = self.trunk(x)
        return WorldModelOutput(
            self.success_head(h).squeeze(-1),
            self.score_head(h).squeeze(-1),
            self.outcome_head(h),
        )


@dataclass(frozen=True)
class LossParts:
    total: torch.Tensor
    success: torch.Tensor
    score: torch.Tensor
    outcome: torch.Tensor


def world_model_losses(
    out: WorldModelOutput,
    success: torch.Tensor,
    score: torch.Tensor,
    score_known: torch.Tensor,
    outcome: torch.Tensor,
) -> LossParts:
    """BCE + squared error + cross-entropy, in fp32 whatever dtype the forward ran in.

    ``score_known`` masks records whose label came from the status word alone: they have
    no success_score to regress on.
    """
    success_logit = out.success_logit.float()
    predicted = torch.sigmoid(out.score_logit.float())
    bce = F.binary_cross_entropy_with_logits(success_logit, success.float())
    mask = score_known.float()
    squared = (predicted - score.float()).pow(2) * mask
    mse = squared.sum() / mask.sum().clamp_min(1.0)
    ce = F.cross_entropy(out.outcome_logits.float(), outcome)
    return LossParts(bce + mse + ce, bce, mse, ce)
