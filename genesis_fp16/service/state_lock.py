"""One owner per state folder: an ``flock`` on ``<state_dir>/owner.lock``.

``serve`` holds it for its whole life, and so does a foreground ``train`` for its run;
whoever comes second is refused in one line naming the holder's pid and what it is. The
daemon's own runs (``train --request``, torchrun ranks) work under the daemon's lock and
take none. The kernel drops the lock when its holder dies, ``kill -9`` included, so a
restarted daemon takes it again at once; no stale lock file is ever to be removed by hand.

Who owns a folder is also read without taking it (:func:`folder_owner`): for
``genesis-fp16 status`` and ``run``, and for ``train`` and ``data generate`` writing inside
another's state folder. A shared, non-blocking lock on the file tells whether a holder is
alive; the file's modification time is when the holder took it, which is the daemon's
start. The probe never writes the file. For the microseconds it holds its shared lock, a
daemon starting at that very moment would be refused.

>>> fd = acquire_state_folder(Path("state"), "serve")  # held until fd is closed
>>> os.close(fd)
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.api import AgentFolder, LockBusy

LOCK_NAME = AgentFolder.OWNER_LOCK_NAME


class Holder(msgspec.Struct, frozen=True, omit_defaults=True):
    """Who holds a state folder: its pid and its command (``serve`` or ``train AGENT``);
    for a daemon, the agents it schedules now (None: not recorded). As the lock file
    holds it: ``stopping`` only when true, ``agents`` only for a daemon."""

    pid: int | None
    command: str
    agents: tuple[str, ...] | None = None
    stopping: bool = False  # a daemon shutting down: it starts no run (``run`` exits 2)

    def describe(self) -> str:
        pid = "an unknown pid" if self.pid is None else f"pid {self.pid}"
        return f"genesis-fp16 {self.command} ({pid})"


class StateFolderBusy(Exception):
    """Another process owns the state folder; ``holder`` says which."""

    def __init__(self, state_dir: Path, holder: Holder) -> None:
        self.state_dir = state_dir
        self.holder = holder
        super().__init__(
            f"state folder {state_dir} is owned by {holder.describe()}; "
            f"lock file {state_dir / LOCK_NAME}"
        )


def acquire_state_folder(state_dir: Path, command: str) -> int:
    """Take the state folder's lock; returns the descriptor that holds it (keep it open).

    Raises :class:`StateFolderBusy` at once, without waiting, when another process owns
    it. Not inherited by child processes (descriptors are opened close-on-exec).
    """
    # The holder's pid stays readable until we hold the lock ourselves (written after).
    try:
        return AgentFolder.take_owner(state_dir, msgspec.to_builtins(Holder(os.getpid(), command)))
    except LockBusy as busy:
        raise StateFolderBusy(Path(state_dir), _holder(busy.holder)) from None


def record_scheduled(fd: int, agents: list[str], stopping: bool = False) -> None:
    """Name the agents the daemon schedules in its lock file (``fd`` from
    :func:`acquire_state_folder`), for a ``train`` it refuses; ``stopping``: the daemon
    shuts down, and ``run`` refuses at once (exit 2) rather than wait for an answer no
    stopping daemon gives. The file keeps its modification time: it is when the daemon
    took the folder, its start for ``status``."""
    try:
        before = os.fstat(fd)
        holder = Holder(os.getpid(), "serve", tuple(sorted(agents)), stopping)
        AgentFolder.write_owner(fd, msgspec.to_builtins(holder))
        os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:
        pass  # os.devnull (a filesystem without flock), a full disk: the refusal names none


def read_holder(path: Path, attempts: int = 20) -> Holder:
    """The holder named in the lock file ``path``; it may have taken the lock a moment
    before writing its pid, so an empty file is read again for up to a second."""
    return _holder(AgentFolder.owner(Path(path).parent, attempts))


def _holder(record: Mapping[str, object] | None) -> Holder:
    try:
        return msgspec.convert(record, Holder)
    except msgspec.ValidationError:  # none (empty, torn), or a field of the wrong type
        return Holder(None, "process")


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
