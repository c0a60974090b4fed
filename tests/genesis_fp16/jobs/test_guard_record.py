"""The daemon records each kind of real demotion: the counter, the log and the state file.

The runs are the guard's own fault set-ups (tests/infrastructure/training/guard_faults.py):
real fp16 arithmetic through ``fit()`` on the CPU, not hand-written results.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infrastructure" / "training"))
from guard_faults import CASES, DEMOTED_AT, ROLLBACK_TO, FaultTask, guarded_run

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import record_run
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.folder import AgentFolder

AGENT = "fault_agent"


def _demoted_run(reason: str, tmp_path: Path) -> TrainResult:
    """The TrainResult an agent reports after the ``reason`` fault set-up demoted it."""
    fault, guard, scaler = CASES[reason]
    checkpoints = tmp_path / "checkpoints"
    fitted = guarded_run(FaultTask(fault), checkpoints, guard, scaler)
    request = TrainRequest(
        agent=AGENT,
        precision="fp16",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=checkpoints,
        guard=guard,
    )
    return TrainResult.from_fit(request, fitted)


@pytest.mark.slow
@pytest.mark.parametrize("reason", sorted(CASES))
def test_a_real_demotion_is_counted_logged_and_remembered(reason: str, tmp_path: Path) -> None:
    """record_run turns each real fault's demotion into counter 1, a log event and the file."""
    result = _demoted_run(reason, tmp_path)
    metrics = DaemonMetrics(CollectorRegistry(), version="test")
    with capture_logs() as logs:
        record_run(Settings(state_dir=tmp_path), metrics, AGENT, result)  # type: ignore[call-arg]

    labels = {"agent": AGENT, "from": "fp16", "to": "bf16", "reason": reason}
    counted = metrics.registry.get_sample_value("genesis_fp16_precision_demotions_total", labels)
    assert counted == 1
    (logged,) = [e for e in logs if e["event"] == "precision demoted"]
    assert (logged["precision_from"], logged["precision_to"], logged["reason"]) == (
        "fp16",
        "bf16",
        reason,
    )
    memory = AgentFolder(tmp_path, AGENT).precision_memory()
    assert memory is not None
    assert (memory.demoted_from, memory.demoted_to, memory.reason) == ("fp16", "bf16", reason)
    assert (memory.step, memory.rollback_step, memory.clean_runs) == (DEMOTED_AT, ROLLBACK_TO, 0)
    assert [h["detail"] for h in memory.history] == [result.demotions[0].detail]
