"""kill -9 during `genesis-fp16 train`, again and again: progress is kept, the end is exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.run.early_stop import served_weights

ROOT = Path(__file__).resolve().parents[3]
EVERY = 3  # --checkpoint-steps


def _env(workdir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    env.update(
        GENESIS_FP16_STATE_DIR=str(workdir / "state"),
        GENESIS_FP16_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    return env


def _train_command(data: Path, checkpoints: Path, budget: tuple[str, ...]) -> list[str]:
    return [
        *(sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--data", str(data)),
        *("--precision", "fp32", "--seed", "0", "--checkpoint-dir", str(checkpoints)),
        *("--checkpoint-steps", str(EVERY), "--resume", "--json", *budget),
    ]


def _newest_step(checkpoints: Path) -> int:
    """The newest step saved under the folder: se_darwin trains each candidate in a folder
    of its own (candidates/<id>/), and every life here resumes the one unjudged candidate."""
    folders = [checkpoints, *sorted((checkpoints / "candidates").glob("*"))]
    files = [f for folder in folders for f in CheckpointManager(folder).checkpoints()]
    return max(int(f.name[5:15]) for f in files) if files else -1


def _weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    state = load_checkpoint(path)
    return state[keys.MODEL], served_weights(state)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 se_darwin records (seed 0), generated once: both budgets only read them."""
    folder = tmp_path_factory.mktemp("kill_loop_data")
    data = folder / "data.jsonl"
    subprocess.run(
        [
            *(sys.executable, "-m", "genesis_fp16", "data", "generate", "--agent", "se_darwin"),
            *("--out", str(data), "--count", "600", "--seed", "0"),
        ],
        env=_env(folder),
        check=True,
        capture_output=True,
    )
    return data


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("budget", [(), ("--steps", "90")], ids=["early-stopping", "steps"])
def test_kill_9_loop_keeps_progress_and_ends_bitwise_equal(
    tmp_path: Path, data: Path, budget: tuple[str, ...]
) -> None:
    """Three kill -9s mid-run, each after its life wrote two checkpoints: what was written
    stays, and the finished run's last and served weights equal an unbroken run's, whether
    early stopping or an explicit budget ends it (an interrupted run resumes toward its
    own target, not a fresh budget)."""
    env = _env(tmp_path)
    whole = subprocess.run(
        _train_command(data, tmp_path / "whole", budget), env=env, capture_output=True, text=True
    )
    assert whole.returncode == 0, whole.stderr
    reference = json.loads(whole.stdout.strip().splitlines()[-1])

    broken = tmp_path / "broken"
    kept: list[int] = []
    for _ in range(3):
        before = _newest_step(broken)
        child = subprocess.Popen(
            _train_command(data, broken, budget),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 240
        # Kill once this life has written two checkpoints of its own: mid-run, not at start.
        while _newest_step(broken) < before + 2 * EVERY and time.monotonic() < deadline:
            assert child.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait()
        kept.append(_newest_step(broken))
    assert kept == sorted(kept) and kept[0] > 0  # every kill kept what was written

    final = subprocess.run(
        _train_command(data, broken, budget), env=env, capture_output=True, text=True
    )
    assert final.returncode == 0, final.stderr
    result = json.loads(final.stdout.strip().splitlines()[-1])
    assert result["early_stop"]["best_step"] == reference["early_stop"]["best_step"]
    last, served = _weights(Path(result["checkpoint"]))
    last_ref, served_ref = _weights(Path(reference["checkpoint"]))
    assert Path(result["checkpoint"]).name == Path(reference["checkpoint"]).name
    for name in last_ref:
        assert torch.equal(last[name], last_ref[name]), name
        assert torch.equal(served[name], served_ref[name]), name
