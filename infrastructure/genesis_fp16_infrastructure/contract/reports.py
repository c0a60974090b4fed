"""What one training run reports: :class:`TrainResult`, when a run counts as having
learned (:func:`learning_failure`), and the records it reports beside its counts: frozen,
typed, each with ``to_json`` and ``from_json`` (:mod:`~genesis_fp16_infrastructure.record_codec`).

``TrainResult`` is part of the plugin contract: a plugin imports it from
``genesis_fp16.plugin_api``, the daemon from ``genesis_fp16_infrastructure.api``.
It holds the records below; the library's components and the retrain recipe build them,
the daemon reads their fields.
Their JSON is the ``train --json`` object's (and the files the recipe keeps), key for
key as before they were typed; ``from_json`` refuses what does not fit in one line.

- :class:`DataReport`: the records a run trained on, and what changed (``data``);
- :class:`DriftReport`: how the new records differ from the served model's (``drift``);
- :class:`GateReport`: the promotion gate's verdict (``gate``), its sets'
  :class:`GateComparison`, its models' :class:`ScoresOn` (``{metric: figure}`` maps);
- :class:`LiveReport`: the live watch's report of the served model against its
  predecessor on new records (``live``).

The gate's and the watch's figures (:class:`GateComparison`, :class:`ScoresOn`,
:class:`LiveReport` with its :class:`LiveFigures`, :class:`WatchSegment` and
:class:`SelfTest`) are defined beneath the served-model lifecycle's records, which keep
them (a verdict, a served entry), in
:mod:`~genesis_fp16_infrastructure.agent_folder.lifecycle_figures`, a layer below the
contract, and are the contract's names here.

The training component's records (early stop, demotions, fault bundles, calibration,
range statistics) are its own, in :mod:`~genesis_fp16_infrastructure.training.reports`.
This module imports no torch; no component imports it (tests/test_layering.py).

>>> DataReport.from_json({"records": 40, "fingerprint": "abc", "change": "first"}).change
'first'
>>> DataReport.from_json({"records": 40, "fingerprint": "abc", "change": "maybe"})
Traceback (most recent call last):
...
genesis_fp16_infrastructure.record_codec.ReportError: DataReport.change: one of \
'first', 'unchanged', 'changed' expected, got 'maybe'
>>> min_useful_steps(200)
92
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    GateComparison,
    LiveReport,
    ScoresOn,
    finite,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    LiveFigures as LiveFigures,  # the contract's names (module docstring)
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import SelfTest as SelfTest
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    WatchSegment as WatchSegment,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.agent_folder.run_records import (
    MARK_COLUMNS,
    NAME_CHARS,
    PRECISION_REASON_CHARS,
    REASON_CHARS,
    GateMark,
    LastRun,
    LiveMark,
    RunEntry,
    cut,
    text,
)
from genesis_fp16_infrastructure.precision_names import PrecisionName, RequestedName
from genesis_fp16_infrastructure.record_codec import OMIT_NONE, ROUND, Record
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import (
    CarriedScale,
    carry_after_run,
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

_OPTIONAL = {OMIT_NONE: True}


@dataclass(frozen=True)
class DataReport(Record):
    """The records a run trained on (their count and fingerprint) and what changed since
    the served model's: ``first`` (no served model), ``unchanged`` or ``changed``, with
    the counts of the change where there is a served model."""

    records: int
    fingerprint: str
    change: Literal["first", "unchanged", "changed"]
    previous_records: int | None = field(default=None, metadata=_OPTIONAL)
    new: int | None = field(default=None, metadata=_OPTIONAL)
    removed: int | None = field(default=None, metadata=_OPTIONAL)
    relabelled: int | None = field(default=None, metadata=_OPTIONAL)
    # An up-to-date run decided from the data manifest (recipes.retrain.freshness): how,
    # and how many changed files it hashed.
    checked_by: str | None = field(default=None, metadata=_OPTIONAL)
    files_hashed: int | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class DriftReport(Record):
    """Drift and label shift of the records new since the served model's training
    (recipes.retrain.drift): each feature's distance and threshold, the flagged ones,
    the success rate's shift and its threshold."""

    new_records: int
    reference_records: int
    sampled: Mapping[str, int]
    features: Mapping[str, float]
    thresholds: Mapping[str, float]
    flagged: tuple[str, ...]
    label_shift: float
    label_shift_threshold: float
    label_shift_flagged: bool

    @property
    def any_flagged(self) -> bool:
        """A feature, or the label shift, passed its threshold."""
        return bool(self.flagged) or self.label_shift_flagged

    def warning(self) -> str | None:
        """The run history's line: the features flagged, and whether the success rate
        shifted; None when nothing was flagged."""
        if not self.any_flagged:
            return None
        what = [f"features {', '.join(self.flagged[:8])}"] if self.flagged else []
        what += ["the success rate"] if self.label_shift_flagged else []
        return cut("drift flagged: " + " and ".join(what))


@dataclass(frozen=True)
class GateReport(Record):
    """The promotion gate's verdict on a candidate (judging.run, judging.gate): what
    became of it and why, each set's comparison, the scores of the set that decided, the
    model it was held against (``served_id``: None for the first model) and the file
    served if promoted. The candidate's verdict file holds this record and what its
    writers stamp on it (when, a rollback's): lifecycle_records.Verdict reads it back."""

    outcome: Outcome
    reason: str
    comparisons: tuple[GateComparison, ...] = ()
    seconds: float = field(default=0.0, metadata={ROUND: 4})
    precision: PrecisionName | None = None
    candidate: ScoresOn | None = None
    served: ScoresOn | None = None
    served_id: str | None = None
    checkpoint: str | None = None
    candidate_id: str | None = field(default=None, metadata=_OPTIONAL)
    # An inconclusive verdict's (issue 62): the records its undecided sets would need, and
    # the data digest it was judged on (judged again when the data moves on).
    records_needed: int | None = field(default=None, metadata=_OPTIONAL)
    judged_on: str | None = field(default=None, metadata=_OPTIONAL)
    # Issue 68: the records the verdict stands on: ``held_out`` (neither model trained on
    # them) or ``training_data`` (a plugin whose candidate names none it trained on);
    # None: records no model trains on (rlhf_ppo's evaluation episodes), or older files.
    evidence: Literal["held_out", "training_data"] | None = field(default=None, metadata=_OPTIONAL)


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
    steps: int,
    skipped: int,
    nonfinite_losses: int | None = None,
    guard: str | None = None,
    stopped: bool = False,
) -> tuple[str, str] | None:
    """Why a run with these counts learned nothing (one of :data:`LEARNING_FAILURES`) and
    the counts in words, or None: the guard ended it at its last rung (``guard``: where and
    why), or it ran to its end with fewer useful steps than :func:`min_useful_steps` (a run
    asked to stop early is judged by the guard alone). A non-finite loss is the cause when
    the run saw one (``nonfinite_losses`` None: not counted)."""
    short = not stopped and steps - skipped < min_useful_steps(steps)
    if guard is None and not short:
        return None
    detail = (
        f"{steps - skipped} of {steps} step(s) taken (needs {min_useful_steps(steps)}), "
        f"{skipped} skipped"
    )
    if nonfinite_losses is not None:
        detail += f", {nonfinite_losses} non-finite loss(es)"
    if guard is not None:
        detail += f"; the guard at {guard}"
    return ("nonfinite_loss" if nonfinite_losses else "nonfinite_gradients"), detail


@dataclass(frozen=True)
class CommittedChange(Record):
    """One change of the served model a run committed (a journal entry of the pointer,
    ``agent_folder.transaction.Committed.entries``), as the run reports it: its journal
    number, its kind (serve's ``how``: ``first``, ``gate``, ``adopt``; ``rollback``,
    ``unpin``, ``trim``, ``repair``) and a rollback's reason (``live_regression``: the
    live watch's). The daemon counts promotions and rollbacks from these."""

    seq: int
    kind: str
    reason: str | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True)
class TrainResult(Record):
    """The outcome of one training run; :meth:`to_json` is the ``train --json`` object.

    Besides the counts every run has, a run may report what the daemon exports when an
    agent has it, each in a typed field that is None when the agent reports none:
    ``precision_calibration`` (what a measured ``auto`` timed), ``early_stop``, ``data``
    (the records trained on, and what changed), ``phases`` (seconds per phase),
    ``device_memory_peak_bytes``, ``gate`` and ``drift`` (the promotion gate's verdict
    and the data's drift), ``live`` (the live watch's report), ``up_to_date_against``
    (why an up-to-date run took no step), ``components`` (per-component dtypes and
    flags), ``diagnostics`` (RL diagnostics, ``{name: float}``) and ``ranges`` (per-layer
    range statistics); a judged run reports ``transitions``, the changes of the served
    model its transactions committed (the daemon's promotion and rollback counters read
    them). The records are frozen and typed
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
    # The changes of the served model this run's transactions committed, oldest first
    # (a judged run's: ``judging.run.run_judged``): the daemon counts them as reported.
    transitions: Sequence[CommittedChange] = ()

    @property
    def fault_bundle(self) -> str | None:
        """The path of the run's first fault bundle; None when it wrote none."""
        return self.fault_bundles[0].path if self.fault_bundles else None

    def __post_init__(self) -> None:
        # Whoever built the result (from_fit, or a plugin of its own): a run that took
        # fewer useful steps than the bound learned nothing, and is not reported a success.
        if self.failure is None and not self.up_to_date:
            found = learning_failure(self.steps, self.skipped_steps, stopped=self.stopped_early)
            if found is not None:
                object.__setattr__(self, "failure", found[0])
                object.__setattr__(self, "failure_detail", found[1])

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
        failed = result.failure  # the guard's, at its last rung
        guard = None if failed is None else f"{result.precision.used}: {failed['detail']}"
        found = learning_failure(steps, skipped, result.nonfinite_run, guard, result.stopped_early)
        failure, detail = found or (None, "")
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
            wall_seconds=result.seconds,  # the run's, not the steps' clock
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

    def history_entry(self, duration: float, source: str, when: float | None = None) -> RunEntry:
        """The run's entry in its agent's history: its record (the entry's ``run``, which
        ``last_run.json`` holds alone: ``source`` ran it, ``daemon`` or ``train``, in
        ``duration`` seconds, ending at ``when``, default now) with what the result
        reports beyond it."""
        demotions = tuple(
            cut(f"{d.from_} to {d.to} at step {d.step}: {d.reason}") for d in self.demotions[:4]
        )
        figures = list(self.eval.items())[:12]
        run = LastRun(
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
        return RunEntry(
            run=run,
            loss_scale=finite(self.loss_scale),
            skipped_steps=self.skipped_steps,
            demotions=demotions,
            quarantined=self.quarantined,
            drift=self.drift.warning() if self.drift else None,
            gate=None if self.gate is None or self.up_to_date else _gate_mark(self.gate),
            live=None if not self.live else LiveMark.of(self.live.to_json()),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``train --json`` object: JSON-ready, NaN and infinities as null, each
        record as its JSON object."""
        out = super().to_json()
        out["checkpoint"] = str(self.checkpoint) if self.checkpoint else None
        out["fault_bundle"] = self.fault_bundle
        out["outcome"] = self.outcome
        return out

    @classmethod
    def from_json(cls, data: object, where: str = "") -> TrainResult:
        """The inverse of :meth:`to_json` (the torchrun ranks' result, in the daemon):
        each field read back as its type, or :class:`ReportError` in one line naming it."""
        if isinstance(data, Mapping) and data.get("checkpoint") == "":
            data = {**data, "checkpoint": None}
        found: TrainResult = super().from_json(data, where)
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
