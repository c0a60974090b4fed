"""kill -9 at every rename of a run's last-step saves: nothing stalls, nothing breaks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from guard_faults import FaultTask

from genesis_fp16_infrastructure.training import CheckpointManager, FitOptions, fit
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

CHILD = Path(__file__).with_name("last_step_child.py")
STEPS = 10


def _child(folder: Path, kill_at: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), str(folder), str(STEPS), str(kill_at)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _result(run: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("result ")]
    found: dict[str, int] = json.loads(line.removeprefix("result "))
    return found


def _resume(folder: Path) -> dict[str, int]:
    """The run after a kill, as the child's ``KILL_AT`` 0 runs it, but in this process:
    only the killed run needs a process of its own, and each child spends seconds
    importing torch."""
    options = FitOptions(
        precision=PrecisionRequest("fp32"),  # the child's bare "fp32", typed
        steps=STEPS,
        checkpoint_dir=folder,
        checkpoint_steps=5,
        resume=True,
    )
    result = fit(FaultTask(None), options)
    return {"steps_run": result.steps_run, "temps_removed": result.temps_removed}


def _last_step_renames(tmp_path: Path) -> list[int]:
    """The 1-based indices of the renames that write step STEPS's checkpoint (its
    periodic save and its end-of-run save), from a clean run."""
    run = _child(tmp_path / "clean", 0)
    _result(run)
    last = f"ckpt-{STEPS:010d}"
    return [
        int(line.split()[1])
        for line in run.stdout.splitlines()
        if line.startswith("replace ") and line.split()[2].startswith(last)
    ]


def test_a_kill_at_any_rename_of_the_last_steps_saves_never_stalls_or_breaks(
    tmp_path: Path,
) -> None:
    """Before each rename of the last step's periodic and end-of-run saves (and between
    them): every checkpoint left loads, the next start removes the killed save's temp
    files, and of the two runs after it the second trains its whole budget. The killed
    run is a process of its own (SIGKILL); the two after it run fit() here, as its child
    would."""
    points = _last_step_renames(tmp_path)
    assert len(points) >= 4  # a periodic save and an end-of-run save of the same step
    for kill_at in points:
        folder = tmp_path / f"kill-{kill_at}"
        killed = _child(folder, kill_at)
        assert killed.returncode == -9, killed.stderr[-2000:]
        for path in CheckpointManager(folder).checkpoints():
            load_checkpoint(path)  # raises for a checkpoint that no longer loads
        first = _resume(folder)
        assert not list(folder.glob(".tmp-*")), f"kill {kill_at}: temp files left"
        second = _resume(folder)
        assert second["steps_run"] == STEPS, f"kill before rename {kill_at}: {first}, {second}"


@pytest.mark.parametrize("kill_at", [1])
def test_temp_files_of_a_killed_save_are_removed_and_counted_at_the_next_start(
    tmp_path: Path, kill_at: int
) -> None:
    """A save killed before its first rename leaves its fsynced temps; the next run,
    owning the folder, removes every one of them at once and counts them."""
    killed = _child(tmp_path, kill_at)
    assert killed.returncode == -9
    left = list(tmp_path.glob(".tmp-*"))
    assert len(left) == 2
    assert _resume(tmp_path)["temps_removed"] == 2
    assert not list(tmp_path.glob(".tmp-*"))


def test_train_into_a_checkpoint_folder_another_process_writes_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """`train --checkpoint-dir` into a folder this test process writes (its own state folder
    elsewhere): exit 2, one line naming this pid, and nothing written into the folder."""
    import os

    folder = tmp_path / "owned"
    owner = CheckpointManager(folder)
    owner.claim("the test's writer")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
        env["GENESIS_FP16_STATE_DIR"] = str(tmp_path / "other-state")
        command = [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--steps", "1"]
        command += ["--precision", "fp32", "--checkpoint-dir", str(folder)]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    finally:
        owner.release()
    assert run.returncode == 2, run.stderr[-2000:]
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("genesis-fp16: error:")]
    assert f"is written by pid {os.getpid()} (the test's writer)" in line
    assert not CheckpointManager(folder).checkpoints()


def test_a_second_claim_in_the_same_process_shares_the_first(tmp_path: Path) -> None:
    """An agent that claims its folder and then runs fit() on a checkpoint in it: the
    second claim shares the first (one flock), and the folder is free only after both
    are released; another process is refused meanwhile."""
    folder = tmp_path / "agent"
    outer, inner = CheckpointManager(folder), CheckpointManager(folder)
    outer.claim("the agent")
    inner.claim("fit")
    inner.release()
    probe = [sys.executable, "-c", PROBE, str(folder)]
    assert subprocess.run(probe, capture_output=True, text=True, timeout=300).stdout == "busy"
    outer.release()
    assert subprocess.run(probe, capture_output=True, text=True, timeout=300).stdout == "free"


# Claims ``argv[1]`` in a process of its own: "busy" when another process writes it.
PROBE = """
import sys
from pathlib import Path
from genesis_fp16_infrastructure.training.checkpoint import CheckpointFolderBusy, CheckpointManager
try:
    CheckpointManager(Path(sys.argv[1])).claim("probe")
except CheckpointFolderBusy:
    print("busy", end="")
else:
    print("free", end="")
"""
