"""What one training run reports: :class:`TrainResult`, and when a run counts as having
learned (:func:`learning_failure`).

Part of the plugin contract: import these from ``genesis_fp16_infrastructure.contract.plugin_api``
(or ``genesis_fp16.plugin_api``), which re-exports every name here.

>>> min_useful_steps(200)
92
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.agent_folder.run_history import (
    MARK_COLUMNS,
    NAME_CHARS,
    PRECISION_REASON_CHARS,
    REASON_CHARS,
    GateMark,
    LastRun,
    LiveMark,
    RunEntry,
    cut,
    drift_warning,
    finite,
    text,
)
from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    DriftReport,
    GateReport,
    LiveReport,
)
from genesis_fp16_infrastructure.record_codec import decode_record, encode_record
from genesis_fp16_infrastructure.training.precision.carried_scale import (
    CarriedScale,
    carry_after_run,
)
from genesis_fp16_infrastructure.training.precision.precision_names import (
    PrecisionName,
    RequestedName,
)
from genesis_fp16_infrastructure.training.reports import (
    Calibration,
    Demotion,
    EarlyStopReport,
    FaultBundle,
    RangeSummary,
)

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.contract.train_request import TrainRequest
    from genesis_fp16_infrastructure.training.run.fit import FitResult


# A run that took steps learned only when at least min_useful_steps(steps) of them were
# taken (not skipped). fp16's loss scale starts at 65536 and may halve up to 16 times
# before its first step is taken (each halving skips one step): those 16 are allowed,
# and of the rest at least half must be taken. A run of 18 steps or fewer needs one.
SCALER_CALIBRATION_SKIPS = 16
LEARNING_FAILURES = ("nonfinite_gradients", "nonfinite_loss")


def min_useful_steps(steps: int) -> int:
    """The fewest taken (not skipped) steps a run of ``steps`` steps needs to count as
    having learned: 0 for a run of no step, else ``max(1, (steps - 16) // 2)``.

    >>> min_useful_steps(200), min_useful_steps(10), min_useful_steps(0)
    (92, 1, 0)
    """
    return 0 if steps <= 0 else max(1, (steps - SCALER_CALIBRATION_SKIPS) // 2)


def learning_failure(
    steps: int, skipped: int, nonfinite_losses: int, guard_failed: bool, stopped: bool = False
) -> str | None:
    """Why a run with these counts learned nothing (one of :data:`LEARNING_FAILURES`), or
    None: the guard ended it at its last rung, or it ran to its end with fewer useful
    steps than :func:`min_useful_steps` (a run asked to stop early is judged by the guard
    alone). A non-finite loss is the cause when the run saw one."""
    short = not stopped and steps - skipped < min_useful_steps(steps)
    if not (guard_failed or short):
        return None
    return "nonfinite_loss" if nonfinite_losses > 0 else "nonfinite_gradients"


@dataclass(frozen=True)
class TrainResult:
    """The outcome of one training run; :meth:`to_json` is the ``train --json`` object.

    Besides the counts every run has, a run may report what the daemon exports when an
    agent has it, each in a typed field that is None when the agent reports none:
    ``precision_calibration`` (what a measured ``auto`` timed), ``early_stop``, ``data``
    (the records trained on, and what changed), ``phases`` (seconds per phase),
    ``device_memory_peak_bytes``, ``gate`` and ``drift`` (the promotion gate's verdict
    and the data's drift), ``live`` (the live watch's report), ``up_to_date_against``
    (why an up-to-date run took no step), ``components`` (per-component dtypes and
    flags), ``diagnostics`` (RL diagnostics, ``{name: float}``) and ``ranges`` (per-layer
    range statistics). The records are frozen and typed
    (:mod:`~genesis_fp16_infrastructure.contract.reports`); :meth:`to_json` writes each
    as its JSON object. ``extra`` is the agent's own record: the daemon reads nothing
    from it, ``train --json`` prints it whole.

    >>> result = TrainResult(
    ...     agent="my_agent", precision_requested="auto", precision_used="bf16",
    ...     precision_reason="default", device="cpu", steps=20, skipped_steps=0,
    ...     overflow_rate=0.0, loss_scale=1.0, final_train_loss=0.1, eval={"loss": 0.2},
    ...     samples_per_second=100.0, wall_seconds=2.0, checkpoint=None, quarantined=0,
    ...     phases={"read": 0.5, "train": 1.5})
    >>> f"{result.outcome}", TrainResult.from_json(result.to_json()).phases
    ('success', {'read': 0.5, 'train': 1.5})
    """

    agent: str
    precision_requested: RequestedName
    precision_used: PrecisionName
    precision_reason: str
    device: str
    steps: int
    skipped_steps: int
    overflow_rate: float
    loss_scale: float
    final_train_loss: float
    eval: Mapping[str, float]
    samples_per_second: float
    wall_seconds: float
    checkpoint: Path | None
    quarantined: int
    stopped_early: bool = False
    demotions: Sequence[Demotion] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    # What the steps ran as (eager, cuda_graph or cuda_graph_compiled) and why, like
    # precision_used/_reason.
    execution: str = "eager"
    execution_reason: str = "not reported by the agent"
    # Set when the run resolved a captured step but ran eagerly: one of FALLBACK_REASONS
    # (its first captured steps differed from eager ones, or a capture raised).
    execution_fallback: str | None = None
    # The model had already learned every record of the data: the run took no step.
    up_to_date: bool = False
    # Why the run learned nothing (see learning_failure), with what the counts were; None
    # for a run that learned. ``skipped_steps`` is this run's own; the resumed chain's
    # total is ``chain_skipped_steps``.
    failure: str | None = None
    failure_detail: str = ""
    chain_skipped_steps: int = 0
    # The run's model was judged worse than the served one by the promotion gate: it is
    # kept for inspection, and the served model goes on serving.
    rejected: bool = False
    # What the daemon exports when the agent reports it (genesis_fp16/jobs/recording.py).
    precision_calibration: Calibration | None = None
    early_stop: EarlyStopReport | None = None
    data: DataReport | None = None
    phases: Mapping[str, float] | None = None
    device_memory_peak_bytes: int | None = None
    gate: GateReport | None = None
    drift: DriftReport | None = None
    components: Mapping[str, str | bool] | None = None
    diagnostics: Mapping[str, float] | None = None
    live: LiveReport | None = None
    up_to_date_against: str | None = None
    # The flight recorder's bundles, oldest first, and the first of them
    # (``train --json``'s ``fault_bundle``: the one to replay).
    fault_bundles: Sequence[FaultBundle] = ()
    # The per-layer range statistics of the run's sampled steps (training.flight.range_stats):
    # the modules nearest fp16's overflow and underflow, and every module's totals.
    ranges: RangeSummary | None = None

    @property
    def fault_bundle(self) -> str | None:
        """The path of the run's first fault bundle; None when it wrote none."""
        return self.fault_bundles[0].path if self.fault_bundles else None

    def __post_init__(self) -> None:
        # Whoever built the result (from_fit, or a plugin of its own): a run that took
        # fewer useful steps than the bound learned nothing, and is not reported a success.
        if self.failure is None and not self.up_to_date:
            failure = learning_failure(
                self.steps, self.skipped_steps, 0, guard_failed=False, stopped=self.stopped_early
            )
            if failure is not None:
                useful = self.steps - self.skipped_steps
                detail = (
                    f"{useful} of {self.steps} step(s) taken "
                    f"(needs {min_useful_steps(self.steps)}), {self.skipped_steps} skipped"
                )
                object.__setattr__(self, "failure", failure)
                object.__setattr__(self, "failure_detail", detail)

    @property
    def outcome(self) -> Outcome:
        """``failed`` (its steps learned nothing: ``failure`` says why), ``up_to_date``
        (nothing new to learn), ``rejected`` (trained, and judged worse than the served
        model), ``stopped`` (asked to stop before its end) or ``success``: the daemon's
        outcome label, and ``outcome`` in ``to_json``."""
        if self.failure is not None:
            return Outcome.FAILED
        if self.up_to_date:
            return Outcome.UP_TO_DATE
        if self.rejected:
            return Outcome.REJECTED
        return Outcome.STOPPED if self.stopped_early else Outcome.SUCCESS

    @classmethod
    def from_fit(
        cls,
        request: TrainRequest,
        result: FitResult,
        *,
        quarantined: int = 0,
        extra: Mapping[str, Any] | None = None,
        **reported: Any,
    ) -> TrainResult:
        """Report a :func:`~genesis_fp16_infrastructure.training.run.fit` run for ``request``,
        truthfully: the precision used is the one the run ended in, after any demotion.
        ``reported``: the fields the run's recipe adds (``data``, ``gate``, ``phases``,
        ``checkpoint``, ...), set here so that the result is built once."""
        summary = result.summary
        steps, skipped = result.steps_run, result.skipped_run
        failure = learning_failure(
            steps,
            skipped,
            result.nonfinite_run,
            guard_failed=result.failure is not None,
            stopped=result.stopped_early,
        )
        detail = ""
        if failure is not None:
            detail = (
                f"{steps - skipped} of {steps} step(s) taken (needs {min_useful_steps(steps)}), "
                f"{skipped} skipped, {result.nonfinite_run} non-finite loss(es)"
            )
            if result.failure is not None:
                detail += f"; the guard at {result.precision.used}: {result.failure['detail']}"
        fields_: dict[str, Any] = dict(
            agent=request.agent,
            precision_requested=request.precision.requested,
            precision_used=result.precision.used,
            precision_reason=f"{request.precision_reason}; {result.precision.reason}",
            device=request.device,
            steps=steps,
            skipped_steps=skipped,
            overflow_rate=summary.overflow_rate,
            loss_scale=summary.loss_scale,
            final_train_loss=summary.train_loss,
            eval=dict(result.eval),
            samples_per_second=summary.samples_per_second,
            wall_seconds=summary.wall_seconds,
            checkpoint=result.checkpoint,
            quarantined=quarantined,
            stopped_early=result.stopped_early,
            demotions=result.demotions,
            extra=dict(extra or {}),
            precision_calibration=result.calibration,
            early_stop=result.early_stop,
            execution=result.execution.used,
            execution_reason=result.execution.reason,
            execution_fallback=result.execution.fallback,
            failure=failure,
            failure_detail=detail,
            chain_skipped_steps=summary.skipped_steps,
            fault_bundles=tuple(result.fault_bundles),
            ranges=result.ranges,
        )
        return cls(**{**fields_, **reported})

    def reason(self) -> str:
        """Why the run ended as it did, in one line: the learning failure, the gate's
        verdict, why the model was up to date, or that it trained."""
        if self.failure is not None:
            return f"learned nothing ({self.failure}): {self.failure_detail}".rstrip(": ")
        if self.up_to_date:
            why = self.up_to_date_against
            return f"up to date: {why}" if why else "up to date"
        if self.gate is not None:
            return f"{self.gate.outcome}: {self.gate.reason or 'no reason given'}"
        stopped = " (stopped early)" if self.stopped_early else ""
        return f"trained {self.steps} steps in {self.precision_used}{stopped}"

    def carried_scale(self) -> CarriedScale | None:
        """The loss scale this run carries to the agent's next: its last scale when it
        ended in fp16 undemoted, else None (the carried one is forgotten)."""
        demoted = bool(self.demotions)
        used, scale = self.precision_used, float(self.loss_scale)
        return carry_after_run(self.precision_requested, used, scale, demoted=demoted)

    def run_record(self, duration: float, source: str, when: float | None = None) -> LastRun:
        """The run's record as its agent folder keeps it (``last_run.json``, and the
        history's): ``source`` ran it (``daemon``, ``train``) in ``duration`` seconds,
        ending at ``when`` (default: now)."""
        figures = list(self.eval.items())[:12]
        return LastRun(
            outcome=self.outcome,
            precision=self.precision_used,
            precision_requested=self.precision_requested,
            finished_at=time.time() if when is None else when,
            duration_seconds=round(duration, 3),
            reason=cut(self.reason(), REASON_CHARS),
            source=source,
            steps=self.steps,
            eval={k: float(v) for k, v in figures if finite(v) is not None} or None,
            precision_reason=cut(self.precision_reason, PRECISION_REASON_CHARS),
        )

    def history_entry(self, record: LastRun) -> RunEntry:
        """The run's entry in its agent's history: ``record`` (its :meth:`run_record`)
        with what the result reports beyond it."""
        demotions = tuple(
            cut(f"{d.from_} to {d.to} at step {d.step}: {d.reason}") for d in self.demotions[:4]
        )
        drift = self.drift
        return RunEntry(
            run=record,
            loss_scale=finite(self.loss_scale),
            skipped_steps=self.skipped_steps,
            demotions=demotions,
            quarantined=self.quarantined,
            drift=drift_warning(drift.flagged, drift.label_shift_flagged) if drift else None,
            gate=None if self.gate is None or self.up_to_date else _gate_mark(self.gate),
            live=None if not self.live else LiveMark.of(self.live.to_json()),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``train --json`` object: JSON-ready, NaN and infinities as null, each
        record as its JSON object."""
        out = encode_record(self)
        out["checkpoint"] = str(self.checkpoint) if self.checkpoint else None
        out["fault_bundle"] = self.fault_bundle
        out["outcome"] = self.outcome
        return out

    @classmethod
    def from_json(cls, data: object) -> TrainResult:
        """The inverse of :meth:`to_json` (the torchrun ranks' result, in the daemon):
        each field read back as its type, or :class:`ReportError` in one line naming it."""
        if isinstance(data, Mapping) and data.get("checkpoint") == "":
            data = {**data, "checkpoint": None}
        found: TrainResult = decode_record(cls, data, "TrainResult")
        return found


def _gate_mark(gate: GateReport) -> GateMark:
    """The gate's verdict as the history marks it: both models' scores on its first set,
    every column's (at most MARK_COLUMNS, the candidate's primary first)."""
    candidate, served = (s.figures() if s else {} for s in (gate.candidate, gate.served))
    names = list({**candidate, **served})[:MARK_COLUMNS]
    named = gate.candidate or gate.served
    return GateMark(
        outcome=gate.outcome,
        set=None if named is None else text(named.name),
        primary=cut(names[0], NAME_CHARS) if names else None,
        candidate={cut(k, NAME_CHARS): candidate[k] for k in names if k in candidate},
        served={cut(k, NAME_CHARS): served[k] for k in names if k in served},
        candidate_id=text(gate.candidate_id),
        served_id=text(gate.served_id),
    )
