"""A run the daemon's SIGTERM stopped mid-run is continued by the next daemon's run, from
its own checkpoint to its own budget, and its candidate is judged once (issue 93)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, child_wait, daemon_env

STEPS = 1500  # GENESIS_FP16_STEPS_PER_RUN: long enough to be stopped mid-run under load
SETTINGS = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin",
    "ENABLE_FP16_TRAINING": "false",
    "GENESIS_FP16_STEPS_PER_RUN": str(STEPS),
    "GENESIS_FP16_CHECKPOINT_STEPS": "10",
    "GENESIS_FP16_SAMPLE_COUNT": "300",
    "GENESIS_FP16_SCHEDULE": "3600",
    "GENESIS_FP16_RUN_AT_START": "false",
}


FINISHED = "training run finished"
RUN_DEADLINE = 300.0  # a run's child on a loaded 2-core machine: a deadline


def run_command(workdir: Path) -> None:
    """`genesis-fp16 run se_darwin` in the daemon's folder, with its settings."""
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", "se_darwin"],
        cwd=workdir,
        env=daemon_env(SETTINGS),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def runs(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [r for r in daemon.events(FINISHED) if r.get("agent") == "se_darwin"]


def _candidates(state: Path) -> list[Path]:
    root = state / "agents" / "se_darwin" / "checkpoints" / "candidates"
    return sorted(p for p in root.glob("*") if p.is_dir())


def _steps(candidate: Path) -> list[int]:
    return sorted(int(p.name[5:15]) for p in candidate.glob("ckpt-*.pt"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_stopped_by_sigterm_is_continued_to_its_budget_and_judged_once(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """SIGTERM to the daemon once its se_darwin run has checkpointed step 30: the run
    stops with a checkpoint and no verdict; the next daemon's run continues that
    candidate (no new one) from its newest checkpoint, ends at STEPS and promotes it
    (the first model), judged once. At 2c6d7b6d the stopped candidate stayed
    ``undecided`` and the next run trained a new one from the start."""
    first = daemon_factory(SETTINGS)
    run_command(tmp_path)
    state = first.state_dir
    first.wait_for(
        lambda: any(max(_steps(c), default=0) >= 30 for c in _candidates(state)),
        "a checkpoint at step 30",
        child_wait(RUN_DEADLINE),
    )
    first.signal(signal.SIGTERM)
    assert first.wait_exit(child_wait(120)) == 0
    (stopped,) = runs(first)
    assert stopped["outcome"] == "stopped", stopped
    (candidate,) = _candidates(state)
    assert not (candidate / "verdict.json").exists()
    cut = max(_steps(candidate))
    assert 30 <= cut < STEPS

    second = daemon_factory(SETTINGS)
    run_command(tmp_path)
    (done,) = second.wait_for(lambda: runs(second), "the next run", child_wait(RUN_DEADLINE))
    assert done["outcome"] == "success", done
    assert _candidates(state) == [candidate]  # continued, no new candidate
    assert max(_steps(candidate)) == STEPS  # to its own budget, not STEPS past its checkpoint
    verdict = json.loads((candidate / "verdict.json").read_text())
    assert verdict["outcome"] == "promoted"
