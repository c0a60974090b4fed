"""`genesis-fp16 replay`: a real `train` writes a fault bundle and `replay` runs its step
again, bit for bit on the CPU, naming where it went non-finite; a damaged bundle is one line.

The agent is the guard fixture (tests/fixtures/guard_plugins): from step 12 its loss's
gradient is multiplied by 1e9 under fp16 autocast, so fp16 overflows in the backward of
the loss, and bf16 and fp32 train normally.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_fork import run_cli
from daemon_harness import FIXTURE_PLUGINS, daemon_env

from genesis_fp16_infrastructure.agent_folder import outbox

GUARD_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "guard_plugins"
AGENT = "fixture_fault"
ENV = {
    "PYTHONPATH": os.pathsep.join([str(GUARD_PLUGINS), str(FIXTURE_PLUGINS)]),
    "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
    "ENABLE_FP16_TRAINING": "true",
    "GENESIS_FP16_GUARD_CHECK_INTERVAL": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "5",
    "GENESIS_FP16_GUARD_OVERFLOW_WARMUP": "0",
    "GENESIS_FP16_GUARD_BF16_NEEDS_NATIVE": "false",
    "FIXTURE_FAULT_STEP": "12",
}


def _cli(state: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(state), **ENV}, fixtures=False)
    done = run_cli(
        [*args],
        cwd=state,
        env=env,
        timeout=300,
    )
    assert done.returncode == code, done.stderr[-2000:]
    return done


@pytest.mark.slow
def test_train_writes_a_bundle_that_replay_reproduces_and_explains(tmp_path: Path) -> None:
    """The bundle of the demotion's step replays bit for bit in fp16 on the CPU, names the
    loss's backward, and shows bf16 and fp32 taking the same step."""
    data = tmp_path / "data"
    data.mkdir()
    _cli(tmp_path, "data", "generate", AGENT, "--out", str(data))
    path = next(data.rglob("*.pt"))
    trained = _cli(
        tmp_path,
        "train",
        AGENT,
        "--precision",
        "fp16",
        "--steps",
        "30",
        "--data",
        str(path),
        "--json",
    )
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    bundle = result["fault_bundle"]
    assert bundle and Path(bundle).parent == tmp_path / "agents" / AGENT / "fault_bundles"
    assert [b["reason"] for b in result["fault_bundles"]] == ["demotion"]
    # an operator's train in the state folder announces them as the daemon's runs do
    events = outbox.read_events(tmp_path / "agents" / AGENT)
    assert [e.kind for e in events] == ["demotion", "fault_bundle"]
    assert events[0].data["to"] == result["demotions"][0]["to"]
    assert events[1].data["path"] == bundle
    report = json.loads(_cli(tmp_path, "replay", bundle, "--json").stdout)
    assert report["reproduced"] is True and report["same_setup"] is True
    assert report["first_nonfinite"] == {"module": "loss", "phase": "backward", "tensor": "grad"}
    assert report["replayed"]["skipped"] is True
    assert report["precisions"]["fp32"]["skipped"] is False
    assert report["precisions"]["bf16"]["skipped"] is False
    assert set(report["per_module"]) >= {"0", "2"}
    text = _cli(tmp_path, "replay", bundle, "--precision", "fp32", "--device", "cpu").stdout
    assert "did NOT reproduce (another precision or device)" in text
    assert "first non-finite: none in this replay" in text


def test_a_damaged_bundle_is_refused_in_one_line(tmp_path: Path) -> None:
    """A truncated file is refused with exit code 2 and one line naming it, no traceback."""
    bad = tmp_path / "x.fault.pt"
    bad.write_bytes(b"PK\x03\x04 not a bundle")
    done = _cli(tmp_path, "replay", str(bad), code=2)
    assert len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr
    assert "Traceback" not in done.stderr
