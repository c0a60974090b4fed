"""The one ``flock`` of the agent's folder: the state folder's owner, the served
pointer's writers, the checkpoint folder's writer and the guard's read-modify-write all
take their lock file through :func:`take_lock`.

The kernel drops an flock with its holder (``kill -9`` included), so no stale lock file
is ever removed by hand. The file holds its holder's record (pid, command), written after
the lock is taken, read within its layout bound (:func:`read_holder`; a busy
:func:`take_lock` reads it on the descriptor it tried the lock with). A folder, FIFO or
link at the lock's name is set aside (``<name>.unusable-<UTC time>``) and reported, and the lock
taken on a fresh file::

    fd = take_lock(folder / "served.json.lock", POINTER_LOCK)
    ...   # one writer at a time
    os.close(fd)  # closing the only descriptor drops the flock
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile, read_text, set_aside
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import StateFile
from genesis_fp16_infrastructure.errors import LockBusy

_BUSY = (errno.EWOULDBLOCK, errno.EACCES)
_NOT_A_FILE = (errno.EISDIR, errno.ELOOP, errno.ENXIO, errno.ENOTDIR)


def take_lock(
    path: Path,
    file: StateFile,
    wait: bool = True,
    record: Mapping[str, Any] | None = None,
    mode: int = 0o644,
) -> int:
    """Take the flock on ``path``; returns the descriptor that holds it (closing it drops
    the lock; close-on-exec: no child inherits it). ``wait``: block until it is free,
    else raise :class:`LockBusy` at once. ``record``: written into the file once held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_regular(path, file, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as error:
        busy = error.errno in _BUSY
        # The holder named by the file this descriptor opened: no second open of the path.
        holder = _holder_on(fd, file.limit) if busy else None
        os.close(fd)
        if busy:
            raise LockBusy(path, holder) from None
        raise
    if record is not None:
        write_holder(fd, record)
    return fd


def write_holder(fd: int, record: Mapping[str, Any]) -> None:
    """Replace the lock file's record (``fd`` from :func:`take_lock`)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(dict(record)).encode() + b"\n", 0)


def read_holder(path: Path, file: StateFile, attempts: int = 20) -> dict[str, Json] | None:
    """The holder's record in the lock file; it may have taken the lock a moment before
    writing it, so an empty or torn file is read again for up to a second. None: the
    file names nobody (or is no file: nothing is set aside by a look). Its values are
    the writer's to read (``record``, as :func:`take_lock` wrote it)."""
    for _ in range(attempts):
        try:
            text = read_text(path, file.limit)
        except UnusableStateFile:
            return None
        record = _record_in(None if text is None else text.encode())
        if record is not None:
            return record
        time.sleep(0.05)
    return None


def _holder_on(fd: int, limit: int, attempts: int = 20) -> dict[str, Json] | None:
    """:func:`read_holder` of the lock file open as ``fd`` (a regular file: the lock was
    tried on it), read within ``limit`` bytes; None: it names nobody within a second, or
    holds more than ``limit`` bytes."""
    for _ in range(attempts):
        data = os.pread(fd, limit + 1, 0)
        if len(data) > limit:
            return None
        record = _record_in(data)
        if record is not None:
            return record
        time.sleep(0.05)
    return None


def _record_in(data: bytes | None) -> dict[str, Json] | None:
    """The holder's record in the lock file's bytes; None: empty, torn or no object."""
    try:
        record = json.loads(data) if data else None
    except ValueError:  # torn, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return None
    return record if isinstance(record, dict) else None


def _open_regular(path: Path, file: StateFile, mode: int) -> int:
    """A descriptor on the regular lock file at ``path``, setting aside what else is there."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags, mode)
        except OSError as error:
            if error.errno not in _NOT_A_FILE:
                raise
            set_aside(path, file, f"{path}: no lock file ({error.strerror})")
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        set_aside(path, file, f"{path}: not a regular file")
    raise OSError(errno.EEXIST, "cannot make a lock file", str(path))
