"""Plan one run of a job: the request it trains on, with the job's callbacks.

The request is built once, in one place (genesis_fp16/jobs/run_request.py:
``plan_request``, which reads the agent's state folder once, into the request's
snapshot, and asks the plugin's data check once); planning
adds what only the daemon's job has: the probe gate's decision (once per agent, when
configured; genesis_fp16/jobs/probe_gate.py), the callbacks that report progress
(genesis_fp16/jobs/recording.py), show the precision the run decided
(:func:`show_decided`) and ask the run to stop
(:meth:`~genesis_fp16.jobs.job_state.Run.should_stop`). The request and the gate's
decision are kept on the run (``Run.request``, ``Run.probe``): its start
(genesis_fp16/jobs/run_started.py: ``RunStarted``) shows the probe, opens the run's
curves, says the run started and records where its counters start and how its
served-model pointer stood, from the request's snapshot.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from genesis_fp16.jobs import probe_gate
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.recording import record_progress
from genesis_fp16.jobs.run_request import plan_request, warn_ignored
from genesis_fp16.launch.progress_text import Progress
from genesis_fp16.plugin_api import AgentPlugin, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities, PrecisionName


def plan_run(
    run: Run, plugin: AgentPlugin, capabilities: Capabilities, device: str
) -> TrainRequest:
    """The run's request, kept on the run (``Run.request``), with the job's callbacks,
    built once (genesis_fp16/jobs/run_request.py: the precision request with the guard's
    remembered floor, the checkpoint it resumes read with the agent's other state files),
    the probe's red precisions added to it as exclusions when a probe is configured (the
    gate's decision kept as ``Run.probe``, shown at the run's start). Shows nothing of
    the run itself: that is its start, ``RunStarted``."""
    ctx, agent, settings = run.ctx, run.agent, run.settings
    request = plan_request(
        settings, agent, plugin, capabilities, device, config=run.config, folder=run.folder
    )
    progress = Progress(request.steps, request.log_interval)  # the log's step N/M, ETA
    request = request.with_callbacks(  # the job's, once: a child's come from its own train
        on_log=functools.partial(record_progress, run, progress),
        should_stop=run.should_stop,
        on_diagnostics=functools.partial(ctx.metrics.rl.export, agent),
        on_precision=functools.partial(show_decided, run),
    )
    # Once per agent, when configured: the probe before its first bf16/fp16 run. The
    # plan's last step, after all that can fail: a probe that ran is shown at the start.
    if run.config.own.probe_before_low_precision:
        run.probe = probe_gate.probe_before_run(
            settings,
            agent,
            plugin,
            request.data_path,
            device,
            request.precision,
            folder=run.folder,
        )
        # A red verdict removes a candidate from a measured 'auto' (decide() applies it,
        # under torchrun too); elsewhere it is a warning and an alert, never a change.
        excluded = dict(run.probe.excluded)
        request = replace(request, precision=replace(request.precision, excluded=excluded))
        if excluded:
            ignored = capabilities.ignored_request_fields
            warn_ignored(ignored, agent, {"precision.excluded": "the precision probe"})
    run.request = request
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
