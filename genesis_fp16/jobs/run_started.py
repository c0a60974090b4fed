"""The start of a run is one event, :class:`RunStarted`, delivered to each subscriber.

A job (genesis_fp16/jobs/agent_job.py) plans its run (planning.py: the request, with the
probe gate's decision, both kept on the run), then starts it here, then executes it
(supervising.py), then ends it (run_ended.py: ``RunEnded``). The start is told once, to
each concern in turn, in this order:

1. *probe*: the probe gate's record exported on ``genesis_fp16_probe_*``, and the warning
   when its verdict is red for the precision about to run (probe_gate.py: ``show_probe``);
2. *tracker*: the run's curves opened, when a tracking folder is set (``Run.tracker``;
   the end's subscriber closes them: metrics/tracking.py);
3. *log line*: ``training run started``, with the precision asked for and why, its floor,
   the device and the plugin's options;
4. *start record*: the served-model pointer checked and exported, and the run's counters
   set where the checkpoint it resumes left them (recording.py: ``record_start``).

Unlike the end's, a start subscriber that raises fails the run, as a failing plan does:
nothing has trained yet, and the run ends failed (``RunEnded``) with its curves closed.

Each subscriber takes from the event what its concern needs and hands only that on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.probe_gate import show_probe
from genesis_fp16.jobs.recording import record_start
from genesis_fp16.metrics.tracking import open_tracker
from genesis_fp16.plugin_api import TrainRequest

log = structlog.get_logger("genesis_fp16.jobs")


@dataclass(frozen=True)
class RunStarted:
    """One run's start: the run as its plan left it, with the request it trains on
    (``Run.request``) and the probe gate's decision (``Run.probe``; None: no probe
    configured for the agent)."""

    run: Run

    @classmethod
    def of(cls, run: Run) -> RunStarted:
        """The start of ``run``, once it is planned."""
        if run.request is None:
            raise RuntimeError("a run starts once it is planned (planning.plan_run)")
        return cls(run)

    @property
    def request(self) -> TrainRequest:
        """The request the run trains on (its plan's: :meth:`of` checked it is there)."""
        assert self.run.request is not None
        return self.run.request


Subscriber = Callable[[RunStarted], None]


def publish_start(event: RunStarted) -> None:
    """Deliver ``event`` to each subscriber in order (:data:`SUBSCRIBERS`); one that raises
    fails the run (the exception goes on to the job)."""
    for subscriber in SUBSCRIBERS:
        subscriber(event)


def _probe(event: RunStarted) -> None:
    if event.run.probe is not None:
        show_probe(event.run.ctx.metrics.probe, event.run.probe)


def _tracker(event: RunStarted) -> None:
    run = event.run
    run.tracker = open_tracker(run.settings.tracking_dir, run.agent, run.id, event.request)


def _log_line(event: RunStarted) -> None:
    request = event.request
    log.info(
        "training run started",
        precision=request.precision.requested,
        reason=request.precision_reason,
        floor=request.precision.floor,
        device=request.device,
        options=dict(request.options),
    )


def _start_record(event: RunStarted) -> None:
    record_start(event.run)


# The order of the module docstring; tests/genesis_fp16/jobs/test_run_started.py holds it.
SUBSCRIBERS: tuple[Subscriber, ...] = (_probe, _tracker, _log_line, _start_record)
