"""Per-layer range statistics, sampled: how close each module runs to fp16's limits.

Every ``every`` steps one step is watched (sampled): per module, the largest magnitude
of its outputs (activations) and of its parameters' gradients (unscaled), the fraction
of those scaled gradients that fp16 could not hold (over 65504, or non-zero under its
smallest subnormal, 2**-24, so flushed to zero) and the count of non-finite values::

    stats = RangeStats(RangeStatsConfig(every=100), on_report=print)
    stats.follow(trainer)            # before the first step (and after a demotion)
    # fit() calls stats.after_step(trainer) after every step

Cost: an eager run pays nothing on the steps in between: the hooks are installed after
the step before a sampled one and removed after it, and the sampled step's figures
are read in one host read. The sampled step itself runs a few small ops per module
(on the CPU, cheap beside the step's own work; benchmarks/flight_recorder.py measures
it). A captured CUDA graph cannot gain or lose hooks between replays, so there the
hooks are installed before the capture and run inside the graph on every step,
writing device buffers that keep the largest values since the last read; only the
sampled steps read them (one host read) and zero them. That path is written for the
GPU and not yet measured there (``make gpu-check`` has its line).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName

FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # the smallest fp16 subnormal: a non-zero below it flushes to zero
COLUMNS = ("activation_max", "gradient_max", "overflow", "underflow", "count", "nonfinite")
_ACT, _GRAD, _OVER, _UNDER, _COUNT, _BAD = range(len(COLUMNS))


@dataclass(frozen=True)
class RangeStatsConfig:
    """``every``: one sampled step in this many (>= 1)."""

    every: int = 100

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"RangeStatsConfig(every={self.every!r}): must be >= 1")


@dataclass(frozen=True)
class RangeReport:
    """One sampled step: ``modules`` maps a module name to its row, a dict with
    ``activation_max``, ``gradient_max`` (unscaled), ``overflow`` and ``underflow``
    (fractions of its scaled gradient values fp16 cannot hold) and ``nonfinite``."""

    step: int
    precision: PrecisionName
    modules: dict[str, dict[str, float]]

    def nearest_limits(self, k: int) -> list[str]:
        """The ``k`` modules nearest fp16's limits, nearest first (see :func:`nearness`)."""
        ranked = sorted(self.modules, key=lambda m: nearness(self.modules[m]), reverse=True)
        return ranked[:k]

    def totals(self) -> dict[str, float]:
        """Every module together: the largest values and fractions, non-finite summed."""
        rows = list(self.modules.values()) or [dict.fromkeys(COLUMNS, 0.0)]
        out = {c: max(r[c] for r in rows) for c in ("activation_max", "gradient_max")}
        out.update({c: max(r[c] for r in rows) for c in ("overflow", "underflow")})
        out["nonfinite"] = sum(r["nonfinite"] for r in rows)
        return out


def nearness(row: dict[str, float]) -> float:
    """How near fp16's limits a module runs, in doublings: its largest activation's
    log2 distance below 65504 counted as closeness, or any overflow, underflow or
    non-finite value (nearest of all)."""
    if row["nonfinite"] or row["overflow"]:
        return math.inf
    act = row["activation_max"]
    over = math.log2(act / FP16_MAX) if act > 0 else -64.0  # 0: at the limit; < 0 below
    return max(over, row["underflow"] * 64.0 - 64.0)


class RangeStats:
    """The sampled per-module statistics of one model; see the module docstring."""

    def __init__(self, config: RangeStatsConfig, on_report: Callable[[RangeReport], None]) -> None:
        self.config = config
        self.on_report = on_report
        self.model: nn.Module | None = None
        self.names: list[str] = []
        self._buffer: torch.Tensor | None = None
        self._handles: list[Any] = []
        self._always = False
        self._trainer: Any = None

    def follow(self, trainer: Any) -> None:
        """Watch ``trainer``'s model (a new run's, or a demoted one's), before its first
        step: on a captured step the hooks go in now, for good."""
        if trainer is self._trainer:
            return
        self._remove()
        self._trainer = trainer
        self.model = trainer.model
        self.names = [name or "(model)" for name, _ in trainer.model.named_modules()]
        device = trainer.policy.device
        self._buffer = torch.zeros(len(self.names), len(COLUMNS), device=device)
        self._always = trainer.graphs is not None
        if self._always or trainer.step_count % self.config.every == self.config.every - 1:
            self._install()

    def after_step(self, trainer: Any) -> None:
        """After every step: report a sampled step; hooks in before the next sampled one."""
        self.follow(trainer)
        every = self.config.every
        if trainer.step_count % every == 0 and self._buffer is not None and self._handles:
            self._report(trainer)
        if not self._always:
            if self._handles and trainer.step_count % every == 0:
                self._remove()
            if not self._handles and trainer.step_count % every == every - 1:
                self._install()
        if self._always and trainer.graphs is None and trainer.step_count % every == 0:
            self._always = False  # fell back to eager: sample as eager steps do
            self._remove()

    def detach(self) -> None:
        self._remove()

    # ------------------------------------------------------------------ hooks

    def _install(self) -> None:
        assert self.model is not None
        for index, (_, module) in enumerate(self.model.named_modules()):
            self._handles.append(module.register_forward_hook(self._forward_hook(index)))
            for param in module.parameters(recurse=False):
                if param.requires_grad:
                    self._handles.append(param.register_hook(self._grad_hook(index)))

    def _remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _forward_hook(self, index: int) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor) and output.is_floating_point():
                self._record_activation(index, output.detach())

        return hook

    def _record_activation(self, index: int, value: torch.Tensor) -> None:
        assert self._buffer is not None
        row = self._buffer[index]
        magnitude = value.abs().float()
        finite = magnitude < math.inf  # False for inf and NaN: one op
        largest = torch.where(finite, magnitude, 0.0).amax()
        torch.maximum(row[_ACT], largest, out=row[_ACT])
        row[_BAD] += (~finite).sum()

    def _grad_hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self._record_gradient(index, grad.detach())

        return hook

    def _record_gradient(self, index: int, grad: torch.Tensor) -> None:
        assert self._buffer is not None
        row = self._buffer[index]
        magnitude = grad.abs().float()  # scaled (fp16): what fp16 would have to hold
        finite = magnitude < math.inf
        scale = self._trainer.scaler.scale_tensor()  # 1 outside fp16
        largest = torch.where(finite, magnitude, 0.0).amax() / scale
        torch.maximum(row[_GRAD], largest, out=row[_GRAD])
        row[_OVER] += (~(magnitude <= FP16_MAX)).sum()
        row[_UNDER] += ((magnitude > 0) & (magnitude < FP16_TINY)).sum()
        row[_COUNT] += magnitude.numel()
        row[_BAD] += (~finite).sum()

    def _report(self, trainer: Any) -> None:
        assert self._buffer is not None
        table = self._buffer.tolist()  # the one host read of a sampled step
        self._buffer.zero_()
        modules = {}
        for name, row in zip(self.names, table, strict=True):
            count = row[_COUNT] or 1.0
            modules[name] = {
                "activation_max": row[_ACT],
                "gradient_max": row[_GRAD],
                "overflow": row[_OVER] / count,
                "underflow": row[_UNDER] / count,
                "nonfinite": row[_BAD],
            }
        self.on_report(RangeReport(trainer.step_count, trainer.policy.name, modules))
