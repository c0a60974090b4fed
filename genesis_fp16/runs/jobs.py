"""One scheduled training job of one agent: from settings to a TrainRequest to metrics.

A job takes a slot on each GPU its run occupies (genesis_fp16/runs/device_slots.py: runs on
one GPU never exceed the configured concurrency), resumes from the agent's newest
checkpoint, trains on the configured data (or the generated sample data), and reports
every log interval to the metrics. Its log records carry ``agent`` and ``run_id``.

Rollback: the job asks ``should_stop`` at every step boundary. It turns true when the
daemon shuts down, or when a reload changed the precision this agent would now be asked
to run in; the run then checkpoints and ends, and the same job starts a new run at once,
resumed from that checkpoint, in the precision the settings ask for by then. The job
keeps its device slot meanwhile, so the other agents do not take the agent's turn; a
rollback undone before the run stopped, and any number of flapping edits, still end in
a new run within seconds, not at the next schedule.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.config.settings import Settings, requested_precision
from genesis_fp16.config.storage import storage_error
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.metrics.diagnostics_export import export_diagnostics
from genesis_fp16.metrics.tracking import RunTracker, close_tracker, open_tracker
from genesis_fp16.runs import guard_state, probe_gate, scale_memory
from genesis_fp16.runs.device_slots import DeviceSlots, slot_keys
from genesis_fp16.runs.devices import device_lost
from genesis_fp16.runs.launcher import LaunchError, RunStopped, train_in_child, train_with_torchrun
from genesis_fp16.runs.next_run import served_model_folder
from genesis_fp16.runs.run_request import build_request, choose_precision, warn_ignored
from genesis_fp16_infrastructure.plugin_api import (
    AgentPlugin,
    TrainRequest,
    TrainRequestError,
    TrainResult,
)
from genesis_fp16_infrastructure.served import ServedPointerError, folder_bytes, prune
from genesis_fp16_infrastructure.training import CheckpointManager, TrainingSummary, checkpoint_keys
from genesis_fp16_infrastructure.training.step.execution import ExecutionError

log = structlog.get_logger("genesis_fp16.jobs")


@dataclass
class JobContext:
    """What every job shares with the daemon; ``settings`` is swapped on reload."""

    settings: Settings
    metrics: DaemonMetrics
    slots: DeviceSlots
    stopping: threading.Event
    running: set[str] = field(default_factory=set)
    running_changed: threading.Condition = field(default_factory=threading.Condition)
    # Why the daemon is degraded, by agent (a full or read-only disk): /healthz says so.
    degraded: dict[str, str] = field(default_factory=dict)
    # Runs past their timeout, by agent, with why; and abandoned runs' threads (hung in
    # the plugin's train()): the agent starts no new run while its thread lives.
    overdue: dict[str, str] = field(default_factory=dict)
    hung: dict[str, threading.Thread] = field(default_factory=dict)
    # Agents whose last run with steps learned nothing (every step skipped), with why:
    # degraded until the agent's next run that succeeds (an up_to_date run clears nothing).
    unlearned: dict[str, str] = field(default_factory=dict)

    def problems(self) -> dict[str, str]:
        """What makes the daemon degraded, by agent (empty: healthy)."""
        return {**self.unlearned, **self.overdue, **self.degraded}


class RunHung(RuntimeError):
    """A run that reached no step boundary within its timeout and grace: abandoned."""


def run_agent_job(ctx: JobContext, agent: str, plugin: AgentPlugin) -> None:
    """The scheduler's entry point for one agent; never raises."""
    settings = ctx.settings
    if ctx.stopping.is_set() or not settings.agent(agent).enabled:
        return
    abandoned = ctx.hung.get(agent)
    if abandoned is not None and abandoned.is_alive():
        ctx.metrics.jobs_skipped.labels(agent=agent, reason="hung").inc()
        log.error("job skipped: the agent's abandoned run is still inside train()", agent=agent)
        return
    device = settings.device_for(agent)
    # The GPUs the run will occupy (cuda is cuda:0; torchrun's N ranks hold N GPUs): no
    # two agents' runs share one unless GENESIS_FP16_DEVICE_CONCURRENCY allows it.
    slots = slot_keys(device, settings.agent(agent).nproc)
    if not ctx.slots.acquire(slots, ctx.stopping.is_set):
        return
    with ctx.running_changed:
        ctx.running.add(agent)
    try:
        # Each rerun follows a reload that changed the precision, so edits bound the loop.
        while _run_once(ctx, agent, plugin, device):
            if ctx.stopping.is_set() or not ctx.settings.agent(agent).enabled:
                break
            log.info("run stopped by a configuration change: rerunning at once", agent=agent)
    finally:
        ctx.slots.release(slots)
        with ctx.running_changed:
            ctx.running.discard(agent)
            ctx.running_changed.notify_all()


@dataclass
class _Run:
    """One run of a job: its id, clock and deadline, whether a reload stopped it, and its
    curves (opened while planning, closed on every outcome)."""

    ctx: JobContext
    agent: str
    settings: Settings
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    started: float = field(default_factory=time.monotonic)
    deadline: float = float("inf")
    changed: threading.Event = field(default_factory=threading.Event)
    tracker: RunTracker | None = None
    timeout: float = field(init=False)
    requested: str = field(init=False)  # the precision the settings asked for at the start

    def __post_init__(self) -> None:
        spec = self.settings.agent(self.agent)
        self.timeout = spec.run_timeout_seconds or self.settings.run_timeout_seconds
        # Past it an in-process run checkpoints at its next step and ends ("stopped"); a
        # torchrun job gets SIGTERM from its launcher at the same limit.
        if spec.nproc == 1:
            self.deadline = self.started + self.timeout
        self.requested = requested_precision(self.settings, self.agent, None)[0]

    def precision_changed(self) -> bool:
        # Worked out again only after a reload swapped the settings, not at every step.
        current = self.ctx.settings
        if current is self.settings:
            return False
        return requested_precision(current, self.agent, None)[0] != self.requested

    def should_stop(self) -> bool:
        if self.ctx.stopping.is_set() or time.monotonic() > self.deadline:
            return True
        if self.changed.is_set() or self.precision_changed():
            self.changed.set()  # a reload stopped the run: rerun whatever came since
            return True
        return False

    def rerun(self) -> bool:
        """A reload that changed the precision stopped it, and the daemon is not stopping."""
        return self.changed.is_set() and not self.ctx.stopping.is_set()

    def duration(self) -> float:
        return time.monotonic() - self.started


def _run_once(ctx: JobContext, agent: str, plugin: AgentPlugin, device: str) -> bool:
    """One run, top-down: plan it, execute it, record it. True when a reload that changed
    its precision stopped it (the job reruns it at once)."""
    run = _Run(ctx, agent, ctx.settings)
    structlog.contextvars.bind_contextvars(agent=agent, run_id=run.id)
    try:
        # Inside the try: an unreadable state file while planning is a counted failed run.
        request = _plan(run, plugin, device)
        result = _execute(run, plugin, request)
    except RunStopped as exc:  # stopped during its child's start-up: no step, no failure
        _record_stopped(run, exc)
        return run.rerun()
    except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is a failed run too
        _record_failure(run, device, exc)
        return False
    finally:
        structlog.contextvars.unbind_contextvars("agent", "run_id")
    rerun = result.stopped_early and run.rerun()
    # A reload that changed the precision as the run ended, after its last should_stop: no
    # rerun, but the gauge shows the next run's precision from the reload on, as for a
    # rerun, not this run's until the next one (up to a schedule interval away).
    switched = not rerun and run.precision_changed()
    # A rerun's precision is on the gauge since the reload: the stopped run's stays off it.
    _finish(ctx, agent, run.id, result, run.duration(), show_precision=not (rerun or switched))
    if switched:
        _show_next_precision(ctx, agent, device)
    if run.tracker is not None:
        run.tracker.log_result(result)
    _close_tracker(ctx, agent, run.tracker)
    return rerun


def _plan(run: _Run, plugin: AgentPlugin, device: str) -> TrainRequest:
    """The run's request with the job's callbacks: built in one place
    (genesis_fp16/runs/run_request.py; the guard's memory may raise the precision,
    ENABLE_FP16_TRAINING=false still wins), after the probe when one is configured, with
    the run's curves opened when a tracking folder is set."""
    ctx, agent, settings = run.ctx, run.agent, run.settings
    request = build_request(settings, agent, plugin, device)
    # Once per agent, when configured: the probe before its first bf16/fp16 run. A
    # measured 'auto' leaves out the precisions it marks red.
    probe = probe_gate.gate_before_run(
        settings, ctx.metrics.probe, agent, plugin, request.data_path, device, request.precision
    )
    # Written here, in the daemon's process: a child's or rank 0's summaries are relayed.
    run.tracker = open_tracker(settings.tracking_dir, agent, run.id, request)
    request = replace(
        request,
        on_log=functools.partial(_on_log, ctx, agent, run.changed.is_set, run.tracker),
        on_diagnostics=functools.partial(ctx.metrics.rl.export_live, agent),
        should_stop=run.should_stop,
        auto_excluded=probe_gate.red_precisions(probe),
    )
    if request.auto_excluded and request.precision == "auto":
        warn_ignored(plugin, agent, {"auto_excluded": "the precision probe"})
    log.info(
        "training run started",
        precision=request.precision,
        reason=request.precision_reason,
        device=device,
        options=dict(request.options),
    )
    return request


def _execute(run: _Run, plugin: AgentPlugin, request: TrainRequest) -> TrainResult:
    """Train where the settings say: N ranks under torchrun, a child process (the
    default), or a watched thread of the daemon's."""
    ctx, agent, settings = run.ctx, run.agent, run.settings
    spec = settings.agent(agent)
    paths = AgentPaths.for_agent(settings.state_dir, agent)
    ctx.metrics.start_run(agent, resumed_totals(paths))
    grace = settings.shutdown_timeout_seconds  # to reach a step and checkpoint
    limit = settings.run_memory_limit_bytes
    fresh = _check_up_to_date(plugin, request)
    if fresh is not None:  # nothing changed: no child, no ranks, no thread
        return fresh
    if spec.nproc > 1:  # N processes under torchrun, supervised: genesis_fp16/runs/launcher.py
        return train_with_torchrun(
            request, spec.nproc, run.timeout, memory_limit=limit, log_level=settings.log_level
        )
    if (spec.isolation or settings.run_isolation) == "process":
        child = functools.partial(
            train_in_child, request, run.timeout, grace, limit, log_level=settings.log_level
        )
        # The launcher stops, then kills, the child itself; the watch marks it overdue.
        return _supervised(ctx, agent, child, run.deadline, run.timeout, grace + 60)
    call = functools.partial(plugin.train, request)
    return _supervised(ctx, agent, call, run.deadline, run.timeout, grace)


def _check_up_to_date(plugin: AgentPlugin, request: TrainRequest) -> TrainResult | None:
    """The plugin's own cheap check, when it has one (``check_up_to_date(request)``: a
    result when nothing changed since its served model, else None), asked in the daemon
    so that an up-to-date run costs no process start and no torch import in a child. A
    check that raises is logged and the run goes on in full, where the plugin decides."""
    check = getattr(plugin, "check_up_to_date", None)
    if check is None:
        return None
    try:
        result: TrainResult | None = check(request)
    except Exception:
        log.warning("the plugin's up-to-date check failed: the run reads its data", exc_info=True)
        return None
    return result


def _record_stopped(run: _Run, exc: RunStopped) -> None:
    """A run stopped before any result (its child still starting): no step, no failure."""
    duration = run.duration()
    log.info(
        "training run finished",
        outcome="stopped",
        reason=str(exc),
        steps=0,
        duration_seconds=round(duration, 3),
    )
    run.ctx.metrics.finish_run(run.agent, "stopped", duration, None, time.time())
    _close_tracker(run.ctx, run.agent, run.tracker)


def _record_failure(run: _Run, device: str, exc: BaseException) -> None:
    """Count and log a failed run in one line where the cause is known (a refusal, the
    disk, a lost device), with a traceback where it is the plugin's bug."""
    ctx, agent = run.ctx, run.agent
    duration = run.duration()
    reason = _failure_reason(exc)
    ctx.metrics.run_failures.labels(agent=agent, reason=reason).inc()
    storage = storage_error(exc)
    if isinstance(exc, LaunchError) and exc.reason == "storage":
        storage = str(exc)  # the child's own one line, naming the path
    if storage is not None:
        ctx.degraded[agent] = storage  # every run would train and then lose its work
    # The host's fault, not the plugin's: named in one line, no traceback.
    host = storage
    if reason == "device_unavailable":
        host = str(exc) if isinstance(exc, LaunchError) else device_lost(exc)
        # Every run on it fails until the GPU is back (or the daemon restarts on another).
        ctx.degraded[agent] = f"device {device} unavailable: {host}"
    if isinstance(exc, TrainRequestError | ExecutionError | LaunchError) or host:
        # A one-line refusal, a storage error naming its path, a lost device.
        error = host if host is not None else str(exc)
        log.error("training run failed", error=error, duration_seconds=round(duration, 3))
    elif isinstance(exc, SystemExit):
        log.error(
            "training run failed",
            error=f"the plugin called sys.exit({exc.code!r})",
            duration_seconds=round(duration, 3),
        )
    else:
        log.exception("training run failed", duration_seconds=round(duration, 3))
    _bound_history(ctx, agent)  # a gate that could not decide left a candidate too
    ctx.metrics.finish_run(agent, "failed", duration, None, time.time())
    _close_tracker(ctx, agent, run.tracker)  # the curves up to the failure stay readable


def _close_tracker(ctx: JobContext, agent: str, tracker: RunTracker | None) -> None:
    """Close the run's curves and count the writes they lost (a full disk, say)."""
    if tracker is not None:
        ctx.metrics.tracking_write_failures.labels(agent=agent).inc(close_tracker(tracker))


def _on_log(
    ctx: JobContext,
    agent: str,
    stopping: Callable[[], bool],
    tracker: RunTracker | None,
    summary: TrainingSummary,
) -> None:
    # A run a reload is stopping reports its last steps; the gauge shows the next run's.
    ctx.metrics.observe_summary(agent, summary, show_precision=not stopping())
    if tracker is not None:
        tracker.log_summary(summary)
    log.info(
        "training progress",
        step=summary.step,
        precision=summary.precision,
        train_loss=summary.train_loss,
        loss_scale=summary.loss_scale,
        skipped_steps=summary.skipped_steps,
    )


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, LaunchError):
        return exc.reason
    if isinstance(exc, RunHung):
        return "hung"
    if device_lost(exc) is not None:
        return "device_unavailable"
    if storage_error(exc) is not None:
        return "storage"
    if isinstance(exc, SystemExit):
        return "exit"
    if isinstance(exc, TrainRequestError | ExecutionError):
        return "refused"
    return "error"


def _supervised(
    ctx: JobContext,
    agent: str,
    call: Callable[[], TrainResult],
    deadline: float,
    timeout: float,
    grace: float,
) -> TrainResult:
    """``call()`` on a thread of its own, watched: past ``deadline`` the agent is overdue
    (health says so); ``grace`` seconds later a run that has not returned is abandoned.

    An abandoned thread cannot be killed (Python has no way to), so it keeps running
    until the plugin's ``train()`` returns; the device slot is freed at once so the other
    agents train, and this agent starts nothing new while the thread lives.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the job thread below
            box["error"] = exc
        finally:
            if ctx.hung.get(agent) is threading.current_thread():  # an abandoned run ended
                ctx.hung.pop(agent, None)
                _clear_overdue(ctx, agent)
                log.warning("an abandoned run returned at last", agent=agent)

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(target,), name=f"run-{agent}", daemon=True
    )
    thread.start()
    while thread.is_alive():
        thread.join(timeout=0.2)
        now = time.monotonic()
        if thread.is_alive() and now > deadline and agent not in ctx.overdue:
            ctx.overdue[agent] = f"run past its timeout of {timeout:g} s"
            ctx.metrics.runs_overdue.labels(agent=agent).set(1)
            log.warning("run past its timeout; stopping at its next step", agent=agent)
        if thread.is_alive() and now > deadline + grace:
            ctx.hung[agent] = thread
            ctx.overdue[agent] = f"run hung in train(), abandoned after {timeout + grace:g} s"
            raise RunHung(
                f"no step boundary {grace:g} s after the run timeout ({timeout:g} s): the run "
                "is abandoned, its thread left inside the plugin's train()"
            )
    _clear_overdue(ctx, agent)
    if "error" in box:
        raise box["error"]
    result: TrainResult = box["result"]
    return result


def _clear_overdue(ctx: JobContext, agent: str) -> None:
    ctx.overdue.pop(agent, None)
    ctx.metrics.runs_overdue.labels(agent=agent).set(0)


def resumed_totals(paths: AgentPaths) -> dict[str, float]:
    """The run counters of the checkpoint a run will resume from (empty: none).

    Loads the newest valid checkpoint once more before the plugin does: a second read
    of a file of a few MB per run, so that resumed totals are not counted twice.
    Checkpoints in another format than the core's are not listed, and give zeros.
    """
    # The served model's checkpoint (se_darwin's candidates: where served.json points). A
    # run that trains a fresh candidate instead reports below these totals at first, and
    # DaemonMetrics.observe_summary then counts it from zero.
    found = CheckpointManager(served_model_folder(paths)).load_latest()
    if found is None:
        return {}
    state, _ = found
    stats = state.get(checkpoint_keys.STATS, {})
    skipped = float(stats.get("skipped_steps", 0))
    return {
        "optimizer_steps": float(state[checkpoint_keys.STEP]) - skipped,
        "skipped_steps": skipped,
        "nonfinite_losses": float(stats.get("nonfinite_losses", 0)),
    }


def _show_next_precision(ctx: JobContext, agent: str, device: str) -> None:
    """The precision gauge at what the agent's next run requests (the guard's memory
    included); an ``auto`` one is decided by that run, so the gauge waits for it."""
    precision, _ = choose_precision(ctx.settings, agent, device)
    if precision != "auto":
        ctx.metrics.set_precision(agent, precision)


def _finish(
    ctx: JobContext,
    agent: str,
    run_id: str,
    result: TrainResult,
    duration: float,
    show_precision: bool = True,
) -> None:
    outcome = result.outcome  # success, failed (learned nothing), stopped, or up_to_date
    ctx.degraded.pop(agent, None)  # a run that wrote its checkpoint: the disk is fine again
    if result.failure is not None:  # steps were run, none (or too few) taken: alerted
        ctx.metrics.run_failures.labels(agent=agent, reason=result.failure).inc()
        why = f"last run learned nothing ({result.failure}): {result.failure_detail}"
        ctx.unlearned[agent] = why
    elif outcome == "success":
        ctx.unlearned.pop(agent, None)
    guard_state.record_run(ctx.settings, ctx.metrics, agent, result)
    scale_memory.record_scale(ctx.settings, agent, result)
    if show_precision:
        ctx.metrics.set_precision(agent, result.precision_used)
    ctx.metrics.set_execution(agent, result.execution)
    if result.execution_fallback is not None:
        ctx.metrics.execution_fallbacks.labels(agent=agent, reason=result.execution_fallback).inc()
    if result.steps and result.final_train_loss is not None:
        # The run's own final loss (under torchrun, rank 0's last log was its interval's).
        ctx.metrics.train_loss.labels(agent=agent).set(float(result.final_train_loss))
    calibration = result.extra.get("precision_calibration")
    if isinstance(calibration, dict):
        ctx.metrics.report.set_auto_measurement(agent, calibration)
    _bound_history(ctx, agent)  # before the run is counted: a count means a pruned folder
    early_stop = result.extra.get("early_stop")
    if not isinstance(early_stop, dict):
        early_stop = None
    ctx.metrics.report.set_eval(agent, result.eval, early_stop)
    data = result.extra.get("data")
    if isinstance(data, dict):
        ctx.metrics.report.set_data(agent, data, result.steps, time.time())
    phases = result.extra.get("phases")  # where the run's time went (se_darwin)
    if isinstance(phases, dict):
        ctx.metrics.report.set_phases(agent, phases)
    peak = result.extra.get("device_memory_peak_bytes")
    if peak is not None:
        ctx.metrics.report.set_device_memory_peak(agent, peak)
    export_diagnostics(ctx.metrics.rl, agent, result)
    gate = result.extra.get("gate")
    if isinstance(gate, dict) and not result.up_to_date:
        ctx.metrics.promotion.export_gate(agent, gate)
    drift = result.extra.get("drift")
    if isinstance(drift, dict):
        ctx.metrics.promotion.export_drift(agent, drift)
    log.info(
        "training run finished",
        agent=agent,
        run_id=run_id,
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
        components=result.extra.get("components"),  # per-component dtypes (rlhf_ppo's preset)
        early_stop=_early_stop_summary(early_stop),
        data=data if isinstance(data, dict) else None,
        phases=phases if isinstance(phases, dict) else None,
        gate=gate if isinstance(gate, dict) else None,
        drift=drift if isinstance(drift, dict) else None,
        checkpoint=str(result.checkpoint) if result.checkpoint else None,
        duration_seconds=round(duration, 3),
    )
    # Counted last: whoever sees the count (a dashboard, a test) finds the run's other
    # series and its log line already there.
    ctx.metrics.finish_run(agent, outcome, duration, result.eval.get("loss"), time.time())


def _bound_history(ctx: JobContext, agent: str) -> None:
    """Prune the agent's models to the bounded history (the last
    GENESIS_FP16_SERVED_HISTORY_KEEP served ones, rejected candidates for
    GENESIS_FP16_REJECTED_KEEP_DAYS) and export the bytes its folder holds. A pointer
    that cannot be read prunes nothing: logged, never a guess."""
    settings = ctx.settings
    folder = AgentPaths.for_agent(settings.state_dir, agent).checkpoint_dir
    try:
        removed = prune(folder, settings.served_history_keep, settings.rejected_keep_days)
    except (ServedPointerError, OSError) as exc:
        log.error("model history not pruned", error=str(exc))
        removed = []
    for path in removed:
        log.info("model history: removed candidate", candidate=path.name)
    ctx.metrics.promotion.pruned.labels(agent=agent).set(len(removed))
    ctx.metrics.promotion.state_bytes.labels(agent=agent).set(folder_bytes(folder))


def _early_stop_summary(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The log line's part of early stopping's record (its history stays in train --json)."""
    if record is None:
        return None
    return {k: record.get(k) for k in ("best_step", "best", "evaluations", "stop_reason")}
