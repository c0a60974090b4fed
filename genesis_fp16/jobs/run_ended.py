"""The end of a run, once: :class:`RunEnded`, delivered to each concern that keeps
something of it, in one fixed order (:data:`SUBSCRIBERS`).

The job (genesis_fp16/jobs/agent_job.py) makes the event when the run returned a result,
failed, or was stopped while its child started (the result then a
:class:`~genesis_fp16.jobs.run_failure.RunError`), and publishes it. Its subscribers, in
order:

1. *health*: what ``/healthz`` says of the agent (a host fault, a run that learned nothing);
2. *folder records*: the run's record and history entry (``status``), and its time when
   healthy (a restart's last-success gauge starts from it);
3. *guard memory*: the run's demotions and fault bundles announced in the outbox, counted
   and logged, and the remembered floor (genesis_fp16/jobs/guard_state.py);
4. *carried scale*: the fp16 loss scale the agent's next run starts from;
5. *history bound*: what a killed transition left recovered, the model history pruned,
   and what the prune read exported (genesis_fp16/jobs/model_history.py:bound_agent_history);
6. *each metrics family*: precision and execution, steps, the run's report, RL
   diagnostics, the gate and drift, ranges, the live watch, the recent verdicts;
7. *the tracker*: the run's curves get its result and are closed;
8. *the log line*: ``training run finished`` (or ``training run failed``);
9. *the run's count*, last: whoever sees ``genesis_fp16_training_runs_total`` move (a
   dashboard, a test) finds the run's other series, its record and its log line there.

A subscriber that raises stops none of the others: its error is logged in one line
naming it (with its traceback) and counted as a failure of the run
(``genesis_fp16_run_failures_total{reason}``, ``error`` for a bug), and the run keeps its
record and its count by outcome.

Each subscriber takes from the event what its concern needs (the agent, the result, the
folder, one metrics family) and hands only that on: the job's context stays here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from genesis_fp16.jobs import guard_state
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.model_history import bound_agent_history
from genesis_fp16.jobs.recording import log_ended, record_scale
from genesis_fp16.jobs.run_failure import RunError, failure_reason
from genesis_fp16.jobs.run_request import expected_precision, precision_request
from genesis_fp16.metrics.diagnostics_export import export_diagnostics
from genesis_fp16.metrics.metric_names import HEALTHY_OUTCOMES
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import Outcome, PrecisionName, RunEntry

log = structlog.get_logger("genesis_fp16.jobs")


@dataclass(frozen=True)
class RunEnded:
    """One run's end: the run, its result (or why it has none), how long the job took;
    ``rerun``: a reload stopped it and the job trains again at once; ``at``: when it ended
    (the record's and the last-success gauge's time)."""

    run: Run
    result: TrainResult | RunError
    duration: float
    rerun: bool = False
    at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, run: Run, result: TrainResult | RunError) -> RunEnded:
        """The end of ``run`` now, whether its job reruns it (a failed run never does)."""
        if isinstance(result, RunError):
            stopped = result.outcome == "stopped"
        else:
            stopped = result.stopped_early
        return cls(run, result, run.duration(), stopped and run.rerun())

    @property
    def outcome(self) -> str:
        return str(self.result.outcome)


Subscriber = Callable[[RunEnded], None]


def publish(event: RunEnded) -> None:
    """Deliver ``event`` to each subscriber in order (:data:`SUBSCRIBERS`); one that
    raises is logged and counted, and the next one runs."""
    for subscriber in SUBSCRIBERS:
        try:
            subscriber(event)
        except Exception as exc:
            _subscriber_failed(event, subscriber, exc)


def _subscriber_failed(event: RunEnded, subscriber: Subscriber, exc: Exception) -> None:
    run = event.run
    reason, host = failure_reason(exc)
    run.ctx.metrics.run_failures.labels(agent=run.agent, reason=reason).inc()
    log.error(
        "the end of a run not fully recorded",
        subscriber=subscriber.__name__.lstrip("_"),
        error=host or f"{type(exc).__name__}: {exc}",
        exc_info=exc,
    )


def _health(event: RunEnded) -> None:
    ctx, agent, result = event.run.ctx, event.run.agent, event.result
    if isinstance(result, RunError):
        degraded = result.health(event.run.device)
        if degraded is not None:  # every run would fail, or train and lose its work
            ctx.degraded[agent] = degraded
        return
    ctx.degraded.pop(agent, None)  # a run that wrote its checkpoint: the disk is fine again
    if result.failure is not None:  # steps were run, none (or too few) taken: alerted
        why = f"last run learned nothing ({result.failure}): {result.failure_detail}"
        ctx.unlearned[agent] = why
    elif result.outcome == Outcome.SUCCESS:
        ctx.unlearned.pop(agent, None)


def _folder_records(event: RunEnded) -> None:
    folder, result = event.run.folder, event.result
    if isinstance(result, RunError):
        entry = RunEntry.of_error(result.outcome, result.record_reason, event.duration, "daemon")
        folder.save_run(entry)
        return
    folder.save_run(result.history_entry(event.duration, "daemon"))
    if result.outcome in HEALTHY_OUTCOMES:
        folder.save_last_success(event.at)  # logs a failure, never raises


def _guard_memory(event: RunEnded) -> None:
    run, result = event.run, event.result
    if not isinstance(result, RunError):
        guard_state.record_run(run.settings, run.ctx.metrics, run.agent, result, run.folder)


def _carried_scale(event: RunEnded) -> None:
    run, result = event.run, event.result
    if not isinstance(result, RunError):
        record_scale(run.settings, run.agent, result, run.folder)


def _history_bound(event: RunEnded) -> None:
    # A failed run too: a gate that could not decide left a candidate.
    result = event.result
    if not (isinstance(result, RunError) and result.outcome == "stopped"):
        reported = () if isinstance(result, RunError) else result.transitions
        bound_agent_history(event.run.settings, event.run.ctx.metrics, event.run.folder, reported)


def _precision(event: RunEnded) -> None:
    run, result = event.run, event.result
    if isinstance(result, RunError):
        return
    shown: PrecisionName | None = None if event.rerun else result.precision_used
    # A rerun's precision is on the gauge since the reload. A reload that changed the
    # precision as the run ended, after its last should_stop: the next run's from now on,
    # at what decide answers its request (the guard's memory included), not this run's
    # until the next one (up to a schedule interval away); a measured auto with no kept
    # measurement waits for that run.
    if not event.rerun and run.precision_changed():
        planned, _ = precision_request(run.ctx.settings, run.agent, folder=run.folder)
        shown = expected_precision(planned, run.device)
    run.ctx.metrics.export_execution(run.agent, result, shown)


def _steps(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):
        event.run.ctx.metrics.export_final_loss(event.run.agent, event.result)


def _report(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):
        event.run.ctx.metrics.report.run_ended(event.run.agent, event.result, event.at)


def _rl_diagnostics(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):
        export_diagnostics(event.run.ctx.metrics.rl, event.run.agent, event.result)


def _gate(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):
        event.run.ctx.metrics.promotion.run_ended(event.run.agent, event.result)


def _ranges(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):
        event.run.ctx.metrics.ranges.export(event.run.agent, event.result)


def _live_watch(event: RunEnded) -> None:
    """The live watch's figures and verdict (the result's ``live``), logged when it found
    a regression: rolled back, or held by the operator's pin."""
    agent, result = event.run.agent, event.result
    if isinstance(result, RunError):
        return
    live, gate = result.live, None if result.up_to_date else result.gate
    if live is None and gate is None:
        return
    promoted = gate is not None and gate.outcome == Outcome.PROMOTED
    event.run.ctx.metrics.live.observe(agent, live, promoted)
    if live is not None and live.rolled_back:
        log.warning("served model rolled back: live regression", agent=agent, live=live.to_json())
    elif live is not None and live.regression:
        log.warning("live regression not rolled back", agent=agent, live=live.to_json())


def _recent_verdicts(event: RunEnded) -> None:
    if not isinstance(event.result, RunError):  # the window with this run's verdict
        event.run.ctx.metrics.verdicts.export_folder(event.run.agent, event.run.folder)


def _tracker(event: RunEnded) -> None:
    """The run's curves get its result and are closed; the writes they lost are counted
    (a full disk, say); the curves up to a failure stay readable."""
    run, tracker = event.run, event.run.tracker
    if tracker is None:
        return
    if not isinstance(event.result, RunError):
        tracker.log_result(event.result)
    run.ctx.metrics.tracking_write_failures.labels(agent=run.agent).inc(tracker.close())


def _log_line(event: RunEnded) -> None:
    log_ended(event.run.agent, event.run.id, event.result, event.duration)


def _count(event: RunEnded) -> None:
    run, result = event.run, event.result
    if isinstance(result, RunError):
        failure, loss = result.reason, None
    else:
        failure, loss = result.failure, result.eval.get("loss")
    run.ctx.metrics.count_run(run.agent, event.outcome, event.duration, failure, loss, event.at)


# The order of the module docstring; tests/genesis_fp16/jobs/test_run_ended.py holds it.
SUBSCRIBERS: tuple[Subscriber, ...] = (
    _health,
    _folder_records,
    _guard_memory,
    _carried_scale,
    _history_bound,
    _precision,
    _steps,
    _report,
    _rl_diagnostics,
    _gate,
    _ranges,
    _live_watch,
    _recent_verdicts,
    _tracker,
    _log_line,
    _count,
)
