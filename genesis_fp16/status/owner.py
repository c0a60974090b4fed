"""Who owns a state folder now, read without taking it: for ``genesis-fp16 status`` and
``run``, and for ``train`` and ``data generate`` writing inside another's state folder.

``serve`` and a foreground ``train`` hold an ``flock`` on ``<state_dir>/owner.lock`` and
write their pid and command into it (genesis_fp16/service/state_lock.py). A shared,
non-blocking lock on the file tells whether a holder is alive (the kernel drops a dead
one's lock, ``kill -9`` included); the file's modification time is when the holder took
it, which is the daemon's start. The probe never writes the file. For the microseconds
it holds its shared lock, a daemon starting at that very moment would be refused.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from genesis_fp16.service.state_lock import LOCK_NAME, Holder, read_holder
from genesis_fp16.status.report import DaemonStatus


def folder_owner(state_dir: Path) -> tuple[Holder, float] | None:
    """The holder of ``state_dir``'s lock and when it took it (Unix time), or None when
    no live process holds it (no lock file, or a stopped daemon's)."""
    path = Path(state_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None  # no lock file: never owned; one we may not read: not ours to report
    try:
        taken = os.fstat(fd).st_mtime
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            return None  # a filesystem without flock: nothing to tell
        return read_holder(path), taken
    finally:
        os.close(fd)  # drops the probe's shared lock, if it took it
    return None


def owning_holder(path: Path) -> tuple[Path, Holder] | None:
    """The state folder at or above ``path`` that another process owns now, with its
    holder; None when the nearest folder with a lock file is free (a stopped daemon's)."""
    for folder in [Path(path).resolve(), *Path(path).resolve().parents]:
        lock = folder / LOCK_NAME
        # One we may not open is not a daemon of this user: the folders above are looked at.
        if lock.is_file() and os.access(lock, os.R_OK | os.W_OK):
            owned = folder_owner(folder)
            return None if owned is None else (folder, owned[0])
    return None


def owner_status(state_dir: Path, now: float | None = None) -> DaemonStatus:
    """The daemon part of a report read from the lock alone: its health is the caller's
    to ask (the daemon serves it), so it says where to look."""
    now = time.time() if now is None else now
    owned = folder_owner(state_dir)
    if owned is None:
        return DaemonStatus(False, None, None, None, None, None, "not running")
    holder, taken = owned
    if holder.command != "serve":
        return DaemonStatus(False, holder.pid, holder.command, None, None, None, "not running")
    return DaemonStatus(True, holder.pid, "serve", taken, max(0.0, now - taken), None, "unknown")
