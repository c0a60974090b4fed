"""The precision gauge shows what trains: a reload during a run does not show the next run's.

In-process, without the scheduler: the CI failure this guards against was a race in the
daemon subprocess test (a reload set fp32 while the fp16 run's progress set fp16 again).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from genesis_fp16.daemon import Daemon
from genesis_fp16.jobs import DeviceSlots, JobContext
from genesis_fp16.settings import load_settings
from infrastructure.plugin_api import AgentPlugin

AGENT = "agent_a"


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Daemon:
    for key in list(os.environ):
        if key.startswith("GENESIS_FP16_") or key in ("ENABLE_FP16_TRAINING", "NOTIFY_SOCKET"):
            monkeypatch.delenv(key)
    env_file = tmp_path / ".env"
    env_file.write_text(f"ENABLE_FP16_TRAINING=false\nGENESIS_FP16_STATE_DIR={tmp_path}\n")
    settings = load_settings(env_file)
    daemon = Daemon(settings, env_file, registry=CollectorRegistry())
    daemon.plugins = {AGENT: AgentPlugin.__new__(AgentPlugin)}
    daemon.context = JobContext(
        settings=settings, metrics=daemon.metrics, slots=DeviceSlots(1), stopping=daemon.stopping
    )
    return daemon


def _gauge(daemon: Daemon, precision: str) -> float | None:
    return daemon.registry.get_sample_value(
        "genesis_fp16_precision", {"agent": AGENT, "precision": precision}
    )


def test_running_agent_keeps_the_precision_of_its_run(daemon: Daemon) -> None:
    """ENABLE_FP16_TRAINING=false while an fp16 run trains: the gauge stays fp16 until it ends."""
    daemon.metrics.set_precision(AGENT, "fp16")
    daemon.context.running.add(AGENT)
    daemon._show_precisions()
    assert (_gauge(daemon, "fp16"), _gauge(daemon, "fp32")) == (1, 0)

    daemon.context.running.discard(AGENT)
    daemon._show_precisions()
    assert (_gauge(daemon, "fp16"), _gauge(daemon, "fp32")) == (0, 1)
