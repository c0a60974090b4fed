"""Execute one planned run in a process of its own, and watch it.

One isolation model, no setting to choose another: a run with ``nproc`` 1 is served by
its device's resident run process, which the run worker forks (genesis_fp16/commands/
resident.py; a fresh one after a run it does not trust); ``nproc`` > 1 runs N ranks under
torchrun, started by exec. The launcher (genesis_fp16/launch/launcher.py) supervises
either itself (SIGTERM at the timeout, SIGKILL past the grace or the memory limit); each
call is also watched here (:func:`supervised`), on a thread: past its timeout the agent is
overdue, and past the grace the watch gives up on it. Before either, the plan's data check
(``request.snapshot.data``) may answer the run with no process start at all.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import structlog

from genesis_fp16.jobs.job_state import JobContext, Run
from genesis_fp16.launch.launcher import train_in_child
from genesis_fp16.launch.run_worker import WORKER
from genesis_fp16.plugin_api import AgentPlugin, TrainRequest, TrainResult
from genesis_fp16_infrastructure.api import Capabilities

log = structlog.get_logger("genesis_fp16.jobs")


class RunHung(RuntimeError):
    """A run that reached no step boundary within its timeout and grace: abandoned."""


def execute_run(
    run: Run, plugin: AgentPlugin, request: TrainRequest, capabilities: Capabilities
) -> TrainResult:
    """Train in the device's resident run process (``nproc`` 1) or N ranks under torchrun.

    ``plugin`` and ``capabilities`` are the daemon's loaded ones: the run's process loads
    its own, so they are unused here; the signature is the in-process seam's too
    (tests/genesis_fp16/in_process.py, for the project's own tests)."""
    del plugin, capabilities  # the run's process imports its own
    settings, config = run.settings, run.config
    grace = settings.shutdown_timeout_seconds  # to reach a step and checkpoint
    check = request.snapshot.data if request.snapshot is not None else None
    if check is not None and check.up_to_date is not None:  # the plan's data check
        # Nothing changed: no process start, no ranks.
        return TrainResult.from_json(check.up_to_date)
    single = config.own.nproc == 1
    if single:  # what the run reads is kept in its resident process for the next (KEEP_MIB)
        keep = (settings.run_resident_keep_mib or 0) * 2**20  # resolved: never None
        request = dataclasses.replace(
            request, keep_in_memory_bytes=keep, read_workers=settings.read_workers
        )
    child = functools.partial(
        train_in_child,  # N ranks under torchrun, or one process: launch/launcher.py
        request,
        config.run_timeout_seconds,
        grace if single else 60.0,  # torchrun's ranks: docs/distributed.md
        settings.run_memory_limit_bytes,
        log_level=settings.log_level,
        worker=WORKER,  # torch imported once: zygote.py
        processes=run.ctx.processes,
        nproc=config.own.nproc,
        resident_max_mib=settings.run_resident_max_mib,
    )
    # The launcher stops, then kills, the process itself; the watch marks it overdue (a
    # torchrun job has no deadline of the run's: Run.deadline, so it is never marked).
    return supervised(run, child, grace + 60)


def supervised(run: Run, call: Callable[[], TrainResult], grace: float) -> TrainResult:
    """``call()`` on a thread of its own, watched: past the run's deadline the agent is
    overdue (health says so); ``grace`` seconds later a run that has not returned is
    abandoned.

    An abandoned thread cannot be killed (Python has no way to), so it keeps waiting
    until ``call`` returns (the launcher kills the run's process in its own time); the
    device slot is freed at once so the other agents train, and this agent starts nothing
    new while the thread lives.
    """
    ctx, agent, deadline, timeout = run.ctx, run.agent, run.deadline, run.config.run_timeout_seconds
    done: Future[TrainResult] = Future()

    def target() -> None:
        try:
            done.set_result(call())
        except BaseException as exc:  # handed to the job thread below
            done.set_exception(exc)
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
    return done.result()


def _clear_overdue(ctx: JobContext, agent: str) -> None:
    ctx.overdue.pop(agent, None)
    ctx.metrics.runs_overdue.labels(agent=agent).set(0)
