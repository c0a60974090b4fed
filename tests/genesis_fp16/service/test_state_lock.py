"""One owner per state folder: real daemons and `train` runs against one folder."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env, free_port, start_daemon

from genesis_fp16.service.state_lock import (
    LOCK_NAME,
    StateFolderBusy,
    acquire_state_folder,
    read_holder,
    record_scheduled,
)

GOOD = "fixture_good"
ENV = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD,
    "GENESIS_FP16_STEPS_PER_RUN": "4",
    "GENESIS_FP16_SAMPLE_COUNT": "64",
    "GENESIS_FP16_SCHEDULE": "3600",
    "FIXTURE_STEP_SECONDS": "0.01",
}


def _cli(workdir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = daemon_env({**ENV, "GENESIS_FP16_METRICS_PORT": str(free_port()), **extra})
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("genesis-fp16: error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for the tests whose refused commands leave it and its folder as they
    were (each asserts so): a daemon start and stop each, on a loaded 2-core CPU, is
    seconds."""
    daemon = start_daemon(tmp_path_factory.mktemp("owner"), ENV)
    yield daemon
    daemon.stop()


def test_a_second_daemon_in_the_same_folder_exits_1_naming_the_holder(
    owner: DaemonProcess,
) -> None:
    """A second `serve` on another port in the owned folder: exit 1, one line, the pid."""
    first = owner
    second = _cli(first.workdir, "serve")
    assert second.returncode == 1, second.stderr
    line = _one_line(second)
    assert f"owned by genesis-fp16 serve (pid {first.process.pid})" in line
    assert "GENESIS_FP16_STATE_DIR" in line
    assert first.get("/readyz")[0] == 200


def test_train_against_the_daemons_folder_is_refused_in_one_line(owner: DaemonProcess) -> None:
    """`train --resume` beside the daemon: exit 2, one line naming its pid and what to do."""
    first = owner
    refused = _cli(first.workdir, "train", GOOD, "--resume", "--steps", "2")
    assert refused.returncode == 2, refused.stderr
    line = _one_line(refused)
    assert f"genesis-fp16 serve (pid {first.process.pid})" in line
    assert "stop the daemon first" in line and "GENESIS_FP16_STATE_DIR" in line
    assert f"the daemon trains {GOOD} itself on its schedule" in line
    assert not refused.stdout.strip()
    # An installed agent the daemon does not schedule (outside its allowlist): not told
    # that the daemon trains it; told what it schedules, and refused all the same.
    other = _cli(
        first.workdir,
        "train",
        "fixture_raising",
        GENESIS_FP16_PLUGIN_ALLOWLIST=f"{GOOD},fixture_raising",
    )
    assert other.returncode == 2, other.stderr
    line = _one_line(other)
    assert "itself on its schedule" not in line
    assert f"the daemon does not train fixture_raising (it schedules {GOOD};" in line


def test_data_generate_into_the_daemons_state_folder_is_refused_in_one_line(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """`data generate --out <state>/agents/AGENT/data` beside the daemon: exit 2, one line
    naming the daemon, and nothing written; once the daemon stops, the same is accepted."""
    first = daemon_factory(ENV)
    out = tmp_path / "state" / "agents" / GOOD / "data" / "by-hand"
    refused = _cli(tmp_path, "data", "generate", GOOD, "--out", str(out), "--count", "8")
    assert refused.returncode == 2, refused.stderr
    line = _one_line(refused)
    assert f"genesis-fp16 serve (pid {first.process.pid})" in line and str(out) in line
    assert not out.exists()
    first.stop()
    out.mkdir(parents=True)  # the fixture plugin writes into an existing folder only
    accepted = _cli(tmp_path, "data", "generate", GOOD, "--out", str(out), "--count", "8")
    assert accepted.returncode == 0, accepted.stderr


def test_train_into_the_daemons_checkpoint_folder_from_another_state_folder_is_refused(
    owner: DaemonProcess, tmp_path: Path
) -> None:
    """`train --checkpoint-dir <the daemon's checkpoints>` with a state folder of its own,
    between the daemon's runs: exit 2, one line naming the daemon, nothing written."""
    first = owner
    first.wait_for(  # its start-up run has ended: the folder is between runs
        lambda: first.sample("genesis_fp16_training_runs_total", agent=GOOD, outcome="success"),
        "the daemon's first run",
    )
    checkpoints = first.state_dir / "agents" / GOOD / "checkpoints"
    before = sorted(p.name for p in checkpoints.rglob("*")) if checkpoints.exists() else []
    refused = _cli(
        first.workdir,
        "train",
        GOOD,
        "--resume",
        "--steps",
        "2",
        "--checkpoint-dir",
        str(checkpoints),
        GENESIS_FP16_STATE_DIR=str(tmp_path / "own-state"),
    )
    assert refused.returncode == 2, refused.stderr
    line = _one_line(refused)
    assert f"genesis-fp16 serve (pid {first.process.pid})" in line and str(checkpoints) in line
    after = sorted(p.name for p in checkpoints.rglob("*")) if checkpoints.exists() else []
    assert after == before


def test_after_kill_9_a_new_daemon_takes_the_folder(tmp_path: Path) -> None:
    """The kernel drops a killed daemon's lock: the next daemon starts and owns the folder."""
    first = start_daemon(tmp_path, ENV)
    first.process.kill()
    first.process.wait(timeout=30)
    again = start_daemon(tmp_path, ENV)  # ready: it took the lock
    try:
        third = _cli(tmp_path, "serve")
        assert third.returncode == 1, third.stderr
        assert f"(pid {again.process.pid})" in _one_line(third)
    finally:
        again.stop()


def test_a_second_holder_in_one_process_is_refused_and_the_lock_is_released(
    tmp_path: Path,
) -> None:
    """acquire_state_folder: busy while held (naming this pid), free again once closed."""
    fd = acquire_state_folder(tmp_path, "train se_darwin")
    with pytest.raises(StateFolderBusy) as busy:
        acquire_state_folder(tmp_path, "serve")
    assert busy.value.holder.pid == os.getpid()
    assert "genesis-fp16 train se_darwin" in str(busy.value)
    os.close(fd)
    os.close(acquire_state_folder(tmp_path, "serve"))


def test_the_scheduled_agents_are_recorded_and_the_start_time_kept(tmp_path: Path) -> None:
    """record_scheduled rewrites the holder's record with the agents, in place, and keeps
    the file's modification time (status reads the daemon's start from it)."""
    fd = acquire_state_folder(tmp_path, "serve")
    try:
        lock = tmp_path / LOCK_NAME
        os.utime(lock, (1_000_000_000, 1_000_000_000))
        assert read_holder(lock).agents is None  # a daemon that names none
        record_scheduled(fd, ["se_darwin", "my_agent"])
        record_scheduled(fd, ["se_darwin"])  # shorter: no tail of the longer record left
        holder = read_holder(lock)
        assert (holder.pid, holder.command, holder.agents) == (os.getpid(), "serve", ("se_darwin",))
        assert lock.stat().st_mtime == 1_000_000_000
    finally:
        os.close(fd)
