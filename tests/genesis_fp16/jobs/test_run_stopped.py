"""A run stopped by the daemon (shutdown, precision switch) is `stopped`, even when its
child process had not started training yet: never a failure, never an error log."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import clear_daemon_env
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.launch.launcher import LaunchError, RunStopped, train_in_child
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest
from genesis_fp16_infrastructure.api import Capabilities
from genesis_fp16_infrastructure.data.synthetic import generate_pool

AGENT = "stopping"


def _request(tmp_path: Path, **fields: Any) -> TrainRequest:
    """A 5-step fp32 se_darwin run on a 100-record pool in ``tmp_path``."""
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(100, seed=0)))
    return TrainRequest(
        agent="se_darwin",
        precision="fp32",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "ck",
        data_path=pool,
        steps=5,
        **fields,
    )


def test_a_child_stopped_during_its_start_up_is_stopped_not_failed(tmp_path: Path) -> None:
    """A stop request from the first moment: SIGTERM reaches the child while it starts
    (before its handler), and the launcher says the run was stopped, not that it failed."""
    request = _request(tmp_path, should_stop=lambda: True)
    try:
        result = train_in_child(request, timeout=120, kill_after=30)
    except LaunchError as exc:  # what it was before: a failed run, logged as an error
        pytest.fail(f"a stopped child is a failed run: {exc}")
    except RunStopped as exc:
        assert "a stop request" in str(exc)
    else:  # the child had installed its handler in time: it stopped at its first step
        assert result.stopped_early and result.steps == 0


def test_a_child_past_its_timeout_in_start_up_is_a_hung_failure(tmp_path: Path) -> None:
    """The run's own timeout (not a stop request) reached before any result: a failure
    with reason hung, as a run that ignores the SIGTERM is, never a quiet 'stopped'."""
    request = _request(tmp_path)
    try:
        result = train_in_child(request, timeout=0.01, kill_after=30)
    except LaunchError as exc:
        assert exc.reason == "hung" and "timeout" in str(exc)
    else:  # the child had installed its handler in time: it stopped at its first step
        assert result.stopped_early and result.steps == 0


class _StoppedInStartUp:
    api_version = API_VERSION
    name = AGENT

    def train(self, request: TrainRequest) -> Any:
        raise RunStopped("the run's process ended (exit code -15) on a stop request")


def test_the_job_counts_a_run_stopped_in_start_up_as_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job: outcome stopped in the metrics and the log, no failure counted or logged."""
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    settings = Settings(
        state_dir=tmp_path,
        agents={AGENT: {"data_path": tmp_path}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    ctx = JobContext(settings, metrics, DeviceSlots(1), threading.Event())
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _StoppedInStartUp(), Capabilities())  # type: ignore[arg-type]
    runs = "genesis_fp16_training_runs_total"
    get = metrics.registry.get_sample_value
    assert get(runs, {"agent": AGENT, "outcome": "stopped"}) == 1
    assert not get(runs, {"agent": AGENT, "outcome": "failed"})  # never counted
    assert not [e for e in logs if e["log_level"] in ("error", "critical")]
    (finished,) = [e for e in logs if e["event"] == "training run finished"]
    assert finished["outcome"] == "stopped"
