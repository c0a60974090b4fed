"""The end of a run is one event (jobs/run_ended.py): after a run of each outcome every
series is what main exported before the event, its subscribers run in their documented
order, and one that raises stops none of the others nor the run's record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
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
from genesis_fp16.launch.launcher import RunStopped
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import API_VERSION, TrainRequest, TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    Calibration,
    Capabilities,
    GateReport,
    LiveReport,
)
from genesis_fp16_infrastructure.contract.reports import DataReport, DriftReport
from genesis_fp16_infrastructure.training.reports import Demotion, EarlyStopReport, Measured

AGENT = "ended"
# Written from main at f277212d, before the event, by ``python <this file>`` (with
# tests/genesis_fp16 on PYTHONPATH): every sample of the registry after one in-process run
# of each case, a clock's values marked "set".
EXPECTED = Path(__file__).with_name("run_ended_series_f277212d.json")

ROWS = (Measured("bf16", "eager", 1.0, 1.0, 1.0, 3), Measured("fp32", "eager", 3.0, 3.0, 3.0, 3))
LIVE = {
    "served": "m2",
    "against": "m1",
    "records": 9,
    "new_records": 9,
    "alpha": 0.05,
    "difference": 0.6,
    "lower": 0.4,
    "upper": 0.8,
    "margin": 0.02,
    "regression": True,
}
REPORTED: dict[str, Any] = {
    "precision_calibration": Calibration("bf16", "measured", ROWS, {}, {}, 0.1),
    "early_stop": EarlyStopReport("loss", "min", 0.5, 7, 3, 0, 5, 10, "budget spent"),
    "data": DataReport(40, "abc", "changed", previous_records=0, new=40),
    "phases": {"read": 0.25, "train": 1.5},
    "device_memory_peak_bytes": 2048,
    "drift": DriftReport(40, 0, {"new": 40}, {"tool": 0.1}, {"tool": 0.2}, (), 0.01, 0.05, False),
    "diagnostics": {"mismatch_k3": 3e-7},
    "execution_fallback": "capture_failed",
    "quarantined": 2,
    "demotions": (Demotion("fp16", "bf16", "overflow_rate", 15, 10),),
}
CASES: dict[str, dict[str, Any]] = {
    "promoted": {**REPORTED, "gate": GateReport("promoted", "first model", precision="bf16")},
    "rejected": {
        **REPORTED,
        "rejected": True,
        "gate": GateReport("rejected", "worse", precision="bf16"),
        "live": LiveReport.from_json(LIVE),
    },
    "learned_nothing": {
        "failure": "nonfinite_gradients",
        "failure_detail": "every step skipped",
        "precision_used": "fp32",
    },
    "stopped_early": {"stopped_early": True, "loss_scale": 1024.0, "precision_used": "fp16"},
    "up_to_date": {"up_to_date": True, "steps": 0, "up_to_date_against": "abc"},
    "failed": {},  # train() raises
    "stopped": {},  # train() raises RunStopped: its child still starting
}
# Values that are a clock's: compared as set (non-zero) or not.
CLOCKS = ("timestamp_seconds", "_duration_seconds_sum", "_duration_seconds_bucket")


class _Ends:
    api_version = API_VERSION
    name = AGENT

    def __init__(self, case: str) -> None:
        self.case = case

    def train(self, request: TrainRequest) -> TrainResult:
        if self.case == "failed":
            raise RuntimeError("a bug")
        if self.case == "stopped":
            raise RunStopped("the daemon is shutting down")
        return train_result(agent=AGENT, **CASES[self.case])


def _context(state: Path) -> JobContext:
    settings = Settings(  # in-process: a test's plugin object is no entry point for a child
        state_dir=state,
        agents={AGENT: {"data_path": state}},  # type: ignore[dict-item]
    )
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    metrics.add_agent(AGENT)
    return JobContext(settings, metrics, DeviceSlots(1), threading.Event())


def _samples(registry: CollectorRegistry) -> list[list[Any]]:
    found = []
    for family in registry.collect():
        for s in family.samples:
            value: Any = s.value
            if any(s.name.endswith(c) or c in s.name for c in CLOCKS):
                value = "set" if value else value
            found.append([s.name, sorted(s.labels.items()), value])
    return sorted(found, key=json.dumps)


def series_after(case: str, state: Path) -> list[list[Any]]:
    """Every sample of a fresh registry after one run of ``case`` in ``state``."""
    ctx = _context(state)
    run_agent_job(ctx, AGENT, _Ends(case), Capabilities())  # type: ignore[arg-type]
    return json.loads(json.dumps(_samples(ctx.metrics.registry)))


@pytest.fixture(autouse=True)
def _no_daemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_daemon_env(monkeypatch)
    train_in_process(monkeypatch)  # a test's plugin object is no entry point for a process


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_series_after_a_run_is_as_main_exported_it(case: str, tmp_path: Path) -> None:
    """After a run of each outcome, each sample of every family equals main's."""
    expected = json.loads(EXPECTED.read_text())[case]
    found = series_after(case, tmp_path)
    assert [s for s in found if s not in expected] == []
    assert [s for s in expected if s not in found] == []


def _write_expected(root: Path) -> Iterator[tuple[str, list[list[Any]]]]:
    for case in sorted(CASES):
        yield case, series_after(case, root / case)


if __name__ == "__main__":
    import os
    import tempfile

    for name in [n for n in os.environ if n.startswith("GENESIS_FP16_")]:
        del os.environ[name]
    with tempfile.TemporaryDirectory() as tmp:
        written = dict(_write_expected(Path(tmp)))
    EXPECTED.write_text(json.dumps(written, indent=1, sort_keys=True) + "\n")


# The documented order (jobs/run_ended.py's docstring), each subscriber by its concern.
ORDER = [
    "health",
    "folder_records",
    "guard_memory",
    "carried_scale",
    "history_bound",
    "precision",
    "steps",
    "report",
    "rl_diagnostics",
    "gate",
    "ranges",
    "live_watch",
    "recent_verdicts",
    "tracker",
    "log_line",
    "count",
]


@pytest.mark.parametrize("case", ["promoted", "failed"])
def test_the_subscribers_run_in_the_documented_order(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each subscriber once, in the documented order; when the run's count moves, its
    record and its log line are already there."""
    from genesis_fp16.jobs import run_ended

    called: list[str] = []
    seen_at_count: dict[str, Any] = {}

    def traced(subscriber: run_ended.Subscriber) -> run_ended.Subscriber:
        def call(event: run_ended.RunEnded) -> None:
            called.append(subscriber.__name__.lstrip("_"))
            if subscriber.__name__ == "_count":
                seen_at_count["record"] = event.run.folder.last_run()
                seen_at_count["lines"] = [e["event"] for e in logs]
            subscriber(event)

        call.__name__ = subscriber.__name__
        return call

    monkeypatch.setattr(run_ended, "SUBSCRIBERS", tuple(map(traced, run_ended.SUBSCRIBERS)))
    ctx = _context(tmp_path)
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Ends(case), Capabilities())  # type: ignore[arg-type]
    assert called == ORDER
    assert seen_at_count["record"] is not None
    line = "training run failed" if case == "failed" else "training run finished"
    assert line in seen_at_count["lines"]


def test_a_subscriber_that_raises_stops_neither_the_others_nor_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The carried scale's subscriber raising (a bug): one error line naming it with its
    traceback, counted as run_failures{reason="error"}; the subscribers after it still
    run, and the run keeps its record, its finished line and its count by outcome."""
    from genesis_fp16.jobs import run_ended

    def broken(*args: object) -> None:
        raise RuntimeError("cannot carry the scale")

    monkeypatch.setattr(run_ended, "record_scale", broken)
    ctx = _context(tmp_path)
    with capture_logs() as logs:
        run_agent_job(ctx, AGENT, _Ends("promoted"), Capabilities())  # type: ignore[arg-type]
    (failed,) = [e for e in logs if e["event"] == "the end of a run not fully recorded"]
    assert failed["subscriber"] == "carried_scale" and "exc_info" in failed
    assert failed["error"] == "RuntimeError: cannot carry the scale"
    sample = ctx.metrics.registry.get_sample_value
    agent = {"agent": AGENT}
    assert sample("genesis_fp16_run_failures_total", {**agent, "reason": "error"}) == 1
    assert sample("genesis_fp16_training_runs_total", {**agent, "outcome": "success"}) == 1
    assert sample("genesis_fp16_training_runs_total", {**agent, "outcome": "failed"}) == 0
    assert sample("genesis_fp16_gate_verdicts_total", {**agent, "outcome": "promoted"}) == 1
    assert [e["event"] for e in logs].count("training run finished") == 1
    record = AgentFolder(tmp_path, AGENT).last_run()
    assert record is not None and record.outcome == "success"
