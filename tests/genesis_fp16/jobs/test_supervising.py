"""The run's watch (supervising.supervised), on the path every run takes: past its
timeout the agent is overdue, past the grace the run is abandoned and counted hung, the
agent's next jobs are skipped while the abandoned call lives, and its end clears it.

Kept from the removed RUN_ISOLATION=thread (issue 91 item 4): there a hung plugin was
abandoned this way; now the watch does it for a run's process the launcher has not ended
(a kill that does not take). Trained in this process through the test seam
(tests/genesis_fp16/in_process.py), so a plugin that blocks until told is enough."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from fake_results import train_result
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities

AGENT = "hanging"


class _Hanging:
    """train() returns only once ``release`` is set, as a hung plugin might never."""

    api_version = API_VERSION
    name = AGENT

    def __init__(self) -> None:
        self.release = threading.Event()

    def train(self, request: TrainRequest) -> Any:
        self.release.wait(timeout=60)
        return train_result(agent=AGENT, steps=1)


def _sample(ctx: JobContext, name: str, **labels: str) -> float | None:
    return ctx.metrics.registry.get_sample_value(name, {"agent": AGENT, **labels})


def test_a_hung_run_is_abandoned_counted_and_its_next_job_skipped_until_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that never reaches its end within its 0.5 s timeout and 0.5 s grace: a
    failed run with reason hung, the agent overdue (the gauge at 1, the reason kept for
    /healthz), its next job skipped and counted; once the call returns, all is cleared."""
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)
    settings = Settings(
        state_dir=tmp_path,
        shutdown_timeout_seconds=0.5,
        agents={AGENT: {"data_path": tmp_path, "run_timeout_seconds": 0.5}},  # type: ignore[dict-item]
    )
    ctx = JobContext(
        settings, DaemonMetrics(CollectorRegistry(), "test"), DeviceSlots(1), threading.Event()
    )
    plugin = _Hanging()
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
        (failed,) = [e for e in logs if e["event"] == "training run failed"]
        assert "no step boundary 0.5 s after the run timeout" in failed["error"]
        assert _sample(ctx, "genesis_fp16_run_failures_total", reason="hung") == 1
        assert _sample(ctx, "genesis_fp16_runs_overdue") == 1
        assert "abandoned" in ctx.overdue[AGENT] and ctx.hung[AGENT].is_alive()
        run_agent_job(ctx, AGENT, plugin, Capabilities())  # type: ignore[arg-type]
        assert _sample(ctx, "genesis_fp16_jobs_skipped_total", reason="hung") == 1
        plugin.release.set()
        ctx.hung[AGENT].join(timeout=10)
    assert AGENT not in ctx.hung and AGENT not in ctx.overdue
    assert _sample(ctx, "genesis_fp16_runs_overdue") == 0
    assert [e for e in logs if e["event"] == "an abandoned run returned at last"]
