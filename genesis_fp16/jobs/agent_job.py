"""One scheduled training job of one agent: the scheduler's tick, then each run walked
forward, plan -> its start -> execute -> its end, once each (planning.py, run_started.py,
supervising.py, run_ended.py; the run's state in job_state.py).

A job takes a slot on each GPU its run occupies (genesis_fp16/jobs/job_state.py: runs on
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

import structlog

from genesis_fp16.config.settings import resolve_device
from genesis_fp16.jobs.job_state import DeviceSlots as DeviceSlots  # the daemon's import
from genesis_fp16.jobs.job_state import JobContext as JobContext  # the daemon's import
from genesis_fp16.jobs.job_state import Run, slot_keys
from genesis_fp16.jobs.planning import plan_run
from genesis_fp16.jobs.run_ended import RunEnded, publish
from genesis_fp16.jobs.run_failure import RunError
from genesis_fp16.jobs.run_started import RunStarted, publish_start
from genesis_fp16.jobs.supervising import execute_run
from genesis_fp16.launch.launcher import RunStopped
from genesis_fp16.plugin_api import AgentPlugin, TrainResult
from genesis_fp16_infrastructure.api import Capabilities

log = structlog.get_logger("genesis_fp16.jobs")


def run_agent_job(
    ctx: JobContext, agent: str, plugin: AgentPlugin, capabilities: Capabilities
) -> None:
    """The scheduler's entry point for one agent, with what the loader read of its plugin
    (``capabilities``: each run's plan takes them, not the plugin's own); never raises."""
    settings = ctx.settings
    config = settings.agent(agent)  # the job's device and slots, and its first run's config
    if ctx.stopping.is_set() or not config.own.enabled:
        return
    abandoned = ctx.hung.get(agent)
    if abandoned is not None and abandoned.is_alive():
        ctx.metrics.jobs_skipped.labels(agent=agent, reason="hung").inc()
        log.error("job skipped: the agent's abandoned run is still inside train()", agent=agent)
        return
    device = resolve_device(config.device)
    # The GPUs the run will occupy (cuda is cuda:0; torchrun's N ranks hold N GPUs): no
    # two agents' runs share one unless GENESIS_FP16_DEVICE_CONCURRENCY allows it.
    with ctx.turn(agent, slot_keys(device, config.own.nproc)) as started:
        rerun = False
        while started:
            if ctx.settings is not settings:  # reloaded while the job waited for its slots,
                settings = ctx.settings  # or the rerun's: read once, for it and this check
                config = settings.agent(agent)
            if rerun:
                if ctx.stopping.is_set() or not config.own.enabled:
                    break
                log.info("run stopped by a configuration change: rerunning at once", agent=agent)
            # Each rerun follows a reload that changed the precision, so edits bound the loop.
            rerun = _run_once(Run(ctx, agent, settings, config, device), plugin, capabilities)
            if not rerun:
                break


def _run_once(run: Run, plugin: AgentPlugin, capabilities: Capabilities) -> bool:
    """One run, top-down: plan it, start it (``RunStarted``: genesis_fp16/jobs/
    run_started.py), execute it, then its end, once (``RunEnded``, to each subscriber:
    genesis_fp16/jobs/run_ended.py). True when a reload that changed its precision
    stopped it (the job reruns it at once)."""
    structlog.contextvars.bind_contextvars(agent=run.agent, run_id=run.id)
    try:
        ended = RunEnded.of(run, _train(run, plugin, capabilities))
        publish(ended)
    finally:
        structlog.contextvars.unbind_contextvars("agent", "run_id")
    return ended.rerun


def _train(run: Run, plugin: AgentPlugin, capabilities: Capabilities) -> TrainResult | RunError:
    """The run's result, or why it has none."""
    try:
        # Inside the try: an unreadable state file while planning is a counted failed run.
        request = plan_run(run, plugin, capabilities, run.device)
        publish_start(RunStarted.of(run))
        return execute_run(run, plugin, request, capabilities)
    except RunStopped as exc:  # stopped during its child's start-up: no step, no failure
        return RunError.stopped(exc)
    except (Exception, SystemExit) as exc:  # a plugin's sys.exit() is a failed run too
        return RunError.failed(exc)
