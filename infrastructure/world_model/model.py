"""The SE-Darwin world model: a shared MLP trunk and three heads, and its fp32 losses.

A config with ``members`` > 1 builds a :class:`WorldModelEnsemble` instead
(:func:`build_world_model`): that many independent networks of the same shape, whose
served output is the mean of their logits. SE-Darwin trains one on small pools, each
member on all but one fold of the records (``agents/se_darwin/task.py``).

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
    members: int = 1  # over 1: a WorldModelEnsemble of that many networks

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
            members=int(state.get("members", 1)),  # checkpoints from before ensembles: 1
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
        if config.members != 1:
            raise ValueError(f"one network per WorldModel; {config} is a WorldModelEnsemble's")
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


class WorldModelEnsemble(nn.Module):
    """``config.members`` WorldModels of one shape; its output is their logits' mean.

    ``model(x, per_member=True)`` gives every member's output instead, stacked on a new
    first dimension; it goes through ``forward``, so DDP and FSDP wrappers see the call.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.members < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {config}")
        self.config = config
        one = replace(config, members=1)
        self.members = nn.ModuleList(WorldModel(one) for _ in range(config.members))

    def forward(self, x: torch.Tensor, per_member: bool = False) -> WorldModelOutput:
        outputs = [member(x) for member in self.members]
        stacked = (torch.stack(parts) for parts in zip(*outputs, strict=True))
        if per_member:
            return WorldModelOutput(*stacked)
        return WorldModelOutput(*(parts.mean(0) for parts in stacked))


def build_world_model(config: ModelConfig) -> WorldModel | WorldModelEnsemble:
    """The network ``config`` describes: one WorldModel, or an ensemble of ``members``."""
    return WorldModel(config) if config.members == 1 else WorldModelEnsemble(config)


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
    weight: torch.Tensor | None = None,
) -> LossParts:
    """BCE + squared error + cross-entropy, in fp32 whatever dtype the forward ran in.

    ``score_known`` masks records whose label came from the status word alone: they have
    no success_score to regress on. ``weight`` (0 or 1 per record) keeps only some records
    in each mean: an ensemble member's training folds, with the same shapes every step.
    """
    success_logit = out.success_logit.float()
    predicted = torch.sigmoid(out.score_logit.float())
    mask = score_known.float()
    squared = (predicted - score.float()).pow(2)
    if weight is None:
        bce = F.binary_cross_entropy_with_logits(success_logit, success.float())
        mse = (squared * mask).sum() / mask.sum().clamp_min(1.0)
        ce = F.cross_entropy(out.outcome_logits.float(), outcome)
        return LossParts(bce + mse + ce, bce, mse, ce)
    w = weight.float()
    per_bce = F.binary_cross_entropy_with_logits(success_logit, success.float(), reduction="none")
    per_ce = F.cross_entropy(out.outcome_logits.float(), outcome, reduction="none")
    count = w.sum().clamp_min(1.0)
    bce, ce = (per_bce * w).sum() / count, (per_ce * w).sum() / count
    mse = (squared * mask * w).sum() / (mask * w).sum().clamp_min(1.0)
    return LossParts(bce + mse + ce, bce, mse, ce)
