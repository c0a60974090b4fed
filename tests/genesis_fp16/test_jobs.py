"""One scheduled job in-process: live RL diagnostics; how a refused run is logged, counted."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.jobs import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics import DaemonMetrics
from genesis_fp16.settings import Settings
from infrastructure.plugin_api import API_VERSION, TrainRequest, TrainRequestError

AGENT = "refusing"


class _Refusing:
    api_version = API_VERSION
    name = AGENT

    def __init__(self, error: Exception) -> None:
        self.error = error

    def train(self, request: TrainRequest) -> Any:
        if request.on_diagnostics is not None:  # one live iteration before the refusal
            request.on_diagnostics({"mismatch_k3": 2e-7})
        raise self.error


@pytest.mark.parametrize(
    ("error", "traceback"),
    [(TrainRequestError("refusing: option 'x' is not known"), False), (RuntimeError("bug"), True)],
)
def test_refusal_is_one_line_a_bug_keeps_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, traceback: bool
) -> None:
    """TrainRequestError logs its message, no traceback; a bug keeps its traceback; both fail."""
    for key in list(os.environ):
        if key.startswith("GENESIS_FP16_") or key == "ENABLE_FP16_TRAINING":
            monkeypatch.delenv(key)
    settings = Settings(state_dir=tmp_path, agents={AGENT: {"data_path": tmp_path}})  # type: ignore[arg-type]
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    ctx = JobContext(settings, metrics, DeviceSlots(1), threading.Event())
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Refusing(error))  # type: ignore[arg-type]
    (failed,) = [e for e in logs if e["event"] == "training run failed"]
    assert ("exc_info" in failed) == traceback
    assert (failed.get("error") == str(error)) != traceback
    runs = metrics.registry.get_sample_value(
        "genesis_fp16_training_runs_total", {"agent": AGENT, "outcome": "failed"}
    )
    assert runs == 1
    live = metrics.registry.get_sample_value(
        "genesis_fp16_rl_mismatch_kl_k3_nats", {"agent": AGENT}
    )
    assert live == 2e-7  # exported while the run trained, not only from a result
