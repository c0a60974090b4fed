"""The daemon's side of fault bundles: a request's run writes one in the agent's state
folder, ``train`` names it (``--json``: ``fault_bundle``), the counter and the log say it,
``precision show`` lists it.

The run is real fp16 arithmetic on the CPU through ``fit()``
(tests/infrastructure/training/guard_faults.py's lone-overflow set-up).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from daemon_harness import daemon_env
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infrastructure" / "training"))
from guard_faults import STEPS, FaultTask

from genesis_fp16.commands.train import describe
from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import record_run
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.training import GuardConfig, fit

AGENT = "se_darwin"
QUIET = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)


def _result(state: Path) -> TrainResult:
    request = TrainRequest(
        agent=AGENT,
        precision="fp16",
        precision_reason="test",
        state_dir=state,
        checkpoint_dir=state / "agents" / AGENT / "checkpoints",
        guard=QUIET,
        steps=STEPS,
    )
    fitted = fit(FaultTask("overflow", until=18), request.fit_options())
    return TrainResult.from_fit(request, fitted)


def test_a_bundle_is_reported_counted_logged_and_listed(tmp_path: Path) -> None:
    """One lone overflow: train --json's fault_bundle names a file in the agent's folder,
    the counter is 1 for first_nonfinite, the log names the replay command, and
    `precision show` (text and --json) lists it."""
    result = _result(tmp_path)
    shown = result.to_json()
    path = Path(shown["fault_bundle"])
    assert path.parent == tmp_path / "agents" / AGENT / "fault_bundles" and path.is_file()
    assert TrainResult.from_json(json.loads(json.dumps(shown))).fault_bundle == str(path)
    assert f"fault bundle: {path} (genesis-fp16 replay {path})" in describe(result)
    metrics = DaemonMetrics(CollectorRegistry(), version="test")
    with capture_logs() as logs:
        record_run(Settings(state_dir=tmp_path), metrics, AGENT, result)  # type: ignore[call-arg]
    labels = {"agent": AGENT, "reason": "first_nonfinite"}
    assert metrics.registry.get_sample_value("genesis_fp16_fault_bundles_total", labels) == 1
    (logged,) = [e for e in logs if e["event"] == "fault bundle written"]
    assert logged["step"] == 18 and logged["replay"] == f"genesis-fp16 replay {path}"
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(tmp_path)}, fixtures=False)
    for extra in ((), ("--json",)):
        done = subprocess.run(
            [sys.executable, "-m", "genesis_fp16", "precision", "show", AGENT, *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        if extra:
            assert json.loads(done.stdout)["fault_bundles"][0]["path"] == str(path)
        else:
            assert f"step 18 first_nonfinite: {path}" in done.stdout
