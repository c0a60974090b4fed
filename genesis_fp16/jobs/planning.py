"""Plan one run of a job: the request it trains on, with the job's callbacks, and the
served-model pointer's check as the plan read it (:func:`check_served_pointer`).

The request is built once, in one place (genesis_fp16/jobs/run_request.py:
``plan_request``, which reads the agent's state folder once, into the request's
snapshot, and asks the plugin's data check once); planning
adds what only the daemon's job has: the probe's verdict (once per agent, when
configured), the run's curves, and the callbacks that report progress
(genesis_fp16/jobs/recording.py), show the precision the run decided
(:func:`show_decided`) and ask the run to stop
(:meth:`~genesis_fp16.jobs.job_state.Run.should_stop`). The request is kept on the run
(``Run.request``): recording asks its snapshot where the run's counters start.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import structlog

from genesis_fp16.jobs import probe_gate
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.recording import record_progress
from genesis_fp16.jobs.run_request import plan_request, warn_ignored
from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.metrics.tracking import open_tracker
from genesis_fp16.plugin_api import AgentPlugin, TrainRequest
from genesis_fp16_infrastructure.api import AgentSnapshot, Capabilities, PrecisionName

log = structlog.get_logger("genesis_fp16.jobs")


def plan_run(
    run: Run, plugin: AgentPlugin, capabilities: Capabilities, device: str
) -> TrainRequest:
    """The run's request, kept on the run (``Run.request``), with the job's callbacks,
    built once (genesis_fp16/jobs/run_request.py: the precision request with the guard's
    remembered floor, the checkpoint it resumes read with the agent's other state files),
    the probe's red precisions added to it as exclusions when a probe is configured, with
    the run's curves opened when a tracking folder is set; the served-model pointer
    checked as the plan read it (:func:`check_served_pointer`)."""
    ctx, agent, settings = run.ctx, run.agent, run.settings
    request = plan_request(
        settings, agent, plugin, capabilities, device, config=run.config, folder=run.folder
    )
    excluded: dict[str, str] = {}
    # Once per agent, when configured: the probe before its first bf16/fp16 run.
    if run.config.own.probe_before_low_precision:
        probe = probe_gate.gate_before_run(
            settings,
            ctx.metrics.probe,
            agent,
            plugin,
            request.data_path,
            device,
            request.precision,
            folder=run.folder,
        )
        # A red verdict removes a candidate from a measured 'auto' (decide() applies it,
        # under torchrun too); elsewhere it is a warning and an alert, never a change.
        if request.precision.measures:
            excluded = probe_gate.red_precisions(probe)
    progress = Progress(request.steps, request.log_interval)  # the log's step N/M, ETA
    request = request.with_callbacks(  # the job's, once: a child's come from its own train
        on_log=functools.partial(record_progress, run, progress),
        should_stop=run.should_stop,
        on_diagnostics=functools.partial(ctx.metrics.rl.export, agent),
        on_precision=functools.partial(show_decided, run),
    )
    request = replace(request, precision=replace(request.precision, excluded=excluded))
    run.request = request
    # Written here, in the daemon's process: a child's or rank 0's summaries are relayed.
    run.tracker = open_tracker(settings.tracking_dir, agent, run.id, request)
    if excluded:
        ignored = capabilities.ignored_request_fields
        warn_ignored(ignored, agent, {"precision.excluded": "the precision probe"})
    log.info(
        "training run started",
        precision=request.precision.requested,
        reason=request.precision_reason,
        floor=request.precision.floor,
        device=device,
        options=dict(request.options),
    )
    # As the plan read it: an unusable one set aside (the run refuses it), degraded.
    assert request.snapshot is not None  # plan_request always takes one
    check_served_pointer(run, request.snapshot)
    return request


def show_decided(run: Run, precision: PrecisionName) -> None:
    """The run's precision, decided (its ``on_precision``, before its first step; a
    measured ``auto`` after its calibration), on ``genesis_fp16_precision`` at once: the
    gauge says the running run's from then on, not only from its first progress report,
    a log interval later. Outside fp16 the loss scale is 1 (no scaler), said with it; an
    fp16 run's scale waits for its first report (its checkpoint is read after this). A
    run a reload is stopping leaves both at the next run's."""
    with run.ctx.gauge_lock:
        if not run.reloaded():
            run.ctx.metrics.set_precision(run.agent, precision)
            if precision != "fp16":
                run.ctx.metrics.loss_scale.labels(agent=run.agent).set(1.0)


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
