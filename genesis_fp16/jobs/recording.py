"""Record one run of a job: what its plan read, before it trains; its progress as it
trains; and at its end the pieces its event's subscribers call
(genesis_fp16/jobs/run_ended.py): the log line and the carried loss scale (the bounded
model history: genesis_fp16/jobs/model_history.py).

The counters start from the checkpoint the run resumes, and the served-model pointer is
checked, as the plan read them (:func:`record_start`); each progress report advances the
counters (:func:`record_progress`); the run's end is one event, ``RunEnded``, whose
subscribers set the rest, the run's count last, and say it in one line
(:func:`log_ended`: ``training run finished``, or ``training run failed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.run_failure import RunError
from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import AgentFolder, AgentSnapshot, TrainingSummary

log = structlog.get_logger("genesis_fp16.jobs")


def record_start(run: Run) -> None:
    """What the run's plan read (``Run.request.snapshot``), recorded before it trains: the
    served-model pointer (:func:`check_served_pointer`), and where the run's counters
    start, the totals of the checkpoint it will resume (``snapshot.state.resume``)."""
    snapshot = run.request.snapshot if run.request is not None else None  # no second read
    state = snapshot.state if snapshot is not None else None
    resume = state.resume if state is not None else None
    if snapshot is None or resume is None:
        raise RuntimeError("record_start() needs the run planned with its resume point")
    # As the plan read it: an unusable one set aside (the run refuses it), degraded.
    check_served_pointer(run, snapshot)
    totals = resumed_totals(resume.summary)
    run.ctx.metrics.start_run(run.agent, totals)


def check_served_pointer(run: Run, snapshot: AgentSnapshot) -> None:
    """Before each run: set an unusable served-model pointer aside (counted once), and
    export the pointer's state, as the run's plan read it (``snapshot``: the pointer is
    read again, in the run's folder, only to set it aside).

    An unreadable, wrong-version or dangling ``served.json`` is set aside as
    ``served.json.unusable-<UTC time>`` (agent_folder.repair), logged in one line and
    counted in ``genesis_fp16_state_files_skipped_total{file="served_pointer"}``; while no
    usable pointer replaces it the agent is degraded on ``/healthz``,
    ``genesis_fp16_served_pointer_unusable`` is 1 (alert GenesisFp16ServedPointerUnusable),
    and its runs are refused in one line naming the repair (``genesis-fp16 model promote
    AGENT ID`` or ``model rollback AGENT``). ``genesis_fp16_served_model_pinned`` says
    whether an operator pinned the served model (0 while nothing is served yet)."""
    ctx, agent, home = run.ctx, run.agent, run.folder
    metrics = ctx.metrics.promotion
    why = None
    if snapshot.pointer_error is None:  # the transitions before this daemon's first run:
        pointer = snapshot.pointer  # not counted (none served: counted from the first)
        ctx.metrics.live.cursor.baseline(agent, [] if pointer is None else pointer.journal)
    if snapshot.pointer is not None:  # usable, as the plan read it
        metrics.pinned.labels(agent=agent).set(float(snapshot.pointer.pinned is not None))
    elif snapshot.pointer_error is None:  # nothing served yet: nothing pinned
        metrics.pinned.labels(agent=agent).set(0)
    elif snapshot.pointer_error is not None:  # unreadable, dangling, or set aside before
        try:  # under the pointer's lock, read again: a repair since is not set aside
            why, moved = home.set_aside_unusable_pointer()
        except OSError as exc:  # not ours to rename: reported all the same, never followed
            why, moved = f"served-model pointer in {home.checkpoint_dir} unusable: {exc}", None
        if moved is not None:
            # counted by the agent folder's owner, which set it aside
            log.error("unusable served-model pointer set aside", path=str(moved), error=why)
        log.warning("cannot follow the served-model pointer", error=snapshot.pointer_error)
    if why is None:  # none, usable, or repaired meanwhile (the next run looks again)
        ctx.unusable_pointer.pop(agent, None)
        metrics.pointer_unusable.labels(agent=agent).set(0)
        return
    ctx.unusable_pointer[agent] = why.replace("AGENT", agent)
    metrics.pointer_unusable.labels(agent=agent).set(1)
    metrics.pinned.labels(agent=agent).set(0)


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
    summary (``agent_snapshot.ResumePoint.summary``).

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
