"""A SIGTERM during `python -m genesis_fp16`'s start-up (the seconds of importing torch and
the plugin): `train` holds it and stops at its first step boundary with a result, every
other command dies of it as before (real subprocesses, signalled at a known moment)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"


def _start(tmp_path: Path, *words: str) -> tuple[subprocess.Popen[str], Path]:
    """`python -m genesis_fp16 WORDS` whose plugin import waits at a gate (fixture_gated)."""
    gate = tmp_path / "gate"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    env.update(
        {
            "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
            "GENESIS_FP16_LOG_LEVEL": "WARNING",
            "GENESIS_FP16_SAMPLE_COUNT": "32",
            "FIXTURE_IMPORT_GATE": str(gate),
            "FIXTURE_STEP_SECONDS": "0",
            "PYTHONPATH": os.pathsep.join(
                [str(FIXTURES / "plugins"), str(FIXTURES / "startup_plugins")]
            ),
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "genesis_fp16", *words],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, gate


def _signal_at_the_gate(process: subprocess.Popen[str], gate: Path) -> None:
    """SIGTERM once the process is inside its plugin's import, then let the import go on."""
    reached = Path(f"{gate}.reached")
    deadline = time.monotonic() + 300  # a bound for a broken test, not a timing
    while not reached.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"never reached the import gate: {process.communicate()}")
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    gate.touch()


@pytest.mark.timeout(600)
def test_train_holds_a_sigterm_from_its_start_up_and_stops_at_its_first_step(
    tmp_path: Path,
) -> None:
    """SIGTERM while train imports its plugin: exit 75 (stopped, as any stopped train) and
    a 'stopped' result with no step taken, instead of a process killed mid-import."""
    process, gate = _start(
        tmp_path, "train", "fixture_gated", "--steps", "50", "--precision", "fp32", "--json"
    )
    _signal_at_the_gate(process, gate)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 75, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["outcome"] == "stopped", result
    assert result["steps"] == 0, result


@pytest.mark.timeout(600)
def test_another_command_still_ends_on_a_sigterm_from_its_start_up(tmp_path: Path) -> None:
    """The hold is train's alone: `agents`, signalled while it loads the plugin, ends by the
    signal (the held one is re-sent once the command is known)."""
    process, gate = _start(tmp_path, "agents")
    _signal_at_the_gate(process, gate)
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGTERM
