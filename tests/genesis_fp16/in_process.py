"""The tests' seam: a job's run trained in the test's own process.

Not part of the product (it is not shipped: tests/ only). No setting, document or command
selects it; the daemon always
trains in a process of its own (genesis_fp16/jobs/supervising.py). A test whose plugin
is an object it built (no entry point a run's process could import), or that asserts
what a run records rather than how it is isolated, calls :func:`train_in_process` and
gets the run on a watched thread of its own process: the same ``supervised`` watch
(overdue past the timeout, abandoned past the grace), no process start::

    def test_x(tmp_path, monkeypatch):
        train_in_process(monkeypatch)
        run_agent_job(ctx, "my_agent", MyPlugin(), Capabilities())

A hung ``train()`` here is abandoned, never killed, and an ``os._exit`` ends the test
process: what the resident run process guarantees is tested on that path
(tests/genesis_fp16/launch/test_daemon_isolation.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genesis_fp16.jobs import agent_job
from genesis_fp16.jobs.job_state import Run
from genesis_fp16.jobs.supervising import supervised
from genesis_fp16.plugin_api import AgentPlugin, TrainRequest, TrainResult
from genesis_fp16_infrastructure.api import Capabilities, check_result, run_plugin

if TYPE_CHECKING:
    import pytest


def execute_in_process(
    run: Run, plugin: AgentPlugin, request: TrainRequest, capabilities: Capabilities
) -> TrainResult:
    """``supervising.execute_run``'s seam: ``plugin`` trains on a watched thread here."""
    check = request.snapshot.data if request.snapshot is not None else None
    if check is not None and check.up_to_date is not None:  # the plan's data check
        return TrainResult.from_json(check.up_to_date)

    def call() -> TrainResult:  # a wrong field: one line naming it, as a run's process says
        return check_result(run_plugin(plugin, request, capabilities), run.agent)

    return supervised(run, call, run.settings.shutdown_timeout_seconds)


def train_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the rest of the test, every job's run trains in this process (undone with
    ``monkeypatch``)."""
    monkeypatch.setattr(agent_job, "execute_run", execute_in_process)
