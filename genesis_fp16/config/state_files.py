"""Who hears of an unusable state file set aside: one registry for every reader.

A reader that finds one of the daemon's small state files unusable (torn, oversize, not
UTF-8, a folder, a FIFO or a link at its name) sets it aside, logs one line and calls
:func:`report_state_file_skipped`; the daemon listens and counts it in
``genesis_fp16_state_files_skipped_total{agent, file}``. Lives on the config floor so
that every reader above it (paths, the guard's memory, the probe gate) can report.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

# Every file name reported here (the metric's ``file`` label, created at 0 per agent).
STATE_FILES = (
    *("last_success", "precision_state", "sample_data_marker", "probe_result"),
    "served_pointer",  # served.json, set aside as served.json.unusable
)

_listeners: list[Callable[[str, str], None]] = []


def on_state_file_skipped(listener: Callable[[str, str], None]) -> None:
    """Call ``listener(agent, file)`` whenever an unusable state file is set aside."""
    _listeners.append(listener)


def report_state_file_skipped(agent: str, file: str) -> None:
    """Tell every listener that ``agent``'s state file ``file`` was set aside."""
    for listener in _listeners:
        listener(agent, file)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` (an flock) around a read-modify-write of the state file
    ``path``: the daemon recording a run's demotions and `precision reset` beside it take
    turns, so neither overwrites what the other just wrote from a stale read. A folder
    this process cannot write is left unlocked (nothing of ours writes there either)."""
    lock = path.with_name(path.name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the other writer's few milliseconds
        yield
    finally:
        os.close(fd)  # releases the flock
