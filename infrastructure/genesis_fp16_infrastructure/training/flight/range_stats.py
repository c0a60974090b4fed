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
measures what that sampled step cost beyond a plain one and spaces the next samples so
that their cost stays within ``budget`` (0.5%, half the 1% bound) of the run's step
time: ``every = ceil(cost / (budget * plain))``, at least ``MIN_EVERY``. The clock is
read at three points per sample and nowhere else (:class:`SampleClock`): a plain step is
the time between two samples' windows over the steps between them (everything a run
does per step: its checks, logs and saves included), and a sample's cost is its window
(the hooks going in, the sampled step, the report, the next plain step) less two plain
steps. On the CPU the clock is this process's CPU time (other processes' load is not the
samples' cost); on a GPU, the wall clock after ``torch.cuda.synchronize()``, so that a
time is the device's work and not the launches' (the three reads sit at sample steps,
which read the device anyway). The first sample is a fixed cost: a run shorter than
``cost / budget`` plain steps pays more than ``budget``.

Cost: the steps in between pay nothing, eager or captured. The hooks go in after the
step before a sampled one and come out after it, and the sampled step's figures are
read in one host read. A captured CUDA graph replays what it recorded and runs no
Python hook, so on the captured path the sampled step is a separate one: it runs
eagerly with the hooks in (``Trainer.eager_next``), bypassing the graphs, and every
other step replays the plain graph, which never held a hook. On that path the first
sample waits for the graphs' first replay (never an eager warm-up), so that what it
reports and what its cost is measured against are the run's real steps. The sampled
step itself runs a few small ops per module
(benchmarks/range_stats_cost.py measures the whole: benchmarks/results/range_stats_cost_*).
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

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.precision_names import PrecisionName
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
class RangeStatsConfig(Bounded):
    """``every``: one sampled step in this many (>= 1); None: chosen by cost, so that
    sampling costs about ``budget`` of the run's step time (0.5%: half the 1% bound, a
    margin for the first sample and a noisy clock), with a first sample at the run's
    step ``first`` (>= 2: the steps before it time a plain step)."""

    SETTING = "range-stats"
    every: int | None = bounded(None, ge=1)
    budget: float = 0.005
    first: int = bounded(3, ge=2)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.budget <= 1.0:
            raise ValueError(f"RangeStatsConfig(budget={self.budget!r}): must be in (0, 1]")


@dataclass(frozen=True)
class RangeReport:
    """One sampled step: ``modules`` maps a module name to its row, a dict with
    ``activation_max``, ``gradient_max`` (unscaled), ``overflow`` and ``underflow``
    (fractions of its scaled gradient values fp16 cannot hold), ``nonfinite`` and the
    headrooms ``headroom_overflow`` and ``headroom_underflow`` (log2; inf: no value)."""

    step: int
    precision: PrecisionName
    modules: dict[str, dict[str, float]]


def merge_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Rows (modules, or one module's samples; at least one) as one: the largest values
    and fractions, the smallest headrooms, non-finite values summed."""
    out = {c: max(r[c] for r in rows) for c in _LARGEST}
    out.update({c: min(r[c] for r in rows) for c in _SMALLEST})
    out["nonfinite"] = sum(r["nonfinite"] for r in rows)
    return out


_LARGEST = ("activation_max", "gradient_max", "overflow", "underflow")
_SMALLEST = ("headroom_overflow", "headroom_underflow")


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

    Read only at :meth:`start`, :meth:`open` (the ``after_step`` before a sampled step)
    and :meth:`close` (the ``after_step`` after the step that follows it): a plain step
    is the time from the last ``start`` or ``close`` to an ``open``, over the steps
    between; a sample's cost is the time from its ``open`` to its ``close``, in plain
    steps, less the two plain steps that window holds.
    """

    def __init__(
        self, config: RangeStatsConfig, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.config = config
        self.clock = clock
        self.every = config.every or MIN_EVERY
        self.next = 0
        self.plain: deque[float] = deque(maxlen=8)  # per step, one figure per span
        self.costs: deque[float] = deque(maxlen=5)
        self._mark: tuple[int, float] | None = None  # a span of plain steps begins here
        self._window: tuple[int, float] | None = None  # a sample's step, the time before it

    def start(self, step: int) -> None:
        """A (new) trainer at ``step``: the next sample after it; the clock starts over."""
        fixed = self.config.every
        if fixed is not None:
            self.next = (step // fixed + 1) * fixed
        elif self.next <= step:
            self.next = step + self.config.first
        self._mark, self._window = (step, self.clock()), None

    def open(self, step: int) -> None:
        """The ``after_step`` of ``step``, before the sampled step ``step + 1``."""
        now = self.clock()
        if self._mark is not None and step > self._mark[0]:
            self.plain.append((now - self._mark[1]) / (step - self._mark[0]))
        self._mark, self._window = None, (step + 1, now)

    def closes(self, step: int) -> bool:
        """True at the ``after_step`` that ends a sample's window (the step after it)."""
        return self._window is not None and step == self._window[0] + 1

    def close(self, step: int) -> None:
        """End the window: the sample's cost, and a new span of plain steps."""
        now = self.clock()
        assert self._window is not None
        sampled, before = self._window
        plain = statistics.median(self.plain) if self.plain else 0.0
        if plain > 0:
            self.costs.append((now - before) / plain - 2.0)  # in plain steps
            if self.config.every is None:  # the samples spaced by what they cost
                wanted = math.ceil(max(statistics.median(self.costs), 0.0) / self.config.budget)
                self.every = min(max(wanted, MIN_EVERY), MAX_EVERY)
                self.next = sampled + self.every
        self._mark, self._window = (step, now), None

    def sampled(self, step: int) -> None:
        """Step ``step`` was sampled (reported now): the next sample, for now ``every``
        on; its cost, measured at :meth:`close`, may space them out."""
        self.next = step + self.every

    def cost(self) -> float | None:
        """A sampled step's cost beyond a plain one, in plain steps (median; None: none)."""
        return statistics.median(self.costs) if self.costs else None


def synced_clock(device: torch.device) -> Callable[[], float]:
    """The clock of a run on ``device``: on the CPU this process's CPU time; on a GPU the
    wall time once the device has finished what was launched (a host sync per read)."""
    if device.type == "cpu":
        return time.process_time
    if device.type == "cuda":

        def synced() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return synced
    return time.perf_counter


class RangeStats:
    """The sampled per-module statistics of one model; see the module docstring."""

    def __init__(
        self, config: RangeStatsConfig, on_report: Callable[[RangeReport], None] | None = None
    ) -> None:
        self.on_report = on_report
        self.clock = SampleClock(config)  # the config too
        self.names: list[str] = []
        self.samples = 0
        self._run: dict[str, dict[str, float]] = {}  # per module: its samples, merged
        self._last: RangeReport | None = None
        self._buffer: torch.Tensor | None = None
        self._handles: list[Any] = []
        self._waiting = False  # a captured path not yet replayed: no sample scheduled
        self._trainer: Any = None

    def follow(self, trainer: Any) -> None:
        """Watch ``trainer``'s model (a new run's, or a demoted one's), before its first
        step. No hook goes in until the step before a sampled one."""
        if trainer is self._trainer:
            return
        self._remove()
        self._trainer = trainer
        self.names = [name or "(model)" for name, _ in trainer.model.named_modules()]
        device = trainer.policy.device
        self._buffer = torch.zeros(len(self.names), len(COLUMNS), device=device)
        self.clock.clock = synced_clock(device)
        self._waiting = True
        self._begin(trainer)

    def after_step(self, trainer: Any) -> None:
        """After every step: report a sampled step; hooks in before the next sampled one.

        Between samples this reads nothing, not even a clock."""
        self.follow(trainer)
        if self._waiting:
            self._begin(trainer)
            return
        step = trainer.step_count
        if self.clock.closes(step):
            self.clock.close(step)
        if step == self.clock.next and self._handles:
            self._report(trainer)
            self.clock.sampled(step)
            self._remove()
        if not self._handles and step == self.clock.next - 1:
            self._arm(trainer, step)

    def _begin(self, trainer: Any) -> None:
        """Schedule the first sample once the trainer's steps are the run's real ones:
        eager steps, or a captured path past its warm-up (a graph captured and replayed,
        or a step run past the bound)."""
        graphs = trainer.graphs
        if graphs is not None and graphs.captured_steps + graphs.eager_steps == 0:
            return
        self._waiting = False
        step = trainer.step_count
        self.clock.start(step)
        if step == self.clock.next - 1:
            self._arm(trainer, step)

    def _arm(self, trainer: Any, step: int) -> None:
        """Hooks in for the coming step, which runs eagerly (a replay runs no hook)."""
        self.clock.open(step)
        self._install()
        trainer.eager_next = trainer.graphs is not None

    def detach(self) -> None:
        """No hooks left on the model, and no eager step asked of its trainer."""
        self._remove()
        if self._trainer is not None:
            self._trainer.eager_next = False

    def summary(self, k: int) -> RangeSummary | None:
        """The run's sampled steps as one record: per module its largest values and
        smallest headrooms over the samples, the ``k`` nearest overflow and the ``k``
        nearest underflow; None when no step was sampled."""
        if self._last is None:
            return None
        rows = self._run
        by_over = sorted(rows, key=lambda m: rows[m]["headroom_overflow"])[:k]
        by_under = sorted(rows, key=lambda m: rows[m]["headroom_underflow"])[:k]
        return RangeSummary(
            samples=self.samples,
            last_step=self._last.step,
            precision=self._last.precision,
            every=self.clock.every,
            sample_cost=self.clock.cost() if self.clock.config.every is None else None,
            nearest_overflow=tuple(_module_range(m, rows[m]) for m in by_over),
            nearest_underflow=tuple(_module_range(m, rows[m]) for m in by_under),
            total=_module_range(TOTAL, merge_rows(list(rows.values()))),
        )

    # ------------------------------------------------------------------ hooks

    def _install(self) -> None:
        for index, (_, module) in enumerate(self._trainer.model.named_modules()):
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
            # module.training: a validation or a recorder's forward between the hooks
            # going in and the sampled step is not the sampled step.
            if module.training and isinstance(output, torch.Tensor) and output.is_floating_point():
                assert self._buffer is not None
                row = self._buffer[index]
                magnitude = output.detach().abs().float()
                finite = magnitude < math.inf  # False for inf and NaN: one op
                largest = torch.where(finite, magnitude, 0.0).amax()
                torch.maximum(row[_ACT], largest, out=row[_ACT])
                row[_BAD] += (~finite).sum()

        return hook

    def _grad_hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            assert self._buffer is not None
            row = self._buffer[index]
            magnitude = grad.detach().abs().float()  # scaled (fp16): what fp16 would have to hold
            finite = magnitude < math.inf
            scale = self._trainer.scaler.scale_tensor()  # 1 outside fp16
            largest = torch.where(finite, magnitude, 0.0).amax()
            torch.maximum(row[_SCALED], largest, out=row[_SCALED])
            torch.maximum(row[_GRAD], largest / scale, out=row[_GRAD])
            row[_OVER] += (~(magnitude <= FP16_MAX)).sum()
            row[_UNDER] += ((magnitude > 0) & (magnitude < FP16_TINY)).sum()
            row[_COUNT] += magnitude.numel()
            row[_BAD] += (~finite).sum()

        return hook

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
            kept = [self._run[name]] if name in self._run else []
            self._run[name] = merge_rows([*kept, modules[name]])  # one merged row per module
        report = RangeReport(trainer.step_count, trainer.policy.name, modules)
        self.samples += 1
        self._last = report
        if self.on_report is not None:
            self.on_report(report)


def _module_range(name: str, row: dict[str, float]) -> ModuleRange:
    """``row`` (keyed by ``ModuleRange``'s fields) as a record; an inf headroom (no
    value) is None."""
    fields: dict[str, Any] = {**row, **{c: None for c in _SMALLEST if not math.isfinite(row[c])}}
    return ModuleRange(module=name, **fields)
