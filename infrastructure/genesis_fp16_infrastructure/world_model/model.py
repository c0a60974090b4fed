"""The world model (will an attempt succeed?): an MLP trunk, three heads, fp32 losses.

A config with ``members`` > 1 builds a :class:`WorldModelEnsemble` instead
(:func:`build_world_model`): that many independent networks of the same shape, computed
as one (weights stacked per layer, one batched matmul for all members), whose served
output is the mean of their logits. The retrain recipe trains one on small pools, each member on
all but one fold of the records (``genesis_fp16_infrastructure.recipes.retrain.task``).

The heads predict, for one attempt before it runs: the logit of success, the expected
success_score (a logit, squashed by a sigmoid), and the logits of the outcome class
(failure / partial / success, in the order of ``genesis_fp16_infrastructure.data.schema.OUTCOMES``).

>>> model = WorldModel(ModelConfig.preset("default", in_features=30))
>>> out = model(torch.zeros(4, 30))
>>> out.outcome_logits.shape
torch.Size([4, 3])
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Optimizer

from genesis_fp16_infrastructure.data.schema import OUTCOMES

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.data.pool_columns import PoolColumns

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
        return _heads(self, self.trunk(x))


class WorldModelEnsemble(nn.Module):
    """``config.members`` WorldModels of one shape, computed as one network.

    Each layer holds every member's weights stacked on a new first dimension (its state
    dict keys are a WorldModel's, ``trunk.0.weight`` of shape ``(members, out, in)``),
    and runs all members in one batched matmul (``torch.baddbmm``): a step launches
    the kernels of about one network, not one per member. Member ``k``'s slice gets the
    gradient it would get alone. The served output is the mean of the members' logits:

    >>> ensemble = WorldModelEnsemble(ModelConfig(in_features=30, members=5))
    >>> ensemble(torch.zeros(4, 30)).success_logit.shape
    torch.Size([4])
    >>> ensemble(torch.zeros(4, 30), per_member=True).success_logit.shape
    torch.Size([5, 4])
    >>> ensemble.member(2)  # a copy of one member, as a WorldModel  # doctest: +ELLIPSIS
    WorldModel(...)

    ``model(x, per_member=True)`` goes through ``forward``, so DDP and FSDP wrappers see
    the call. State dicts of the earlier loop layout (``members.K.trunk.0.weight``, one
    WorldModel per member) are stacked into this one on load.
    """

    def __init__(self, config: ModelConfig) -> None:
        if config.members < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {config}")
        super().__init__()
        self.config = config
        # Built as that many WorldModels, one after another, then stacked: the same
        # initial weights (and random draws) as the loop layout had.
        one = replace(config, members=1)
        members = [WorldModel(one) for _ in range(config.members)]
        self.trunk = nn.Sequential(
            *(_stacked(layers) for layers in zip(*(m.trunk for m in members), strict=True))
        )
        self.success_head = _Stacked([m.success_head for m in members])
        self.score_head = _Stacked([m.score_head for m in members])
        self.outcome_head = _Stacked([m.outcome_head for m in members])
        self.register_load_state_dict_pre_hook(_stack_loop_layout)

    def forward(self, x: torch.Tensor, per_member: bool = False) -> WorldModelOutput:
        # Every member reads the same records: a stride-0 view, no copy (autocast's cast
        # to bf16/fp16 does copy it, members times the input's size).
        stacked = _heads(self, self.trunk(x.expand(self.config.members, *x.shape)))
        if per_member:
            return stacked
        return WorldModelOutput(*(parts.mean(0) for parts in stacked))

    def member_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member ``k``'s weights under a WorldModel's keys (views into the ensemble's)."""
        return {name: t[k] for name, t in self.state_dict().items()}

    def member(self, k: int) -> WorldModel:
        """A copy of member ``k`` as a WorldModel; it draws no random numbers."""
        with torch.device("meta"):
            one = WorldModel(replace(self.config, members=1))
        state = {name: t.detach().clone() for name, t in self.member_state_dict(k).items()}
        one.load_state_dict(state, assign=True)
        return one.train(self.training)


def _heads(model: WorldModel | WorldModelEnsemble, h: torch.Tensor) -> WorldModelOutput:
    """The three heads on the trunk's output ``h`` (a member dimension first in an ensemble)."""
    return WorldModelOutput(
        model.success_head(h).squeeze(-1), model.score_head(h).squeeze(-1), model.outcome_head(h)
    )


class _Stacked(nn.Module):
    """Linear layers of one shape, or LayerNorms of one width, stacked: each member's
    weight and bias on a new first dimension, ``(members, n, in)`` -> ``(members, n, out)``."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        first = layers[0]
        self.eps = float(first.eps) if isinstance(first, nn.LayerNorm) else None  # None: Linear
        self.weight, self.bias = (
            nn.Parameter(torch.stack([getattr(layer, name).detach() for layer in layers]))
            for name in ("weight", "bias")
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.eps is None:
            # One batched matmul, bias fused; autocast runs it in bf16/fp16 as it does Linear.
            return torch.baddbmm(self.bias.unsqueeze(1), h, self.weight.transpose(1, 2))
        if _scoring_on_cpu(h, self.weight):
            # Each member's LayerNorm with its own affine, one kernel each: the same bits
            # as the two kernels below (a test holds it), in less time over many rows, as
            # a member's normalised rows are still in cache when its affine reads them
            # (the held-out fifth of a 100,000 pool, 19,548 rows: 77 -> 59 ms). Training
            # keeps the two kernels (a member's own backward costs more), and so does a
            # GPU (the gain is the CPU's cache; a GPU would launch more kernels).
            members = zip(h, self.weight, self.bias, strict=True)
            return torch.stack(
                [F.layer_norm(r, r.shape[-1:], w, b, self.eps) for r, w, b in members]
            )
        # LayerNorm: one normalisation, then each member's affine.
        normed = F.layer_norm(h, h.shape[-1:], eps=self.eps)
        affine = torch.addcmul(self.bias.unsqueeze(1), normed, self.weight.unsqueeze(1))
        # LayerNorm's output dtype under autocast: the input's on a CPU (bf16/fp16),
        # float32 on CUDA, where layer_norm is an autocast fp32 op. A no-op in fp32.
        return affine.to(normed.dtype)


def _scoring_on_cpu(h: torch.Tensor, weight: torch.Tensor) -> bool:
    """Float32 rows on a CPU, without gradients or autocast: a scoring forward."""
    return (
        h.device.type == "cpu"
        and h.dtype == weight.dtype == torch.float32
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    )


def _stacked(layers: Sequence[nn.Module]) -> nn.Module:
    """One trunk layer for every member: stacked weights, or the layer itself if it has none."""
    first = layers[0]
    if isinstance(first, nn.Linear | nn.LayerNorm):
        return _Stacked(layers)
    if any(True for _ in first.parameters()):
        raise TypeError(f"no stacked form of {type(first).__name__}")
    return first  # GELU, Dropout (its mask drawn once over every member's activations)


_LOOP_KEY = re.compile(r"members\.(\d+)\.(.+)")


def _stack_loop_layout(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """Stack the loop layout's ``{prefix}members.K.<key>`` entries of ``state`` into
    ``{prefix}<key>`` over K; other entries as they are (a stacked state is unchanged).
    load_state_dict hands its hooks a copy of the caller's dict: edited in place."""
    found: dict[str, dict[int, torch.Tensor]] = {}
    for name in list(state):
        match = _LOOP_KEY.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        if match is not None:
            found.setdefault(prefix + match[2], {})[int(match[1])] = state.pop(name)
    for name, by_member in found.items():
        if sorted(by_member) != list(range(len(by_member))):
            raise ValueError(f"loop-layout state has members {sorted(by_member)} for {name!r}")
        state[name] = torch.stack([by_member[k] for k in range(len(by_member))])


def stack_loop_optimizer_state(
    optimizer: Optimizer, state: dict[str, Any]
) -> dict[str, Any] | None:
    """A loop-layout optimizer state stacked for this optimizer's stacked parameters.

    A load-state-dict pre-hook (``optimizer.register_load_state_dict_pre_hook``): when
    each saved group holds ``members`` times the live group's parameters, member by
    member (the loop layout's ModuleList order), and every live parameter's first
    dimension is ``members``, the per-parameter states (AdamW's exp_avg, exp_avg_sq)
    are stacked as the weights are; a scalar such as ``step`` is taken from member 0
    (every member stepped together). Any other state is returned as it is (None).
    """
    live, saved = optimizer.param_groups, state["param_groups"]
    if len(live) != len(saved) or not live or not live[0]["params"]:
        return None
    members, rest = divmod(len(saved[0]["params"]), len(live[0]["params"]))
    if members < 2 or rest:
        return None
    per_param, groups, index = state["state"], [], 0
    stacked: dict[int, dict[str, Any]] = {}
    for group, old in zip(live, saved, strict=True):
        count = len(group["params"])
        if len(old["params"]) != members * count:
            return None
        if any(p.dim() == 0 or p.shape[0] != members for p in group["params"]):
            return None
        for j in range(count):
            parts = [per_param.get(old["params"][k * count + j]) for k in range(members)]
            if all(part is not None for part in parts):
                stacked[index + j] = {key: _stack_entry(parts, key) for key in parts[0]}
        groups.append({**old, "params": list(range(index, index + count))})
        index += count
    return {**state, "state": stacked, "param_groups": groups}


def _stack_entry(parts: Sequence[Mapping[str, Any]], key: str) -> Any:
    value = parts[0][key]
    if not isinstance(value, torch.Tensor):
        return value
    if value.dim() == 0:  # a copy: the saved state may be a live optimizer's own tensor
        return value.clone()
    return torch.stack([part[key] for part in parts])


def build_world_model(config: ModelConfig) -> WorldModel | WorldModelEnsemble:
    """The network ``config`` describes: one WorldModel, or an ensemble of ``members``."""
    return WorldModel(config) if config.members == 1 else WorldModelEnsemble(config)


class Labels(NamedTuple):
    """The records' labels as tensors, in :func:`world_model_losses`' order: success
    (float32), score (float32, 0.0 where unknown), whether the score is known, and the
    outcome's index in ``schema.OUTCOMES`` (int64). A score rounds to float32 from
    float64 as a Python float does."""

    success: torch.Tensor
    score: torch.Tensor
    score_known: torch.Tensor
    outcome: torch.Tensor

    @classmethod
    def of_rows(cls, columns: PoolColumns, rows: np.ndarray | slice) -> Labels:
        """The labels of the read's examples ``rows`` (positions in ``columns.labelled``,
        or a slice of them: every example's is ``slice(None)``, no gather, a third of the
        time at 100,000), each a tensor of its own (never a view of the pool's columns)."""
        known = columns.label_scored[rows]
        return cls(
            torch.from_numpy(columns.success[rows].astype(np.float32)),
            torch.from_numpy(np.where(known, columns.label_score[rows], 0.0).astype(np.float32)),
            torch.from_numpy(known.copy() if isinstance(rows, slice) else known),
            torch.from_numpy(columns.outcome[rows].astype(np.int64)),
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
    weight: torch.Tensor | None = None,
) -> LossParts:
    """BCE + squared error + cross-entropy, in fp32 whatever dtype the forward ran in.

    ``score_known`` masks records whose label came from the status word alone: they have
    no success_score to regress on. ``weight`` (0 or 1 per record) keeps only some records
    in each mean: an ensemble member's training folds, with the same shapes every step.
    Every member at once: ``out`` with a leading member dimension (``per_member=True``)
    and ``weight`` of shape ``(members, n)`` give each member's losses, shape
    ``(members,)``; the labels are the same for every member.
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
    per_bce = F.binary_cross_entropy_with_logits(
        success_logit, success.float().expand_as(success_logit), reduction="none"
    )
    # Classes on dim 1, as cross_entropy wants them: (n, 3) as it is, (members, 3, n).
    logits = out.outcome_logits.float()
    targets = outcome.expand(logits.shape[:-1])
    per_ce = F.cross_entropy(logits.movedim(-1, 1), targets, reduction="none")
    count = w.sum(-1).clamp_min(1.0)
    bce, ce = (per_bce * w).sum(-1) / count, (per_ce * w).sum(-1) / count
    mse = (squared * mask * w).sum(-1) / (mask * w).sum(-1).clamp_min(1.0)
    return LossParts(bce + mse + ce, bce, mse, ce)
