"""SIGTERM with a run in its child (forked by the run worker, the default) and another
agent's job queued for the CPU slot, on the real daemon: the status shows that job
queued behind the run (not at its schedule's next time), the queued job never starts,
the state folder's lock is free only once every process the daemon started has ended,
and nothing is logged after the daemon's last shutdown line."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, child_pids, child_wait, process_alive
from test_daemon_run_now import RUN_DEADLINE, STARTED, run_command, runs

from genesis_fp16.service.state_lock import LOCK_NAME

# A run's process: forked for it, or the device's resident run process (the default).
FORKED = re.compile(
    r"(?:the run worker forked the run's process|"
    r"the run worker's resident run process) (\d+)"
)
READY = re.compile(r"run worker ready \(pid (\d+)\)")


def _settings(step_seconds: str, shutdown_timeout: str) -> dict[str, str]:
    return {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good,se_darwin",
        "ENABLE_FP16_TRAINING": "false",
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_RUN_AT_START": "false",
        "GENESIS_FP16_STEPS_PER_RUN": "1000",
        "GENESIS_FP16_LOG_INTERVAL": "1",
        "GENESIS_FP16_SAMPLE_COUNT": "200",
        "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": shutdown_timeout,
        "FIXTURE_STEP_SECONDS": step_seconds,
    }


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in child_pids(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _pids(daemon: DaemonProcess, pattern: re.Pattern[str]) -> list[int]:
    found = (pattern.match(str(r.get("event", ""))) for r in daemon.logs())
    return [int(m.group(1)) for m in found if m is not None]


def _alive_when_the_lock_frees(daemon: DaemonProcess, pids: set[int]) -> set[int]:
    """Poll the state folder's lock from SIGTERM on; the moment it can be taken, which of
    ``pids`` still run."""
    path = daemon.state_dir / LOCK_NAME
    deadline = time.monotonic() + child_wait(120)
    while time.monotonic() < deadline:
        fd = os.open(path, os.O_RDWR)
        try:
            with contextlib.suppress(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return {pid for pid in pids if process_alive(pid)}
        finally:
            os.close(fd)
        time.sleep(0.005)
    raise AssertionError(f"the lock was never freed:\n{daemon.tail()}")


def _queue_behind_a_run(
    daemon: DaemonProcess, tmp_path: Path, settings: dict[str, str]
) -> set[int]:
    """fixture_good's run in its process (the resident run process, by default), se_darwin's
    job waiting for the slot; the daemon's processes then."""
    assert run_command(tmp_path, "fixture_good", settings).returncode == 0
    daemon.wait_for(lambda: _pids(daemon, FORKED), "fixture_good's run process", RUN_DEADLINE)
    daemon.wait_for(lambda: runs(daemon, STARTED, "fixture_good"), "its run", RUN_DEADLINE)
    queued = run_command(tmp_path, "se_darwin", settings)
    assert queued.returncode == 0, queued.stderr
    # The status says so, not "next run: in 59 min" (it looked at the schedule alone).
    note = daemon.wait_for(lambda: _queued_note(daemon), "se_darwin shown queued")
    assert note.startswith("queued behind fixture_good's run ("), note
    processes = _descendants(daemon.process.pid)
    assert set(_pids(daemon, READY)) | set(_pids(daemon, FORKED)) <= processes
    return processes


def _queued_note(daemon: DaemonProcess) -> str | None:
    """se_darwin's next run in /status.json, once it says it is queued."""
    report = json.loads(daemon.get("/status.json")[1])
    (entry,) = [a for a in report["agents"] if a["name"] == "se_darwin"]
    note = str(entry["next_run"]["note"])
    return note if note.startswith("queued") and entry["next_run"]["at"] is None else None


def _last_line(daemon: DaemonProcess) -> str:
    return str([r for r in daemon.logs() if not r.get("unparsed")][-1].get("event"))


@pytest.mark.slow
@pytest.mark.timeout(child_wait(420))
def test_a_clean_stop_ends_every_child_before_the_lock_and_starts_no_queued_run(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The run stops at its step and checkpoints, the queued se_darwin never starts, the
    run worker has ended when the lock frees, and 'stopped cleanly' is the last line."""
    settings = _settings(step_seconds="0.5", shutdown_timeout="120")
    daemon = daemon_factory(settings)
    processes = _queue_behind_a_run(daemon, tmp_path, settings)
    daemon.signal(signal.SIGTERM)
    assert _alive_when_the_lock_frees(daemon, processes) == set()
    assert daemon.wait_exit(child_wait(60)) == 0
    assert not runs(daemon, STARTED, "se_darwin")
    assert len(_pids(daemon, FORKED)) == 1  # fixture_good's only: se_darwin had none
    assert _last_line(daemon) == "stopped cleanly"


@pytest.mark.slow
@pytest.mark.timeout(child_wait(420))
def test_a_run_past_the_shutdown_timeout_is_ended_before_the_lock_is_freed(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A run in a 60 s step outlives the 2 s shutdown timeout: the daemon kills its
    process and ends its worker before the lock frees (an orphan wrote its checkpoint
    into a folder a second daemon could own), exits 1, and logs nothing after."""
    settings = _settings(step_seconds="60", shutdown_timeout="2")
    daemon = daemon_factory(settings)
    processes = _queue_behind_a_run(daemon, tmp_path, settings)
    daemon.signal(signal.SIGTERM)
    assert _alive_when_the_lock_frees(daemon, processes) == set()
    assert daemon.wait_exit(child_wait(60)) == 1
    assert not runs(daemon, STARTED, "se_darwin") and len(_pids(daemon, FORKED)) == 1
    (last,) = daemon.events(
        "jobs did not stop within the shutdown timeout; their processes were killed"
    )
    assert last["killed"] == _pids(daemon, FORKED) and last["agents"] == ["fixture_good"]
    assert _last_line(daemon) == last["event"]
