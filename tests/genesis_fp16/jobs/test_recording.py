"""Recording a finished run: what the daemon exports comes from TrainResult's typed fields."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from daemon_harness import clear_daemon_env
from fake_results import train_result
from in_process import train_in_process
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainResult
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Verdict
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    Calibration,
    Capabilities,
    GateReport,
)
from genesis_fp16_infrastructure.contract.reports import DataReport, DriftReport
from genesis_fp16_infrastructure.record_codec import ReportError
from genesis_fp16_infrastructure.training.reports import EarlyStopReport, Measured

AGENT = "typed"

# The typed fields of one run, and an extra that says otherwise under the same keys: the
# daemon must export the first and ignore the second.
ROWS = (Measured("bf16", "eager", 1.0, 1.0, 1.0, 3), Measured("fp32", "eager", 3.0, 3.0, 3.0, 3))
REPORTED = {
    "precision_calibration": Calibration("bf16", "measured", ROWS, {}, {}, 0.1),
    "early_stop": EarlyStopReport("loss", "min", 0.5, 7, 3, 0, 5, 10, "budget spent"),
    "data": DataReport(40, "abc", "changed", previous_records=0, new=40),
    "phases": {"read": 0.25, "train": 1.5},
    "device_memory_peak_bytes": 2048,
    "gate": GateReport("promoted", "first model", precision="bf16"),
    "drift": DriftReport(40, 0, {"new": 40}, {"tool": 0.1}, {"tool": 0.2}, (), 0.01, 0.05, False),
    "components": {"policy": "bf16", "master_weights": True},
    "diagnostics": {"mismatch_k3": 3e-7},
}
DECOY = {
    "data": {"records": 999, "change": "first", "new": 999},
    "phases": {"decoy": 9.0},
    "device_memory_peak_bytes": 1,
    "early_stop": {"best_step": 999},
    "diagnostics": {"mismatch_k3": 1.0},
    "components": {"policy": "fp16"},
}


class _Reporting:
    api_version = API_VERSION
    name = AGENT

    def train(self, request: TrainRequest) -> TrainResult:
        return train_result(agent=AGENT, steps=10, extra=DECOY, **REPORTED)


def _context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> JobContext:
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process
    settings = Settings(state_dir=tmp_path, agents={AGENT: {"data_path": tmp_path}})  # type: ignore[dict-item]
    return JobContext(
        settings, DaemonMetrics(CollectorRegistry(), "test"), DeviceSlots(1), threading.Event()
    )


def test_the_typed_fields_are_exported_and_logged_and_extra_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each typed field reaches its series and the finished line; extra's same keys do not."""
    ctx = _context(tmp_path, monkeypatch)
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Reporting(), Capabilities())  # type: ignore[arg-type]
    sample = ctx.metrics.registry.get_sample_value
    agent = {"agent": AGENT}
    auto = "genesis_fp16_auto_step_seconds"
    assert sample(auto, {**agent, "precision": "bf16", "chosen": "1"}) == 0.001
    assert sample(auto, {**agent, "precision": "fp32", "chosen": "0"}) == 0.003
    assert sample("genesis_fp16_early_stop_best_step", agent) == 7
    assert sample("genesis_fp16_training_records", agent) == 40
    assert sample("genesis_fp16_new_records_total", agent) == 40
    assert sample("genesis_fp16_run_phase_seconds", {**agent, "phase": "train"}) == 1.5
    assert sample("genesis_fp16_run_phase_seconds", {**agent, "phase": "decoy"}) is None
    assert sample("genesis_fp16_device_memory_peak_bytes", agent) == 2048
    assert sample("genesis_fp16_rl_mismatch_kl_k3_nats", agent) == 3e-7
    (finished,) = [e for e in logs if e["event"] == "training run finished"]
    assert finished["data"] == REPORTED["data"].to_json()
    assert finished["phases"] == REPORTED["phases"]
    # the run's own seconds beside the job's (its child and its recording included)
    assert finished["wall_seconds"] == train_result(agent=AGENT).wall_seconds
    assert isinstance(finished["duration_seconds"], float)
    assert finished["components"] == REPORTED["components"]
    assert finished["gate"] == REPORTED["gate"].to_json()
    assert finished["drift"] == REPORTED["drift"].to_json()
    assert finished["early_stop"] == {
        "best_step": 7,
        "best": 0.5,
        "evaluations": 3,
        "stop_reason": "budget spent",
    }
    assert sample("genesis_fp16_training_runs_total", {**agent, "outcome": "success"}) == 1


def test_the_typed_fields_cross_the_json_of_a_child_or_a_rank() -> None:
    """A result read back from its JSON (a child's, rank 0's) keeps every typed field."""
    result = train_result(agent=AGENT, **REPORTED)
    back = TrainResult.from_json(json.loads(json.dumps(result.to_json())))
    # A fresh measurement stays fresh across the child's JSON (it read as cached before
    # issue 66: the daemon could not tell a reused calibration from a new one).
    assert {name: getattr(back, name) for name in REPORTED} == REPORTED


def test_a_result_whose_record_is_damaged_is_refused_in_one_line() -> None:
    """A child's result with a gate of an unknown outcome, or a demotion to fp8: a one-line
    ReportError naming the field, never a traceback from deep in the daemon."""
    out = train_result(agent=AGENT, **REPORTED).to_json()
    with pytest.raises(ReportError, match=r"^TrainResult.gate.outcome: one of .* got 'maybe'$"):
        TrainResult.from_json({**out, "gate": {**out["gate"], "outcome": "maybe"}})
    demotion = {"from": "fp16", "to": "fp8", "reason": "r", "step": 1, "rollback_step": 0}
    with pytest.raises(ReportError, match=r"^TrainResult.demotions\[0\].to: one of"):
        TrainResult.from_json({**out, "demotions": [{**demotion, "detail": ""}]})
    with pytest.raises(ReportError, match=r"^TrainResult: 'steps' missing$"):
        TrainResult.from_json({k: v for k, v in out.items() if k != "steps"})


def test_a_childs_result_line_is_the_result_and_a_diagnostics_line_is_live() -> None:
    """The launcher reads a result line (which has a diagnostics field) as the result, and
    only a line of diagnostics alone as live diagnostics."""
    import io
    import json

    from genesis_fp16.launch.launcher import _Ended, _read_stdout

    live: list[dict[str, float]] = []
    result = train_result(agent=AGENT, diagnostics=None).to_json()
    lines = [json.dumps({"diagnostics": {"mismatch_k3": 1e-7}}), json.dumps(result)]
    output = _Ended()
    _read_stdout(io.StringIO("\n".join(lines) + "\n"), output, None, lambda d: live.append(dict(d)))
    assert output.result == result and live == [{"mismatch_k3": 1e-7}]


def test_the_post_run_step_recovers_what_a_killed_transition_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each run (model_history.bound_agent_history) the daemon finishes, before it prunes,
    what a rollback killed after its pointer's commit left: the candidate's verdict the
    journal decided and the rollback's event in the agent's outbox."""
    from genesis_fp16.jobs.model_history import bound_agent_history
    from genesis_fp16_infrastructure.agent_folder import candidates, outbox, transitions

    ctx = _context(tmp_path, monkeypatch)
    home = AgentFolder(tmp_path, AGENT)
    folder = home.checkpoint_dir
    served = []
    for digest in ("aaaa", "bbbb"):
        candidate = candidates.new_candidate(folder, {"fingerprint": digest, "records": 10})
        checkpoint = candidate / "ckpt-0000000005.pt"
        checkpoint.write_bytes(b"weights " + digest.encode())
        promoted = Verdict.from_json({"outcome": "promoted"})
        entry = candidates.candidate_entry(folder, candidate, checkpoint, promoted)
        transitions.serve(folder, entry, "gate", verdict={"outcome": "promoted"})
        served.append(candidate)
    transitions.rollback(folder, verdict={"reason": "live_regression"})
    lost = outbox.read_events(home.root)[-1]
    assert lost.kind == "rollback"
    lost.path.unlink()  # the state a kill between the pointer and its copies left:
    candidates.write_verdict(served[1], {"outcome": "promoted"})  # the verdict not rolled
    bound_agent_history(ctx.settings, ctx.metrics, home)
    verdict = candidates.read_verdict(served[1])
    assert verdict.outcome == "rolled_back" and verdict.journal_seq == 3
    assert [e.id for e in outbox.read_events(home.root)][-1] == lost.id
