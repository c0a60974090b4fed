"""A run a reload stopped is rerun by the same job, in-process: also when the edit was undone
before the run reached its step boundary (it then waited for the next schedule)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from fake_results import train_result
from in_process import train_in_process
from prometheus_client import CollectorRegistry

from genesis_fp16.config.settings import Settings, resolve_device
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.jobs.job_state import slot_keys
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities

AGENT = "flapping"


def _settings(tmp_path: Path, fp16: bool) -> Settings:
    return Settings(
        state_dir=tmp_path,
        agents={AGENT: {"data_path": tmp_path}},  # type: ignore[dict-item]
        enable_fp16_training=fp16,
    )


class _Flapping:
    """Its first run sees a rollback land and be undone before its next step boundary."""

    api_version = API_VERSION
    name = AGENT

    def __init__(self, ctx: JobContext, tmp_path: Path) -> None:
        self.ctx = ctx
        self.tmp_path = tmp_path
        self.requests: list[TrainRequest] = []

    def train(self, request: TrainRequest) -> Any:
        self.requests.append(request)
        if len(self.requests) > 1:
            return train_result(agent=AGENT, precision_used=request.precision.requested)
        self.ctx.settings = _settings(self.tmp_path, fp16=False)  # the rollback lands
        stopped = request.should_stop()
        self.ctx.settings = _settings(self.tmp_path, fp16=True)  # and is undone
        assert stopped
        return train_result(agent=AGENT, precision_used="fp16", stopped_early=True)


def test_a_rollback_undone_before_the_stop_still_reruns_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped by a rollback that is undone before the run ends: the job reruns it in fp16,
    and the gauge is not set back by the stopped run."""
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    ctx = JobContext(_settings(tmp_path, fp16=True), metrics, DeviceSlots(1), threading.Event())
    plugin = _Flapping(ctx, tmp_path)
    run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    assert [r.precision.requested for r in plugin.requests] == ["fp16", "fp16"]
    runs = "genesis_fp16_training_runs_total"
    get = metrics.registry.get_sample_value
    assert get(runs, {"agent": AGENT, "outcome": "stopped"}) == 1
    assert get(runs, {"agent": AGENT, "outcome": "success"}) == 1
    assert not ctx.running  # the job ended and gave its slot back


class _FreedAtSigterm(DeviceSlots):
    """The slot a SIGTERM-stopped run frees, taken by the queued job as SIGTERM lands."""

    def __init__(self, stopping: threading.Event) -> None:
        super().__init__(1)
        self.stopping = stopping

    def acquire(self, devices: Any, give_up: Any) -> bool:
        taken = super().acquire(devices, give_up)
        self.stopping.set()  # SIGTERM: after the wait, before the job looks again
        return taken


def test_a_job_queued_at_sigterm_never_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that gets its device slot just as the daemon starts shutting down trains
    nothing, is not counted running, and gives the slot back."""
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    stopping = threading.Event()
    slots = _FreedAtSigterm(stopping)
    ctx = JobContext(_settings(tmp_path, fp16=True), DaemonMetrics(CollectorRegistry(), "t"),
                     slots, stopping)  # fmt: skip
    plugin = _Flapping(ctx, tmp_path)
    run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
    assert plugin.requests == [] and not ctx.running
    used = slot_keys(resolve_device(ctx.settings.agent(AGENT).device))
    assert DeviceSlots.acquire(slots, used, lambda: True)  # the slot was given back
