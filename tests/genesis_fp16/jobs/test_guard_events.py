"""A real demotion and its fault bundle reach the agent's outbox before the daemon counts
or logs them (the run is the guard's own fault set-up: real fp16 arithmetic on the CPU)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infrastructure" / "training"))
from guard_faults import CASES, STEPS, FaultTask, guarded_run

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import record_run
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.agent_folder import outbox
from genesis_fp16_infrastructure.training import GuardConfig, fit

AGENT = "fault_agent"


class _Counted:
    """A counter's ``labels`` that first notes which events the outbox holds by then."""

    def __init__(self, counter: Any, folder: Path, seen: list[list[str]]) -> None:
        self.counter, self.folder, self.seen = counter, folder, seen

    def labels(self, **labels: str) -> Any:
        self.seen.append([e.kind for e in outbox.read_events(self.folder)])
        return self.counter.labels(**labels)


def _request(state: Path, guard: GuardConfig, checkpoints: str) -> TrainRequest:
    return TrainRequest(
        agent=AGENT,
        precision="fp16",
        precision_reason="test",
        state_dir=state,
        checkpoint_dir=state / checkpoints,  # each run its own: neither resumes the other
        guard=guard,
        steps=STEPS,
    )


def test_a_demotion_and_a_fault_bundle_are_in_the_outbox_before_they_are_counted(
    tmp_path: Path,
) -> None:
    """record_run of a real nonfinite-loss demotion, then of a run whose lone overflow
    wrote a fault bundle: the outbox holds each event (the demotion's reason, the
    bundle's path) before its counter moves."""
    fault, guard, scaler = CASES["nonfinite_loss"]
    request = _request(tmp_path, guard, "demoted")
    demoted = guarded_run(FaultTask(fault), request.checkpoint_dir, guard, scaler)
    quiet = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)
    lone_overflow = _request(tmp_path, quiet, "bundled").fit_options()
    bundled = fit(FaultTask("overflow", until=18), lone_overflow)
    results = [TrainResult.from_fit(request, demoted), TrainResult.from_fit(request, bundled)]
    assert results[0].demotions and results[1].fault_bundles
    metrics = DaemonMetrics(CollectorRegistry(), version="test")
    folder, seen = tmp_path / "agents" / AGENT, []
    metrics.precision_demotions = _Counted(metrics.precision_demotions, folder, seen)  # type: ignore[assignment]
    metrics.fault_bundles = _Counted(metrics.fault_bundles, folder, seen)  # type: ignore[assignment]
    for result in results:
        record_run(Settings(state_dir=tmp_path), metrics, AGENT, result)  # type: ignore[call-arg]
    assert seen[0][-1] == "demotion" and seen[-1][-1] == "fault_bundle"
    events = outbox.read_events(folder)
    assert events[0].data["reason"] == "nonfinite_loss" and events[0].data["to"] == "bf16"
    assert events[-1].kind == "fault_bundle"
    assert events[-1].data["path"] == results[1].fault_bundles[-1].path
