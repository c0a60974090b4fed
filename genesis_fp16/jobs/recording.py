"""Record one run of a job: its progress as it trains, and at its end the pieces its
event's subscribers call (genesis_fp16/jobs/run_ended.py): the log line, the carried loss
scale and the bounded model history.

The counters start from the checkpoint the run resumes (:func:`record_start`); each
progress report advances them (:func:`record_progress`); the run's end is one event,
``RunEnded``, whose subscribers set the rest, the run's count last, and say it in one line
(:func:`log_ended`: ``training run finished``, or ``training run failed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.run_failure import RunError
from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
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


def log_ended(agent: str, run_id: str, result: TrainResult | RunError, duration: float) -> None:
    """The run's one line: ``training run finished`` with what it reported, or ``training
    run failed`` (the plugin's bug with its traceback too)."""
    seconds = round(duration, 3)
    if isinstance(result, RunError) and result.outcome == "stopped":
        log.info("training run finished", outcome="stopped", reason=result.why, steps=0,
                 duration_seconds=seconds)  # fmt: skip
    elif isinstance(result, RunError):
        trace = {"exc_info": result.error} if result.traceback else {}
        log.error("training run failed", error=result.said, duration_seconds=seconds, **trace)
    else:
        log.info("training run finished", agent=agent, run_id=run_id, **_finished(result),
                 duration_seconds=seconds)  # fmt: skip


def _finished(result: TrainResult) -> dict[str, Any]:
    """What the finished line says of the run's result."""
    return {
        "outcome": result.outcome,
        "precision_requested": result.precision_requested,
        "precision_used": result.precision_used,
        "precision_reason": result.precision_reason,
        "execution": result.execution,
        "execution_reason": result.execution_reason,
        "execution_fallback": result.execution_fallback,
        "steps": result.steps,
        "skipped_steps": result.skipped_steps,
        "chain_skipped_steps": result.chain_skipped_steps,
        "failure": result.failure,
        "failure_detail": result.failure_detail or None,
        "final_train_loss": result.final_train_loss,
        "eval": dict(result.eval),
        # per-component dtypes (rlhf_ppo's preset)
        "components": None if result.components is None else dict(result.components),
        "early_stop": _early_stop_summary(result),
        "data": None if result.data is None else result.data.to_json(),
        "quarantined": result.quarantined,  # malformed records skipped, each file named above
        "phases": dict(result.phases) if result.phases is not None else None,
        "wall_seconds": result.wall_seconds,  # the run's own; duration_seconds: the job's
        "gate": None if result.gate is None else result.gate.to_json(),
        "drift": None if result.drift is None else result.drift.to_json(),
        "checkpoint": str(result.checkpoint) if result.checkpoint else None,
    }


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


def bound_agent_history(settings: Settings, metrics: DaemonMetrics, folder: AgentFolder) -> None:
    """Bound the model history of the agent of ``folder`` (:func:`bound_history`) and
    export the bytes its folder holds, with what the pointer's journal holds: after each
    run with a result or a failure (genesis_fp16/jobs/run_ended.py)."""
    agent, models = folder.agent, folder.checkpoints
    removed, pointer = bound_history(settings, models)  # pointer None: none served, or unread
    # Each rollback the pointer's journal holds, counted once: a run killed after its
    # rollback reached the pointer reports nothing, and its rollback still happened.
    if pointer is not None and pointer.journal:  # a served model (the series exist from 0)
        new = metrics.live.cursor.new(agent, pointer.journal)
        metrics.live.count_rollbacks(agent, new)
        metrics.promotion.count_promotions(agent, new)
    if pointer is not None:  # watched, or not: the gauge then follows the clock
        metrics.live.observe_pointer(agent, pointer, settings.live_watch_idle_seconds)
    metrics.promotion.pruned.labels(agent=agent).set(len(removed))
    metrics.promotion.state_bytes.labels(agent=agent).set(models.disk_bytes())


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
