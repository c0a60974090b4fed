"""kill -9 during `genesis-fp16 train`, again and again: progress is kept, the end is exact."""

from __future__ import annotations

import contextlib
import json
import os
import random
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
        # The checkout's packages first, then the caller's path (a worktree's own library).
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    return env


def _train_command(data: Path, checkpoints: Path, budget: tuple[str, ...]) -> list[str]:
    return [
        *(sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--data", str(data)),
        *("--precision", "fp32", "--seed", "0", "--checkpoint-dir", str(checkpoints)),
        *("--checkpoint-steps", str(EVERY), "--resume", "--json", *budget),
    ]


def _quiet_life(
    data: Path, checkpoints: Path, budget: tuple[str, ...], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """One life of the job, its output discarded: the checkpoints on disk tell its progress."""
    return subprocess.Popen(
        _train_command(data, checkpoints, budget),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _assert_same_weights(checkpoint: Path, reference: Path) -> None:
    """The last and the served weights of ``checkpoint`` equal ``reference``'s, bit for bit."""
    last, served = _weights(checkpoint)
    last_ref, served_ref = _weights(reference)
    for name in last_ref:
        assert torch.equal(last[name], last_ref[name]), name
        assert torch.equal(served[name], served_ref[name]), name


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
        child = _quiet_life(data, broken, budget, env)
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
    assert Path(result["checkpoint"]).name == Path(reference["checkpoint"]).name
    _assert_same_weights(Path(result["checkpoint"]), Path(reference["checkpoint"]))


def _candidates(checkpoints: Path) -> list[Path]:
    return sorted(p for p in (checkpoints / "candidates").glob("*") if p.is_dir())


def _life_killed_at(command: list[str], env: dict[str, str], step: int, own: bool = False) -> int:
    """Run ``command`` and SIGKILL it once it reports ``step`` (its progress lines, one
    per step; ``own``: the life's own ``step``-th, wherever it started); the last step it
    reported. Fails if it ends on its own first."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    reached, first = -1, None
    for line in child.stdout:
        if line.startswith('{"progress"'):
            reached = int(json.loads(line)["progress"]["step"])
            first = reached if first is None else first
            if reached >= step + (first - 1 if own else 0):
                break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert first is not None and reached >= step, f"the run ended at step {reached} first"
    return reached


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_job_resumed_with_the_rest_continues_its_own_candidate(
    tmp_path: Path, data: Path
) -> None:
    """Issue 93: a job of TARGET steps, SIGKILLed at random steps and resumed each time
    with ``--steps <rest>`` (the rest counted from its newest checkpoint), continues the
    killed run's own candidate: one candidate folder, no kill loses more than one
    checkpoint interval, and it ends at TARGET, bitwise equal to an unbroken run (at
    2c6d7b6d each resume trained a new candidate from scratch and ended short)."""
    target, rng = 60, random.Random(93)
    env = {**_env(tmp_path), "GENESIS_FP16_LOG_INTERVAL": "1"}
    whole = subprocess.run(
        _train_command(data, tmp_path / "whole", ("--steps", str(target))),
        env=env,
        capture_output=True,
        text=True,
    )
    assert whole.returncode == 0, whole.stderr
    reference = json.loads(whole.stdout.strip().splitlines()[-1])

    broken = tmp_path / "broken"
    for _ in range(3):
        start = max(_newest_step(broken), 0)
        rest = ("--steps", str(target - start))
        command = [*_train_command(data, broken, rest), "--json-progress"]
        reached = _life_killed_at(command, env, rng.randint(start + 1, target - 1))
        assert reached - _newest_step(broken) <= EVERY  # at most one interval lost
        assert len(_candidates(broken)) == 1, "a resume started a new candidate"
    start = _newest_step(broken)
    final = subprocess.run(
        _train_command(data, broken, ("--steps", str(target - start))),
        env=env,
        capture_output=True,
        text=True,
    )
    assert final.returncode == 0, final.stderr
    result = json.loads(final.stdout.strip().splitlines()[-1])
    assert len(_candidates(broken)) == 1
    assert Path(result["checkpoint"]).name == f"ckpt-{target:010d}.pt"
    _assert_same_weights(Path(result["checkpoint"]), Path(reference["checkpoint"]))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kills_at_random_moments_leave_no_candidate_unfinished_nor_past_the_bound(
    tmp_path: Path, data: Path
) -> None:
    """Issue 93: 8 SIGKILLs at random moments of ``train --resume --steps 60``, each followed by a
    ``train --resume --steps 2``: each resume continues the killed run's candidate (or
    closes it with its reason), so after the last one no candidate is left without a
    verdict and the folders stay within the history bound, the served model plus
    GENESIS_FP16_SERVED_HISTORY_KEEP (at 2c6d7b6d: one candidate more per kill, never
    judged nor pruned)."""
    rng, kills = random.Random(8), 8
    env = {
        **_env(tmp_path),
        "GENESIS_FP16_REJECTED_KEEP_DAYS": "0",
        "GENESIS_FP16_LOG_INTERVAL": "1",
    }
    folder = tmp_path / "ck"

    def train(*budget: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _train_command(data, folder, budget), env=env, capture_output=True, text=True
        )

    assert train().returncode == 0  # the first model, served
    # A forced budget: on unchanged data a plain --resume is up to date and trains nothing.
    command = [*_train_command(data, folder, ("--steps", "60")), "--json-progress"]
    for kill in range(kills):
        if kill % 2:  # at a random time: in start-up, training or judging
            child = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=rng.uniform(2.0, 12.0))
            child.send_signal(signal.SIGKILL)
            child.wait()
        else:  # at a random step of its training
            _life_killed_at(command, env, rng.randint(1, 40), own=True)
        resumed = train("--steps", "2")
        assert resumed.returncode == 0, resumed.stderr
    candidates = _candidates(folder)
    unfinished = [c.name for c in candidates if not (c / "verdict.json").is_file()]
    assert unfinished == []
    assert len(candidates) <= 1 + 5, [c.name for c in candidates]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("form", ["same-budget", "plain"])
def test_a_job_killed_after_its_last_save_is_judged_as_it_is(
    tmp_path: Path, data: Path, form: str
) -> None:
    """Issue 93: SIGKILLed after its end-of-run save, before its verdict (in its evaluation
    or its gate), a job has ended; its next life, with the same budget (``--resume --steps
    N``) or a plain ``train`` (not forced, as the daemon's), trains no step and judges it:
    one candidate, ending at step N, bitwise equal to an unbroken run (before: the same
    budget trained N steps more, and the plain one removed the finished checkpoint as a
    served model's copy and trained a new model from scratch)."""
    target = 20  # not a multiple of EVERY: the end-of-run save is the one at the target
    env = _env(tmp_path)
    budget = ("--steps", str(target))
    whole = subprocess.run(
        _train_command(data, tmp_path / "whole", budget), env=env, capture_output=True, text=True
    )
    assert whole.returncode == 0, whole.stderr
    reference = json.loads(whole.stdout.strip().splitlines()[-1])

    broken = tmp_path / "broken"
    child = _quiet_life(data, broken, budget, env)
    deadline = time.monotonic() + 240
    while _newest_step(broken) < target and time.monotonic() < deadline:
        assert child.poll() is None, "the run ended before it could be killed"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    (candidate,) = _candidates(broken)
    assert not (candidate / "verdict.json").exists(), "killed too late: it has its verdict"

    command = _train_command(data, broken, budget if form == "same-budget" else ())
    if form == "plain":
        command.remove("--resume")
    final = subprocess.run(command, env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    result = json.loads(final.stdout.strip().splitlines()[-1])
    assert result["steps"] == 0
    assert _candidates(broken) == [candidate] and (candidate / "verdict.json").is_file()
    assert Path(result["checkpoint"]).name == f"ckpt-{target:010d}.pt"
    _assert_same_weights(Path(result["checkpoint"]), Path(reference["checkpoint"]))
