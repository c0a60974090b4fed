"""Record one run of a job: its progress as it trains, then its result or its failure,
as metrics, one log line (``training run finished``) and the run's curves.

The counters start from the checkpoint the run resumes (:func:`record_start`); each
progress report advances them (:func:`record_progress`); the result sets the rest
(:func:`record_result`), the run's count last. A run that failed is counted by reason
(:func:`record_failure`); one stopped while its child started is neither a success nor
a failure (:func:`record_stopped`). Whatever the outcome, the run's curves are closed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.config.storage import storage_error
from genesis_fp16.jobs import guard_state
from genesis_fp16.jobs.job_state import JobContext, Run
from genesis_fp16.jobs.run_request import expected_precision, precision_request
from genesis_fp16.jobs.supervising import RunHung
from genesis_fp16.launch.devices import device_lost
from genesis_fp16.launch.launcher import LaunchError, RunStopped
from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.metrics.diagnostics_export import export_diagnostics
from genesis_fp16.metrics.metric_names import HEALTHY_OUTCOMES
from genesis_fp16.metrics.tracking import RunTracker
from genesis_fp16.plugin_api import TrainRequestError, TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
    Outcome,
    RunEntry,
    ServedPointer,
    ServedPointerError,
    TrainingSummary,
)

log = structlog.get_logger("genesis_fp16.jobs")


def record_start(run: Run) -> None:
    """Where the run's counters start: the totals of the checkpoint it will resume, as its
    plan read it (``Run.request.snapshot.state.resume``)."""
    snapshot = run.request.snapshot if run.request is not None else None  # no second read
    state = snapshot.state if snapshot is not None else None
    resume = state.resume if state is not None else None
    if resume is None:
        raise RuntimeError("record_start() needs the run planned with its resume point")
    run.ctx.metrics.start_run(run.agent, resumed_totals(resume.summary))


def record_progress(run: Run, progress: Progress, summary: TrainingSummary) -> None:
    """One progress report of the run (its ``on_log``): the metrics, the curves, a log
    line that reads ``step 150/240, 62%, ETA 40 s`` (genesis_fp16/launch/progress_text.py)."""
    # A run a reload is stopping reports its last steps; the gauge shows the next run's,
    # from the moment the reload swaps the settings (before the run's next should_stop).
    with run.ctx.gauge_lock:
        run.ctx.metrics.observe_summary(run.agent, summary, show_precision=not run.reloaded())
    if run.tracker is not None:
        run.tracker.log_summary(summary)
    text = progress.text(summary.step, summary.wall_seconds)
    log.info(
        text,
        progress=True,
        step=summary.step,
        total_steps=progress.total,
        precision=summary.precision,
        train_loss=summary.train_loss,
        loss_scale=summary.loss_scale,
        skipped_steps=summary.skipped_steps,
    )


def record_result(run: Run, result: TrainResult, device: str, rerun: bool) -> None:
    """A run that returned a result (``rerun``: a reload stopped it, and the job trains
    again at once): its metrics and log line, then its curves."""
    ctx, agent = run.ctx, run.agent
    # A reload that changed the precision as the run ended, after its last should_stop: no
    # rerun, but the gauge shows the next run's precision from the reload on, as for a
    # rerun, not this run's until the next one (up to a schedule interval away).
    switched = not rerun and run.precision_changed()
    try:
        # A rerun's precision is on the gauge since the reload: the stopped run's stays off it.
        _finish(run, result, show_precision=not (rerun or switched))
    except Exception as exc:  # trained, but not recorded (a disk): a failed run, one line
        record_failure(run, device, exc)
        return
    if switched:
        # The gauge at what decide answers the next run's request (the guard's memory
        # included); a measured auto with no kept measurement waits for that run.
        planned, _ = precision_request(ctx.settings, agent, folder=run.folder)
        expected = expected_precision(planned, device)
        if expected is not None:
            ctx.metrics.set_precision(agent, expected)
    if run.tracker is not None:
        run.tracker.log_result(result)
    _close_tracker(ctx, agent, run.tracker)


def record_stopped(run: Run, exc: RunStopped) -> None:
    """A run stopped before any result (its child still starting): no step, no failure."""
    duration = run.duration()
    log.info(
        "training run finished",
        outcome="stopped",
        reason=str(exc),
        steps=0,
        duration_seconds=round(duration, 3),
    )
    _end_without_result(run, "stopped", str(exc), duration)


def record_failure(run: Run, device: str, exc: BaseException) -> None:
    """Count and log a failed run in one line where the cause is known (a refusal, the
    disk, a lost device), with a traceback where it is the plugin's bug."""
    ctx, agent = run.ctx, run.agent
    duration = run.duration()
    # host: the host's fault, not the plugin's (the disk, a lost device): one line, no traceback.
    reason, host = _failure_reason(exc)
    ctx.metrics.run_failures.labels(agent=agent, reason=reason).inc()
    if reason == "device_unavailable":
        # Every run on it fails until the GPU is back (or the daemon restarts on another).
        ctx.degraded[agent] = f"device {device} unavailable: {host}"
    elif host is not None:
        ctx.degraded[agent] = host  # every run would train and then lose its work
    one_line = isinstance(exc, TrainRequestError | LaunchError)
    why = host or (str(exc) if one_line else f"{type(exc).__name__}: {exc}")
    # One line for a refusal, a storage error naming its path, a lost device, sys.exit();
    # the plugin's bug gets its traceback too, under the same one-line error.
    said, bug = why, not (one_line or host)
    if isinstance(exc, SystemExit) and not host:
        said, bug = f"the plugin called sys.exit({exc.code!r})", False
    emit = log.exception if bug else log.error
    emit("training run failed", error=said, duration_seconds=round(duration, 3))
    _bound_history(ctx, run.folder)  # a gate that could not decide left a candidate too
    _end_without_result(run, "failed", f"{reason}: {why}", duration)


def _end_without_result(run: Run, outcome: str, why: str, duration: float) -> None:
    """A run stopped or failed before a result: its record, its count, its curves closed
    (the curves up to a failure stay readable)."""
    run.folder.save_run(RunEntry.of_error(outcome, why, duration, "daemon"))
    run.ctx.metrics.finish_run(run.agent, outcome, duration, None, time.time())
    _close_tracker(run.ctx, run.agent, run.tracker)


def _finish(run: Run, result: TrainResult, show_precision: bool) -> None:
    ctx, agent, folder, duration = run.ctx, run.agent, run.folder, run.duration()
    outcome = result.outcome  # success, failed (learned nothing), stopped, or up_to_date
    ctx.degraded.pop(agent, None)  # a run that wrote its checkpoint: the disk is fine again
    if result.failure is not None:  # steps were run, none (or too few) taken: alerted
        ctx.metrics.run_failures.labels(agent=agent, reason=result.failure).inc()
        why = f"last run learned nothing ({result.failure}): {result.failure_detail}"
        ctx.unlearned[agent] = why
    elif outcome == "success":
        ctx.unlearned.pop(agent, None)
    guard_state.record_run(ctx.settings, ctx.metrics, agent, result, folder)
    record_scale(ctx.settings, agent, result, folder)
    if show_precision:
        ctx.metrics.set_precision(agent, result.precision_used)
    ctx.metrics.set_execution(agent, result.execution)
    if result.execution_fallback is not None:
        ctx.metrics.execution_fallbacks.labels(agent=agent, reason=result.execution_fallback).inc()
    if result.steps and result.final_train_loss is not None:
        # The run's own final loss (under torchrun, rank 0's last log was its interval's).
        ctx.metrics.train_loss.labels(agent=agent).set(float(result.final_train_loss))
    _bound_history(ctx, folder)  # before the run is counted: a count means a pruned folder
    _export_report(ctx, agent, result)
    log.info(
        "training run finished",
        agent=agent,
        run_id=run.id,
        outcome=outcome,
        precision_requested=result.precision_requested,
        precision_used=result.precision_used,
        precision_reason=result.precision_reason,
        execution=result.execution,
        execution_reason=result.execution_reason,
        execution_fallback=result.execution_fallback,
        steps=result.steps,
        skipped_steps=result.skipped_steps,
        chain_skipped_steps=result.chain_skipped_steps,
        failure=result.failure,
        failure_detail=result.failure_detail or None,
        final_train_loss=result.final_train_loss,
        eval=dict(result.eval),
        # per-component dtypes (rlhf_ppo's preset)
        components=None if result.components is None else dict(result.components),
        early_stop=_early_stop_summary(result),
        data=None if result.data is None else result.data.to_json(),
        quarantined=result.quarantined,  # malformed records skipped, each file named above
        phases=dict(result.phases) if result.phases is not None else None,
        wall_seconds=result.wall_seconds,  # the run's own; duration_seconds: the job's
        gate=None if result.gate is None else result.gate.to_json(),
        drift=None if result.drift is None else result.drift.to_json(),
        checkpoint=str(result.checkpoint) if result.checkpoint else None,
        duration_seconds=round(duration, 3),
    )
    # The run's record for `genesis-fp16 status`, and its entry in the page's history.
    now = time.time()
    folder.save_run(result.history_entry(duration, "daemon"))
    ctx.metrics.verdicts.export_folder(agent, folder)  # the window with this run's verdict
    if outcome in HEALTHY_OUTCOMES:  # a restart's last-success gauge starts from it
        folder.save_last_success(now)  # logs a failure, never raises
    # Counted last: whoever sees the count (a dashboard, a test) finds the run's other
    # series, its log line and its last-run record already there.
    ctx.metrics.finish_run(agent, outcome, duration, result.eval.get("loss"), now)


def _export_report(ctx: JobContext, agent: str, result: TrainResult) -> None:
    """What the run reports beyond its counts, each typed field the agent filled."""
    report = ctx.metrics.report
    report.set_auto_measurement(agent, result)
    report.set_eval(agent, result)
    report.set_data(agent, result, time.time())
    report.count_quarantined(agent, result)
    if result.phases is not None:  # where the run's time went (se_darwin, judged runs)
        report.set_phases(agent, result.phases)
    if result.device_memory_peak_bytes is not None:
        report.set_device_memory_peak(agent, result.device_memory_peak_bytes)
    export_diagnostics(ctx.metrics.rl, agent, result)
    ctx.metrics.promotion.export_gate(agent, result)
    ctx.metrics.promotion.export_drift(agent, result)
    ctx.metrics.ranges.export(agent, result)
    _export_live(ctx, agent, result)


def _export_live(ctx: JobContext, agent: str, result: TrainResult) -> None:
    """The live watch's figures and verdict (the result's ``live``), logged when it
    found a regression: rolled back, or held by the operator's pin."""
    live = result.live
    gate = None if result.up_to_date else result.gate
    if live is None and gate is None:
        return
    ctx.metrics.live.observe(agent, live, gate is not None and gate.outcome == Outcome.PROMOTED)
    if live is not None and live.rolled_back:
        log.warning("served model rolled back: live regression", agent=agent, live=live.to_json())
    elif live is not None and live.regression:
        log.warning("live regression not rolled back", agent=agent, live=live.to_json())


def record_scale(
    settings: Settings, agent: str, result: TrainResult, folder: AgentFolder | None = None
) -> None:
    """Carry the run's last loss scale to the agent's next run, or forget it (a demotion, a
    precision other than fp16); a run that took no step (up to date) leaves it as it is.

    An fp16 run that starts without a checkpoint of its own would start at the initial
    scale and skip its first steps finding it again: ``plan_request`` puts the carried
    scale (``AgentState.initial_scale``, from ``loss_scale.json``:
    :mod:`genesis_fp16_infrastructure.training.precision.loss_scaler_config`) in
    ``TrainRequest.initial_loss_scale`` when the request asks for the precision the carried
    run asked for. ``precision show`` prints it and ``precision reset`` forgets it.
    ``folder``: the agent's, as the run holds it (None: made here)."""
    if result.steps == 0:
        return
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    carried = result.carried_scale()
    try:
        folder.save_carried_scale(carried)
    except OSError as exc:
        path = str(folder.loss_scale_path)
        log.error("cannot write the carried loss scale", path=path, error=str(exc))


def bound_history(
    settings: Settings, models: CheckpointsFolder
) -> tuple[list[Path], ServedPointer | None]:
    """Prune ``models`` to the bounded history (the last GENESIS_FP16_SERVED_HISTORY_KEEP
    served ones, rejected candidates for GENESIS_FP16_REJECTED_KEEP_DAYS), after the
    recovery of what the run, killed or not, left to finish: after each run of the
    daemon's, and of an operator's ``train`` in a state folder. The candidates removed,
    and the pointer as it stands after. A pointer that cannot be read prunes nothing:
    logged, never a guess."""
    try:
        removed, pointer = models.prune(
            settings.served_history_keep,
            settings.rejected_keep_days,
            recover_first=True,  # what the run, killed or not, left: on the prune's one read
        )
    except (ServedPointerError, OSError) as exc:
        log.error("model history not pruned", error=str(exc))
        return [], None  # none pruned, no pointer read
    for path in removed:
        log.info("model history: removed candidate", candidate=path.name)
    return removed, pointer


def _bound_history(ctx: JobContext, folder: AgentFolder) -> None:
    """Bound the model history of the agent of ``folder`` (:func:`bound_history`) and
    export the bytes its folder holds, with what the pointer's journal holds."""
    settings, agent, models = ctx.settings, folder.agent, folder.checkpoints
    removed, pointer = bound_history(settings, models)  # pointer None: none served, or unread
    # Each rollback the pointer's journal holds, counted once: a run killed after its
    # rollback reached the pointer reports nothing, and its rollback still happened.
    if pointer is not None and pointer.journal:  # a served model (the series exist from 0)
        new = ctx.metrics.live.cursor.new(agent, pointer.journal)
        ctx.metrics.live.count_rollbacks(agent, new)
        ctx.metrics.promotion.count_promotions(agent, new)
    if pointer is not None:  # watched, or not: the gauge then follows the clock
        ctx.metrics.live.observe_pointer(agent, pointer, settings.live_watch_idle_seconds)
    ctx.metrics.promotion.pruned.labels(agent=agent).set(len(removed))
    ctx.metrics.promotion.state_bytes.labels(agent=agent).set(models.disk_bytes())


def _early_stop_summary(result: TrainResult) -> dict[str, Any] | None:
    """The log line's part of early stopping's record (its history stays in train --json)."""
    record = result.early_stop
    if record is None:
        return None
    return {
        "best_step": record.best_step,
        "best": record.best,
        "evaluations": record.evaluations,
        "stop_reason": record.stop_reason,
    }


def _close_tracker(ctx: JobContext, agent: str, tracker: RunTracker | None) -> None:
    """Close the run's curves and count the writes they lost (a full disk, say)."""
    if tracker is not None:
        ctx.metrics.tracking_write_failures.labels(agent=agent).inc(tracker.close())


def _failure_reason(exc: BaseException) -> tuple[str, str | None]:
    """The failure's reason (its count's label), and the host's fault in one line where
    it is one (a full or read-only disk, a lost device): None for the others."""
    if isinstance(exc, LaunchError):  # the child's own one line, naming the path or device
        host = exc.reason in ("storage", "device_unavailable")
        return exc.reason, str(exc) if host else None
    if isinstance(exc, RunHung):
        return "hung", None
    if (lost := device_lost(exc)) is not None:
        return "device_unavailable", lost
    if (storage := storage_error(exc)) is not None:
        return "storage", storage
    if isinstance(exc, SystemExit):
        return "exit", None
    if isinstance(exc, TrainRequestError):
        return "refused", None
    return "error", None


def resumed_totals(summary: Mapping[str, Any] | None) -> dict[str, float]:
    """The run counters of the checkpoint a run will resume from (empty: none), from its
    summary (``train_request.ResumePoint.summary``).

    The summary is the newest checkpoint's summary file (``checkpoint_files.summarize``),
    a few hundred bytes, so that the run alone reads the checkpoint itself; a checkpoint
    written without one is read in full, once more than the run does. Checkpoints in
    another format than the core's are not listed, and give zeros.
    """
    # The served model's checkpoint (se_darwin's candidates: where served.json points). A
    # run that trains a fresh candidate instead reports below these totals at first, and
    # DaemonMetrics.observe_summary then counts it from zero.
    if summary is None:
        return {}
    skipped = float(summary["skipped_steps"])
    return {
        "optimizer_steps": float(summary["step"]) - skipped,
        "skipped_steps": skipped,
        "nonfinite_losses": float(summary["nonfinite_losses"]),
    }
