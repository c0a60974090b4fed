"""The records the training component reports: frozen, typed, each with ``to_json`` and
``from_json`` (:mod:`~genesis_fp16_infrastructure.record_codec`). The contract's
``TrainResult`` holds them (``contract.reports`` names them with the recipe's);
training makes them, below the contract, so they live here.

- :class:`EarlyStopReport`: early stopping's record (``early_stop``);
- :class:`Demotion`: one of the precision guard's demotions (``demotions``);
- :class:`Calibration`: what a measured ``auto`` timed (``precision_calibration``), of
  :class:`Measured` rows; also the calibration cache's file (``precision.kept_measurements``);
- :class:`RangeSummary`: the per-layer range statistics of a run's sampled steps
  (``ranges``), of :class:`ModuleRange` rows;
- :class:`TrainingSummary`: what the trainer has done so far, reported at each log
  interval (``on_log``) and at the end (``summary``).

This module imports no torch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.record_codec import (
    JSON,
    Record,
    encode_record,
)
from genesis_fp16_infrastructure.training.precision.choice import (
    LOAD_BOUND as LOAD_BOUND,
)
from genesis_fp16_infrastructure.training.precision.choice import (
    LOAD_SAMPLES as LOAD_SAMPLES,
)
from genesis_fp16_infrastructure.training.precision.choice import (
    REVALIDATE,
    among,
    choose,
    reuse_refused,
)
from genesis_fp16_infrastructure.training.precision.choice import (
    under_load as under_load,
)


@dataclass(frozen=True)
class EarlyStopReport(Record):
    """Early stopping's record of a run (training.run.early_stop): the best evaluation
    and its step, how many ran, why the run stopped, the last metrics and the history
    of ``(step, value)``."""

    metric: str
    mode: Literal["min", "max"]
    best: float | None
    best_step: int | None
    evaluations: int
    since_best: int
    patience: int | None
    every_steps: int
    stop_reason: str
    last: Mapping[str, float] = field(default_factory=dict)
    history: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Demotion(Record):
    """One demotion by the precision guard: from which precision to which, the trigger
    (``reason``, one of the guard's REASONS) and its ``detail``, the step it fired at and
    the step rolled back to."""

    from_: PrecisionName = field(metadata={JSON: "from"})
    to: PrecisionName
    reason: str
    step: int
    rollback_step: int
    detail: str = ""


@dataclass(frozen=True)
class FaultBundle(Record):
    """One bundle the flight recorder wrote (training.flight.recorder): the file to
    replay, why (``first_nonfinite``, ``demotion``), at which step, in which precision,
    and its size."""

    path: str
    reason: str
    step: int
    precision: PrecisionName
    bytes: int


# 2: rows per (precision, execution) and the chosen execution; 3: each row's p10 and p90;
# 4: a key of validators (driver, device name, capability, TF32, bucketed batch), honest
# windows (replays only), the cost's breakdown, and why it replaced the one kept before
CACHE_VERSION = 4


@dataclass(frozen=True)
class Measured(Record):
    """One timed row of a calibration: a precision in an execution, its median, fastest
    and slowest step, and its 10th and 90th percentile step, in milliseconds, over
    ``samples`` samples of ``steps`` steps (on CUDA a sample is a block of steps timed by
    events; elsewhere one step; 0: not known, a row made by hand or kept by version 3)."""

    precision: PrecisionName
    execution: str
    median_ms: float
    min_ms: float
    max_ms: float
    steps: int
    p10_ms: float = 0.0  # 0: not known (a row made by hand); NaN would break ==
    p90_ms: float = 0.0
    samples: int = 0

    @property
    def spread(self) -> float:
        """p90 over p10 (NaN when not known): 1.0 is perfectly steady.

        >>> Measured("fp32", "eager", 2.0, 1.8, 4.0, 10, p10_ms=1.9, p90_ms=3.8).spread
        2.0
        """
        return self.p90_ms / self.p10_ms if self.p10_ms > 0 else math.nan

    def describe(self) -> str:
        """``fp32 eager 1.9 ms (1.8-2.3)``: the median, then p10-p90."""
        spread = "" if math.isnan(self.spread) else f" ({_ms(self.p10_ms)}-{_ms(self.p90_ms)})"
        return f"{self.precision} {self.execution} {_ms(self.median_ms)} ms{spread}"


def _ms(value: float) -> str:
    """About three significant figures, never in exponent form: 0.012, 1.9, 35.2, 1234."""
    if math.isnan(value):
        return "?"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}" if value >= 1 else f"{value:.3f}"


@dataclass(frozen=True)
class Calibration(Record):
    """What ``auto`` measured and chose (training.run.calibration). ``skipped`` maps a
    row to why it was not timed; ``key`` is what the measurement holds for (its
    validators: the device and its driver, torch, the model, the bucketed batch shape,
    the candidates, TF32). Its JSON is also the cache file's, with ``version``.

    - ``seconds``: the calibration's wall clock, everything it did; ``phases`` its
      breakdown (``setup``, ``build``, ``warmup``, ``capture``, ``timed``, ``other``,
      summing to it); ``init_s`` the process's one-time costs paid just before its clock
      started (``torch._dynamo``'s import, a CUDA context), never part of ``seconds``.
    - ``cached``: read from the cache (this run timed only the winner again), with
      ``revalidated`` saying how its live median compared; neither is kept.
    - ``remeasured``: why the measurement kept before was not reused (a key field that
      changed, named with both values; under load; a winner that no longer timed the
      same): kept with it, for ``genesis-fp16 precision show``."""

    chosen: PrecisionName
    reason: str
    rows: tuple[Measured, ...]
    skipped: Mapping[str, str]
    key: Mapping[str, str]
    seconds: float
    measured_at: float = field(default_factory=time.time)
    cached: bool = False
    execution: str = "eager"
    bound: str = ""  # what limited the cost: the run's share of steps, or the clock
    remeasured: str = ""  # why the measurement kept before was not reused
    init_s: float = 0.0
    phases: Mapping[str, float] = field(default_factory=dict)
    revalidated: str = ""  # a reused one: its winner's live median against the kept one

    VERSION = CACHE_VERSION

    def to_json(self) -> dict[str, Any]:
        """The run's record (``train --json``'s ``precision_calibration``), ``cached`` and
        ``revalidated`` included; its ``version`` last."""
        return {**encode_record(self), "version": CACHE_VERSION}

    def table(self) -> str:
        """The measurement as ``genesis-fp16 precision show`` prints it: the reason, each
        row's median and spread against fp32 (the chosen one marked, a row outside its
        candidates marked ignored), the rows not timed and why, its cost, why it was
        measured and its key."""
        fp32 = next((r.median_ms for r in self.rows if r.precision == "fp32"), None)
        header = "precision  execution   median ms   p10-p90 ms          vs fp32"
        lines = [f"auto: {self.reason}", header]
        candidates = self.candidates()
        choice = self._rows_choice(candidates)
        for r in self.rows:
            # Marked where its candidates' rows choose it and the record says the same.
            picked = r is choice and (r.precision, r.execution) == (self.chosen, self.execution)
            mark = "  <- chosen" if picked else ""
            if r.precision not in candidates:
                mark = f"  (not among its candidates, {','.join(candidates)}: ignored)"
            ratio = fp32 / r.median_ms if fp32 is not None and r.median_ms else float("nan")
            spread = f"{r.p10_ms:.3f}-{r.p90_ms:.3f}" if r.p10_ms > 0 else "-"
            lines.append(
                f"{r.precision:<10} {r.execution:<11} {r.median_ms:>9.3f}   {spread:<19} "
                f"{ratio:.2f}x{mark}"
            )
        lines += [f"{name:<10} not timed: {why}" for name, why in self.skipped.items()]
        phases = ", ".join(f"{k} {v:.3f}" for k, v in self.phases.items())
        lines.append(
            f"measured in {self.seconds:.2f} s ({phases or 'no breakdown'}; bound: {self.bound}), "
            f"after {self.init_s:.2f} s of the process's one-time init"
        )
        if self.remeasured:  # why it replaced the one kept before: a changed key field, load
            lines.append(f"measured because: {self.remeasured}")
        lines.append("keyed by: " + ", ".join(f"{k}={v}" for k, v in sorted(self.key.items())))
        return "\n".join(lines)

    def candidates(self) -> tuple[str, ...]:
        """The precisions it timed for (its key's ``candidates``): a run reads only their rows."""
        return tuple(n for n in str(self.key.get("candidates", "")).split(",") if n)

    def reusable_winner(self, candidates: Sequence[str]) -> Measured | str:
        """The row a run that times ``candidates`` would train in, which it times again
        before it reuses this measurement; a str: why it may not (it is measured again).
        Only the rows of ``candidates`` are read; they must choose what the record says it
        chose (an edited row does not decide), and load must not have made the choice."""
        rows = among(self.rows, candidates)
        choice = self._rows_choice(candidates)
        if choice is None:
            return "the kept measurement has no fp32 row among its candidates"
        if (choice.precision, choice.execution) != (self.chosen, self.execution):
            return (
                f"the kept rows choose {choice.precision} {choice.execution}, the record says "
                f"{self.chosen} {self.execution}"
            )
        refused = reuse_refused(rows)
        if refused is not None:
            return f"the kept measurement was {refused}"
        return choice

    def _rows_choice(self, candidates: Sequence[str]) -> Measured | None:
        """The row ``choose`` picks among the rows of ``candidates``; None without fp32's."""
        rows = among(self.rows, candidates)
        if not any(r.precision == "fp32" for r in rows):
            return None
        precision, execution, _ = choose(rows)
        return next(r for r in rows if (r.precision, r.execution) == (precision, execution))

    def next_run(self) -> str:
        """What the next ``auto`` run does with this measurement, and why (``precision show``)."""
        winner = self.reusable_winner(self.candidates())
        if isinstance(winner, str):
            return f"next auto run: measures again ({winner})"
        return (
            f"next auto run: times {winner.precision} {winner.execution} again, the row its "
            f"candidates' rows choose; within {REVALIDATE:.0%} of the kept "
            f"{winner.median_ms:.3f} ms it reuses this measurement and trains in "
            f"{winner.precision}, else (or if a field of its key changed) it measures again"
        )

    def cache_json(self) -> dict[str, Any]:
        """The cache file's: ``cached`` and ``revalidated`` are about a run that reused
        it, not about the measurement, and are left out (a read of it says cached)."""
        return {k: v for k, v in self.to_json().items() if k not in ("cached", "revalidated")}

    @classmethod
    def from_json(cls, data: object, where: str = "") -> Calibration:
        found = super().from_json(data, where)  # this VERSION's alone
        assert isinstance(data, Mapping)
        return replace(found, cached=bool(data.get("cached", True)))


@dataclass(frozen=True)
class ModuleRange(Record):
    """One module's range statistics over a run's sampled steps
    (training.flight.range_stats): the largest activation and gradient (unscaled)
    magnitudes, the largest fractions of its scaled gradient values fp16 could not hold
    (``overflow``, ``underflow``), its non-finite values summed, and its smallest
    headrooms in doublings (log2): ``headroom_overflow`` of the largest activation under
    65504, ``headroom_underflow`` of the largest scaled gradient over 2**-24 (None: the
    module has no such values, e.g. a container's own gradient)."""

    module: str
    activation_max: float
    gradient_max: float
    overflow: float
    underflow: float
    nonfinite: float
    headroom_overflow: float | None
    headroom_underflow: float | None


@dataclass(frozen=True)
class RangeSummary(Record):
    """A run's per-layer range statistics: ``samples`` sampled steps, the last at
    ``last_step`` in ``precision``; the modules nearest fp16's overflow and nearest its
    underflow (at most ``k`` of each, nearest first: bounded, whatever the model's size)
    and ``total``, every module together (``module="(all)"``). ``every`` is the sampling
    interval in force at the end, ``sample_cost`` what a sampled step cost beyond a plain
    one, in plain steps (None: not measured, or a fixed ``every``)."""

    samples: int
    last_step: int
    precision: PrecisionName
    every: int
    sample_cost: float | None
    nearest_overflow: tuple[ModuleRange, ...]
    nearest_underflow: tuple[ModuleRange, ...]
    total: ModuleRange

    @property
    def overhead(self) -> float | None:
        """The sampling's estimated share of the run's step time (``sample_cost / every``)."""
        return None if self.sample_cost is None else max(self.sample_cost, 0.0) / self.every

    def nearest(self, k: int, *limits: str) -> dict[str, ModuleRange]:
        """By module: the ``k`` modules nearest each limit (fp16's ``overflow``, then its
        ``underflow``, or ``limits``' alone), a module nearest both once, then ``total``."""
        limits = limits or ("overflow", "underflow")
        near = (r for limit in limits for r in getattr(self, f"nearest_{limit}")[:k])
        return {**{row.module: row for row in near}, self.total.module: self.total}


@dataclass(frozen=True)
class TrainingSummary(Record):
    """What a :class:`~genesis_fp16_infrastructure.training.Trainer` has done so far, read from
    the device.

    Building one is a host sync, so the trainer does it only at log intervals and when
    asked through ``trainer.summary()``. The daemon turns these into metrics::

        def on_log(s: TrainingSummary) -> None:
            print(f"step {s.step}: loss {s.train_loss:.4f}, skipped {s.skipped_steps}")

    Fields:

    - ``precision``: the precision that ran (``fp32``, ``bf16`` or ``fp16``).
    - ``step``: optimizer steps so far, skipped ones included (continues across resume).
    - ``optimizer_steps``: steps whose update was applied; ``skipped_steps``: steps
      skipped because a gradient overflowed (only fp16 skips).
    - ``overflow_rate``: ``skipped_steps / step`` over the whole run;
      ``overflow_rate_window``: the same over the last ``overflow_window`` steps.
    - ``loss_scale``: the current loss scale (1.0 when loss scaling is off).
    - ``grad_norm``: the unscaled gradient norm of the last applied step, before clipping.
    - ``train_loss``: mean of the finite step losses since the previous log interval
      (NaN when there was none); ``nonfinite_losses``: micro-batch losses that were
      inf or NaN, over the whole run.
    - ``samples``, ``samples_per_second``, ``wall_seconds``: counted by this process since
      its first step (a resumed run starts these afresh).
    - ``unstable``: the loss scaler gave up (overflowing at its floor for too long).
    """

    precision: PrecisionName
    step: int
    optimizer_steps: int
    skipped_steps: int
    overflow_rate: float
    overflow_rate_window: float
    loss_scale: float
    grad_norm: float
    train_loss: float
    nonfinite_losses: int
    samples: int
    samples_per_second: float
    wall_seconds: float
    unstable: bool
