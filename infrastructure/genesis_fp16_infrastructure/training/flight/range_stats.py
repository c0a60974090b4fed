"""Per-layer range statistics, sampled: how close each module runs to fp16's limits.

One step now and then is watched (sampled): per module, the largest magnitude of its
outputs (activations) and of its parameters' gradients (unscaled, and as fp16 held them,
scaled), the fraction of those scaled gradients that fp16 could not hold (over 65504, or
non-zero under its smallest subnormal, 2**-24, so flushed to zero), the count of
non-finite values, and two headrooms in doublings (log2): how far the largest activation
sits under 65504 (``headroom_overflow``: 0 is the edge; an activation that overflows is
not saved by the loss scale, its step is skipped) and how far the largest scaled gradient
sits over 2**-24 (``headroom_underflow``: at 0 the module's whole gradient flushes)::

    stats = RangeStats(RangeStatsConfig(), on_report=print)
    stats.follow(trainer)            # before the first step (and after a demotion)
    # fit() calls stats.after_step(trainer) after every step
    stats.summary(k=8)               # the run's RangeSummary (training.reports)

Which steps: ``RangeStatsConfig(every=N)`` samples one step in N. The default
(``every=None``) samples step ``first`` of the run (so a short run is covered), then
measures what that sampled step cost beyond a plain one (the wall time around it less
two plain steps, the median of the recent plain steps' times) and spaces the next samples
so that their cost stays within ``budget`` (0.5%, half the 1% bound) of the run's step
time: ``every = ceil(cost / (budget * plain))``, at least ``MIN_EVERY``. On the CPU the
clock is this process's CPU time (other processes' load is not the samples' cost); on
a GPU, the wall clock. The first sample is a
fixed cost: a run shorter than ``cost / budget`` plain steps pays more than ``budget``.

Cost: an eager run pays nothing on the steps in between: the hooks are installed after
the step before a sampled one and removed after it, and the sampled step's figures
are read in one host read. The sampled step itself runs a few small ops per module
(benchmarks/flight_recorder.py measures it: benchmarks/results/flight_recorder_59.md).
A captured CUDA graph cannot gain or lose hooks between replays, so there the
hooks are installed before the capture and run inside the graph on every step,
writing device buffers that keep the largest values since the last read; only the
sampled steps read them (one host read) and zero them. That path is written for the
GPU and not yet measured there (``make gpu-check`` has its line).
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.reports import ModuleRange, RangeSummary

FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # the smallest fp16 subnormal: a non-zero below it flushes to zero
COLUMNS = (
    *("activation_max", "gradient_max", "gradient_scaled_max"),
    *("overflow", "underflow", "count", "nonfinite"),
)
_ACT, _GRAD, _SCALED, _OVER, _UNDER, _COUNT, _BAD = range(len(COLUMNS))
# A cost-chosen interval is never below this: a sample whose cost measured as nothing (a
# noisy clock) does not turn every other step into a sampled one.
MIN_EVERY = 10
MAX_EVERY = 1_000_000
TOTAL = "(all)"
# The modules a run's summary names, nearest overflow and nearest underflow each: what
# crosses to the daemon stays small whatever the model's size.
REPORTED_MODULES = 8


@dataclass(frozen=True)
class RangeStatsConfig:
    """``every``: one sampled step in this many (>= 1); None: chosen by cost, so that
    sampling costs about ``budget`` of the run's step time (0.5%: half the 1% bound, a
    margin for the first sample and a noisy clock), with a first sample at the run's
    step ``first`` (>= 2: the steps before it time a plain step)."""

    every: int | None = None
    budget: float = 0.005
    first: int = 3

    def __post_init__(self) -> None:
        if self.every is not None and self.every < 1:
            raise ValueError(f"RangeStatsConfig(every={self.every!r}): must be >= 1 or None")
        if not 0.0 < self.budget <= 1.0:
            raise ValueError(f"RangeStatsConfig(budget={self.budget!r}): must be in (0, 1]")
        if self.first < 2:
            raise ValueError(f"RangeStatsConfig(first={self.first!r}): must be >= 2")


@dataclass(frozen=True)
class RangeReport:
    """One sampled step: ``modules`` maps a module name to its row, a dict with
    ``activation_max``, ``gradient_max`` (unscaled), ``overflow`` and ``underflow``
    (fractions of its scaled gradient values fp16 cannot hold), ``nonfinite`` and the
    headrooms ``headroom_overflow`` and ``headroom_underflow`` (log2; inf: no value)."""

    step: int
    precision: PrecisionName
    modules: dict[str, dict[str, float]]

    def nearest_limits(self, k: int) -> list[str]:
        """The ``k`` modules nearest fp16's limits, nearest first (see :func:`nearness`)."""
        ranked = sorted(self.modules, key=lambda m: nearness(self.modules[m]), reverse=True)
        return ranked[:k]

    def totals(self) -> dict[str, float]:
        """Every module together: the largest values and fractions, the smallest
        headrooms, non-finite summed."""
        return merge_rows(list(self.modules.values()))


def merge_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Rows (modules, or one module's samples) as one: the largest values and
    fractions, the smallest headrooms, non-finite values summed."""
    rows = rows or [_empty_row()]
    out = {c: max(r[c] for r in rows) for c in _LARGEST}
    out.update({c: min(r[c] for r in rows) for c in _SMALLEST})
    out["nonfinite"] = sum(r["nonfinite"] for r in rows)
    return out


_LARGEST = ("activation_max", "gradient_max", "overflow", "underflow")
_SMALLEST = ("headroom_overflow", "headroom_underflow")


def _empty_row() -> dict[str, float]:
    return {**dict.fromkeys((*_LARGEST, "nonfinite"), 0.0), **dict.fromkeys(_SMALLEST, math.inf)}


def nearness(row: dict[str, float]) -> float:
    """How near fp16's limits a module runs, in doublings: its largest activation's
    log2 distance below 65504 counted as closeness, or any overflow, underflow or
    non-finite value (nearest of all)."""
    if row["nonfinite"] or row["overflow"]:
        return math.inf
    act = row["activation_max"]
    over = math.log2(act / FP16_MAX) if act > 0 else -64.0  # 0: at the limit; < 0 below
    return max(over, row["underflow"] * 64.0 - 64.0)


def headrooms(activation_max: float, gradient_scaled_max: float) -> tuple[float, float]:
    """``(overflow, underflow)`` headroom in doublings (inf where there is no value).

    >>> [round(h, 3) for h in headrooms(2048.0, 2.0**-20)]
    [4.999, 4.0]
    """
    over = math.log2(FP16_MAX / activation_max) if activation_max > 0 else math.inf
    under = math.log2(gradient_scaled_max / FP16_TINY) if gradient_scaled_max > 0 else math.inf
    return over, under


class SampleClock:
    """Which steps are sampled, and what a sampled step costs; see the module docstring.

    :meth:`tick` at the start of every ``after_step`` times the steps: an interval with
    no hooks put in or taken out is a plain step's time; the two intervals around a
    sampled step (the hooks going in, the step, the report) less two plain steps are
    what that sample cost, read at the tick after it.
    """

    def __init__(
        self, config: RangeStatsConfig, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.config = config
        self.clock = clock
        self.every = config.every or MIN_EVERY
        self.next = 0
        self.plain: deque[float] = deque(maxlen=32)
        self.costs: deque[float] = deque(maxlen=5)
        self._ticks: tuple[float | None, float | None] = (None, None)  # (before last, last)
        self._quiet = False  # the interval now running puts in or takes out no hooks
        self._window: tuple[int, float] | None = None  # a sample and the tick before it

    def start(self, step: int) -> None:
        """A (new) trainer at ``step``: the next sample after it; the clock starts over."""
        fixed = self.config.every
        if fixed is not None:
            self.next = (step // fixed + 1) * fixed
        elif self.next <= step:
            self.next = step + self.config.first
        self._ticks, self._quiet, self._window = (None, None), False, None

    def tick(self, step: int) -> None:
        """The start of ``after_step`` after step ``step``."""
        now = self.clock()
        last = self._ticks[1]
        if last is not None and self._quiet:
            self.plain.append(now - last)
        if self._window is not None and step == self._window[0] + 1 and self.plain:
            plain = statistics.median(self.plain)
            self.costs.append((now - self._window[1]) / plain - 2.0)  # in plain steps
            self._choose(self._window[0])
        self._window = None
        self._ticks, self._quiet = (last, now), True

    def busy(self) -> None:
        """Hooks go in or out in this ``after_step``: the coming interval is not plain."""
        self._quiet = False

    def sampled(self, step: int) -> None:
        """Step ``step`` was sampled (reported at this tick): the next sample, for now
        ``every`` on; the cost, at the next tick, may space them out."""
        before = self._ticks[0]
        self._window = (step, before) if before is not None else None
        self.next = step + self.every
        self._quiet = False

    def cost(self) -> float | None:
        """A sampled step's cost beyond a plain one, in plain steps (median; None: none)."""
        return statistics.median(self.costs) if self.costs else None

    def _choose(self, sampled: int) -> None:
        cost = self.cost()
        if self.config.every is not None or cost is None:
            return
        wanted = math.ceil(max(cost, 0.0) / self.config.budget)
        self.every = min(max(wanted, MIN_EVERY), MAX_EVERY)
        self.next = sampled + self.every


class RangeStats:
    """The sampled per-module statistics of one model; see the module docstring."""

    def __init__(
        self, config: RangeStatsConfig, on_report: Callable[[RangeReport], None] | None = None
    ) -> None:
        self.config = config
        self.on_report = on_report
        self.clock = SampleClock(config)
        self.model: nn.Module | None = None
        self.names: list[str] = []
        self.samples = 0
        self._run: dict[str, list[dict[str, float]]] = {}  # per module: its samples, merged
        self._last: RangeReport | None = None
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
        # On the CPU, this process's CPU seconds: on a shared machine the other
        # processes' load does not pass for the samples' cost. A GPU's steps are
        # asynchronous: the wall clock there.
        self.clock.clock = time.process_time if device.type == "cpu" else time.perf_counter
        self.clock.start(trainer.step_count)
        if self._always or trainer.step_count == self.clock.next - 1:
            self._install()

    def after_step(self, trainer: Any) -> None:
        """After every step: report a sampled step; hooks in before the next sampled one."""
        self.follow(trainer)
        step = trainer.step_count
        self.clock.tick(step)
        if step == self.clock.next and self._buffer is not None and self._handles:
            self._report(trainer)
            self.clock.sampled(step)
            if not self._always:
                self._remove()
        if self._always and trainer.graphs is None:
            self._always = False  # fell back to eager: sample as eager steps do
            self._remove()
        if not self._always and not self._handles and step == self.clock.next - 1:
            self.clock.busy()
            self._install()

    def detach(self) -> None:
        self._remove()

    def summary(self, k: int) -> RangeSummary | None:
        """The run's sampled steps as one record: per module its largest values and
        smallest headrooms over the samples, the ``k`` nearest overflow and the ``k``
        nearest underflow; None when no step was sampled."""
        if self._last is None:
            return None
        rows = {name: merge_rows(samples) for name, samples in self._run.items()}
        by_over = sorted(rows, key=lambda m: rows[m]["headroom_overflow"])[:k]
        by_under = sorted(rows, key=lambda m: rows[m]["headroom_underflow"])[:k]
        return RangeSummary(
            samples=self.samples,
            last_step=self._last.step,
            precision=self._last.precision,
            every=self.clock.every,
            sample_cost=self.clock.cost() if self.config.every is None else None,
            nearest_overflow=tuple(_module_range(m, rows[m]) for m in by_over),
            nearest_underflow=tuple(_module_range(m, rows[m]) for m in by_under),
            total=_module_range(TOTAL, merge_rows(list(rows.values()))),
        )

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
        largest = torch.where(finite, magnitude, 0.0).amax()
        torch.maximum(row[_SCALED], largest, out=row[_SCALED])
        torch.maximum(row[_GRAD], largest / scale, out=row[_GRAD])
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
            over, under = headrooms(row[_ACT], row[_SCALED])
            modules[name] = {
                "activation_max": row[_ACT],
                "gradient_max": row[_GRAD],
                "overflow": row[_OVER] / count,
                "underflow": row[_UNDER] / count,
                "nonfinite": row[_BAD],
                "headroom_overflow": over,
                "headroom_underflow": under,
            }
            kept = self._run.setdefault(name, [])
            kept[:] = [merge_rows([*kept, modules[name]])]  # one merged row per module
        report = RangeReport(trainer.step_count, trainer.policy.name, modules)
        self.samples += 1
        self._last = report
        if self.on_report is not None:
            self.on_report(report)


def _module_range(name: str, row: dict[str, float]) -> ModuleRange:
    def finite_or_none(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return ModuleRange(
        module=name,
        activation_max=row["activation_max"],
        gradient_max=row["gradient_max"],
        overflow=row["overflow"],
        underflow=row["underflow"],
        nonfinite=row["nonfinite"],
        headroom_overflow=finite_or_none(row["headroom_overflow"]),
        headroom_underflow=finite_or_none(row["headroom_underflow"]),
    )
