"""`genesis-fp16 train rlhf_ppo --precision fp16 --option lr=10000` with the guard's default
check interval (25 steps): the rollout after the huge update samples from NaN
probabilities, which raised out of torch.multinomial (a traceback, exit 1, no bundle).
Now those rollouts are non-finite steps: the guard demotes, the fault bundle replays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.pop("ENABLE_FP16_TRAINING", None)
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=state,
        env={**env, "GENESIS_FP16_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_nan_rollout_is_a_non_finite_step_the_guard_demotes(tmp_path: Path) -> None:
    """16 fp16 steps of 4-step iterations at lr=10000: exit 0 with no traceback, a
    nonfinite_loss demotion out of fp16, and its fault bundle reproduced by replay."""
    train = _cli(
        tmp_path, "train", "rlhf_ppo", "--precision", "fp16", "--epochs", "4",
        "--option", "lr=10000", "--option", "batch_size=16", "--json",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert "Traceback" not in train.stderr
    result = json.loads(train.stdout.strip().splitlines()[-1])
    (demotion, *_) = result["demotions"]
    assert demotion["from"] == "fp16" and demotion["reason"] == "nonfinite_loss", demotion
    bundles = sorted((tmp_path / "agents" / "rlhf_ppo" / "fault_bundles").glob("*.fault.pt"))
    assert bundles, "no fault bundle written"
    replay = _cli(tmp_path, "replay", str(bundles[0]), "--json")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert json.loads(replay.stdout)["reproduced"] is True
