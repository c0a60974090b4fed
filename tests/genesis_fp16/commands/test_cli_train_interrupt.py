"""Ctrl-C on a real `genesis-fp16 train`: the first stops at a step with a checkpoint
(exit 75), a second exits at once (130)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from genesis_fp16_infrastructure.data.synthetic import generate_pool

ROOT = Path(__file__).resolve().parents[3]


def _start_train(tmp_path: Path, *more: str) -> tuple[subprocess.Popen[str], Path]:
    """A long se_darwin run checkpointing every 20 steps, in the foreground's own shape."""
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(generate_pool(300, seed=4)))
    checkpoints = tmp_path / "ck"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    env.update(
        {
            "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
            "GENESIS_FP16_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
    )
    command = [sys.executable, "-m", "genesis_fp16", "train", "se_darwin", "--steps", "100000"]
    command += ["--precision", "fp32", "--data", str(pool), "--checkpoint-dir", str(checkpoints)]
    command += ["--checkpoint-steps", "20", *(more or ["--json"])]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return process, checkpoints


def _wait_for_checkpoint(process: subprocess.Popen[str], folder: Path) -> int:
    """The step of the first periodic checkpoint, once it is on disk."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        # se_darwin trains a candidate in a folder of its own: candidates/<id>/ckpt-*.pt
        found = sorted(folder.rglob("ckpt-*.pt"), key=lambda p: p.name)
        if found:
            return int(found[-1].name[5:15])
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"no checkpoint in {folder} within 180 s")


def test_ctrl_c_stops_at_the_next_step_with_a_checkpoint(tmp_path: Path) -> None:
    """One SIGINT: exit 75 (stopped, not finished), a stopped result whose checkpoint is
    past the periodic one."""
    process, folder = _start_train(tmp_path)
    periodic = _wait_for_checkpoint(process, folder)
    time.sleep(0.5)  # a few steps past it
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["outcome"] == "stopped", result
    assert "stopping at the next step" in stderr, stderr
    newest = sorted(folder.rglob("ckpt-*.pt"), key=lambda p: p.name)[-1]
    assert int(newest.name[5:15]) > periodic
    assert Path(result["checkpoint"]).name == newest.name


def test_sigterm_stops_with_exit_75_and_the_summary_says_stopped(tmp_path: Path) -> None:
    """SIGTERM: the same stop as Ctrl-C, exit 75, and the text summary's first line says
    the run stopped at a step with a checkpoint."""
    process, folder = _start_train(tmp_path, "--seed", "0")
    _wait_for_checkpoint(process, folder)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr
    first = stdout.splitlines()[0]
    assert re.fullmatch(
        r"se_darwin: stopped at step \d+, checkpointed: run train again to finish", first
    )


def test_a_second_ctrl_c_exits_at_once_with_130(tmp_path: Path) -> None:
    """Two SIGINTs during a 30 s step: exit 130 well before that step could end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(
        {
            "GENESIS_FP16_STATE_DIR": str(tmp_path / "state"),
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_LOG_INTERVAL": "1",
            "FIXTURE_STEP_SECONDS": "30",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests/fixtures/plugins"), str(ROOT)]),
        }
    )
    # --json-progress, the launcher's flag: a line per step, printed before the step's wait.
    command = [sys.executable, "-m", "genesis_fp16", "train", "fixture_good", "--steps", "10"]
    process = subprocess.Popen(
        [*command, "--json-progress"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The first step's progress line comes just before its 30 s: a SIGINT before the
    # first step would stop the run at step 0, and the second land in the interpreter's exit.
    assert process.stdout is not None
    seen = ""
    while '"progress"' not in seen and process.poll() is None:
        seen = process.stdout.readline()
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)  # two signals before the handler runs would be one call
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, (stdout, stderr)
    assert "stopping at the next step" in stderr, stderr
    assert '"outcome"' not in stdout, stdout  # no result: the run did not finish
