"""The served-model pointer (``served.json``) and its lock: its codec (the record,
``ServedPointer``, is lifecycle_records' with the records it holds), the hardened read
every reader goes through, the atomic write, and ``served.json.lock``, the one lock
every writer holds (agent_folder.transitions' module docstring says why, and holds the
transitions that read and write it under this lock).

No side effect here: :func:`read_pointer` reads, and nothing else; what a transition
killed midway left to finish (its verdicts, its events) is :func:`transitions.recover`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder import files, outbox_catch_up
from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile
from genesis_fp16_infrastructure.agent_folder.layout import (
    CANDIDATES_FOLDER,
    POINTER_LOCK,
    SERVED_POINTER,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedPointer
from genesis_fp16_infrastructure.agent_folder.lock import take_lock
from genesis_fp16_infrastructure.errors import ServedPointerError

REPAIR = "`genesis-fp16 model promote AGENT ID` or `genesis-fp16 model rollback AGENT` repairs it"


def candidates_dir(folder: Path) -> Path:
    return Path(folder) / CANDIDATES_FOLDER


def read_pointer(folder: Path) -> ServedPointer | None:
    """The folder's pointer; None when it has none yet (no model was ever promoted).
    A pointer that exists but cannot be read raises :class:`ServedPointerError`: a served
    model is never guessed."""
    path = SERVED_POINTER.at(folder)
    aside = None if path.exists() or path.is_symlink() else files.newest_aside(path)
    if aside is not None:
        raise ServedPointerError(
            f"served-model pointer {str(path)!r} was set aside as unusable "
            f"({str(aside)!r}); {repair_hint(folder)}"
        )
    return parse_pointer(path)


def parse_pointer(path: Path) -> ServedPointer | None:
    """The pointer file at ``path`` (:meth:`ServedPointer.from_json`); None: no file.
    One that cannot be read raises :class:`ServedPointerError` naming it and its repair."""
    try:
        data = files.read_json(path, SERVED_POINTER)
        return None if data is None else ServedPointer.from_json(data)
    except UnusableStateFile as exc:
        why = f" unreadable: {exc}"
    except ValueError as exc:  # unusable, kept aside whole
        why = f": {exc}"
    raise ServedPointerError(f"served-model pointer {str(path)!r}{why}; {repair_hint(path.parent)}")


def served_checkpoint(folder: Path) -> Path | None:
    """The checkpoint file the pointer names (None: no pointer); ServedPointerError when
    the file it names is gone."""
    pointer = read_pointer(folder)
    return None if pointer is None else checkpoint_of(folder, pointer)


def checkpoint_of(folder: Path, pointer: ServedPointer) -> Path:
    """The checkpoint file ``pointer`` (read from ``folder``) names; ServedPointerError
    when it is gone."""
    path = Path(folder) / str(pointer.served.checkpoint)
    if not path.is_file():
        raise ServedPointerError(
            f"served-model pointer {str(SERVED_POINTER.at(folder))!r} names {str(path)!r}, "
            f"which is not there; {repair_hint(folder)}"
        )
    return path


def repair_hint(folder: Path) -> str:
    """The commands that repair the pointer of ``folder``, naming its agent where the
    folder is a state folder's (:func:`.outbox_catch_up.agent_folder_of`)."""
    agent = outbox_catch_up.agent_folder_of(folder)
    return REPAIR if agent is None else REPAIR.replace("AGENT", agent.name)


def aside_path(folder: Path) -> Path:
    """Where the pointer was last set aside (:func:`files.newest_aside`); when never,
    ``served.json.unusable``, which is not there."""
    path = SERVED_POINTER.at(folder)
    return files.newest_aside(path) or path.with_name(path.name + files.ASIDE_SUFFIX)


def write_pointer(folder: Path, pointer: ServedPointer) -> None:
    """Replace the pointer atomically (the old one or the new one, never neither). Callers
    that read it first hold :func:`pointer_lock` around both (``transaction.transaction``)."""
    files.write_json(SERVED_POINTER.at(folder), SERVED_POINTER, pointer.to_json())


# One writer at a time: an flock conflicts between two descriptors even in one process, so
# threads of one process (the daemon's jobs) are ordered by a process lock first, and a
# thread that holds the pointer's lock may take it again (prune holds it around update).
_THREAD_LOCK = threading.RLock()
_HELD: set[str] = set()  # the lock files held, only touched under _THREAD_LOCK


@contextmanager
def pointer_lock(folder: Path) -> Iterator[None]:
    """Hold the pointer's lock (``served.json.lock``) until the block ends: every reader
    that writes the pointer back (promotion, rollback, the live watch, pruning, the
    operator's ``model`` commands) does so inside it, so no update is lost. Blocking: the
    holders keep it for one small read and write. The kernel drops it with its holder;
    the same thread may nest it."""
    key = str(POINTER_LOCK.at(folder).resolve())  # take_lock makes the folder
    with _THREAD_LOCK:
        if key in _HELD:  # held by this thread (no other gets past _THREAD_LOCK): nested
            yield
            return
        fd = take_lock(Path(key), POINTER_LOCK)
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
            os.close(fd)  # closing the descriptor drops the flock


@dataclass(frozen=True)
class LockedPointer:
    """The pointer as read once under its lock: ``pointer`` (None: none yet, or it cannot
    be read), and ``unusable``, why it cannot be (None: it can)."""

    pointer: ServedPointer | None
    unusable: ServedPointerError | None = None


@contextmanager
def locked_pointer(folder: Path) -> Iterator[LockedPointer]:
    """:func:`pointer_lock` held until the block ends, the pointer read once under it
    (:func:`read_pointer`): what a transaction begins from. A pointer that cannot be read
    is no exception here: the block decides (a repair goes on, any other refuses after
    settling what a killed writer left)."""
    with pointer_lock(folder):
        try:
            read = LockedPointer(read_pointer(folder))
        except ServedPointerError as exc:
            read = LockedPointer(None, exc)
        yield read
