"""The one reader, writer and policy for an unusable file of the agent's folder.

Every state file is read here, as a regular file only and at most its layout's bound
(:class:`~genesis_fp16_infrastructure.agent_folder.layout.StateFile` ``limit``): a
folder, a FIFO (which would block a read for ever), a link, a file over the bound, bytes
that are not UTF-8, text that is not JSON or a record its decoder refuses is *unusable*.
An unusable file is set aside as ``<name>.unusable`` and reported, once, to every
listener (:func:`on_set_aside`; the daemon counts it in
``genesis_fp16_state_files_skipped_total{agent, file}``); the reader goes on as if there
were no file. Never a traceback, never a run failed for ever by a file nobody wrote::

    memory = load(path, PRECISION_STATE, PrecisionMemory.from_json)   # None: none, or set aside
    write_json(path, PRECISION_STATE, memory.to_json())               # atomic

Writes are atomic (:mod:`genesis_fp16_infrastructure.atomic`); a folder, FIFO or link at
the name is set aside first, so that a write never fails for it either.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from genesis_fp16_infrastructure.agent_folder.layout import ASIDE_SUFFIX, StateFile
from genesis_fp16_infrastructure.atomic import write_atomic, write_json_atomic

T = TypeVar("T")
logger = logging.getLogger(__name__)


class UnusableStateFile(ValueError):
    """A state file that cannot be read as one: not a regular file, too big, not UTF-8."""


@dataclass(frozen=True)
class SetAside:
    """An unusable state file: where it was, where it went (None: it could not be moved),
    why, and its layout label."""

    path: Path
    aside: Path | None
    why: str
    label: str


Listener = Callable[[SetAside], None]
_listeners: list[Listener] = []


def on_set_aside(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` for every file set aside in this process (once, however often it
    is added); returns its removal."""
    if listener not in _listeners:
        _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def aside_path(path: Path) -> Path:
    """Where an unusable ``path`` goes: ``<name>.unusable`` beside it."""
    return Path(path).with_name(Path(path).name + ASIDE_SUFFIX)


def read_text(path: Path, limit: int) -> str | None:
    """The text of the small state file ``path``, or None when there is none.

    Read as a regular file only, at most ``limit`` bytes: a folder, a FIFO, a link, a
    file over ``limit`` bytes or bytes that are not UTF-8 raise
    :class:`UnusableStateFile` naming the path and why.
    """
    found = _read(Path(path), limit)
    return None if found is None else found[0]


def read_bytes(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` as :func:`read_text` reads them, not decoded (a cache entry)."""
    found = _read_bytes(Path(path), limit)
    return None if found is None else found[0]


def _read(path: Path, limit: int) -> tuple[str, int] | None:
    """The text and the inode it was read from (a set-aside moves that file only)."""
    found = _read_bytes(path, limit)
    if found is None:
        return None
    try:
        return found[0].decode("utf-8"), found[1]
    except UnicodeDecodeError:
        raise UnusableStateFile(f"{path}: not UTF-8 text") from None


def _read_bytes(path: Path, limit: int) -> tuple[bytes, int] | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: a link; EACCES, ...
        raise UnusableStateFile(f"{path}: cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise UnusableStateFile(f"{path}: {kind}")
        if info.st_size > limit:
            raise UnusableStateFile(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
        chunks, size = [], 0
        while size <= limit:  # a regular file: read() returns what there is, then b""
            # the whole file in one read where it can (one buffer, no copy when joined)
            chunk = os.read(fd, min(limit + 1 - size, max(info.st_size + 1 - size, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise UnusableStateFile(f"{path}: over the {limit}-byte bound")
    return b"".join(chunks), info.st_ino


def read_json(path: Path, file: StateFile) -> Any | None:
    """The JSON value of ``path`` (None: no file); :class:`UnusableStateFile` for one
    that is not a regular file within ``file.limit`` holding JSON. Sets nothing aside:
    for a reader whose file is set aside under a lock of its own (the served pointer)."""
    found = _read(Path(path), file.limit)
    return None if found is None else _parse(Path(path), found[0])


def _parse(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise UnusableStateFile(f"{path}: not JSON ({error})") from None


def load(
    path: Path,
    file: StateFile,
    decode: Callable[[Any], T],
    unusable: Listener | None = None,
) -> T | None:
    """``decode`` of the JSON at ``path``; None when there is no file, or when it is
    unusable (unreadable, or ``decode`` raises ValueError, KeyError, TypeError or
    AttributeError), which is then set aside and reported (:func:`set_aside`), and told
    to ``unusable`` too."""
    path = Path(path)
    inode = None
    try:
        found = _read(path, file.limit)
        if found is None:
            return None
        inode = found[1]
        return decode(_parse(path, found[0]))
    except UnusableStateFile as error:
        why = str(error)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        why = f"{path}: not a {file.label} record ({type(error).__name__}: {error})"
    event = set_aside(path, file, why, inode)
    if unusable is not None:
        unusable(event)
    return None


def load_text(path: Path, file: StateFile, unusable: Listener | None = None) -> str | None:
    """The text at ``path`` (a file that is not JSON), or None as :func:`load` says."""
    try:
        return read_text(path, file.limit)
    except UnusableStateFile as error:
        event = set_aside(Path(path), file, str(error))
    if unusable is not None:
        unusable(event)
    return None


def set_aside(path: Path, file: StateFile, why: str, inode: int | None = None) -> SetAside:
    """Rename the unusable ``path`` to ``<name>.unusable`` (a folder, FIFO or link is moved,
    never followed) and report it to every listener. ``inode``: the file that was read;
    one replaced since (a writer's good file) is left where it is."""
    path = Path(path)
    aside: Path | None = aside_path(path)
    try:
        if inode is not None and os.lstat(path).st_ino != inode:
            aside = None
            why += "; replaced meanwhile, left in place"
        else:
            assert aside is not None
            os.replace(path, aside)
    except FileNotFoundError:
        aside = None
    except OSError as error:
        why += f"; cannot set it aside ({error.strerror}): delete it"
        aside = None
    event = SetAside(path, aside, why, file.label)
    logger.warning("unusable state file set aside as %s: %s", aside, why)
    for listener in list(_listeners):
        listener(event)
    return event


def clear_way(path: Path, file: StateFile) -> SetAside | None:
    """Before writing ``path``: set aside what sits at its name and is no regular file
    (a folder, a FIFO, a link); None when the way is clear."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    return set_aside(Path(path), file, f"{path}: {kind} in the way of a write")


def write_json(path: Path, file: StateFile, data: Any) -> None:
    """Write ``data`` as JSON atomically, setting aside a folder, FIFO or link in the way."""
    clear_way(path, file)
    write_json_atomic(Path(path), data)


def write_bytes(path: Path, file: StateFile, data: bytes) -> None:
    """Write ``data`` atomically, setting aside a folder, FIFO or link in the way."""
    clear_way(path, file)
    write_atomic(Path(path), lambda handle: handle.write(data))


def open_log(path: Path, file: StateFile) -> TextIO:
    """A new file of lines at ``path`` for this run to write (any earlier one replaced),
    setting aside a folder, FIFO or link in the way, never opening one."""
    parent = Path(path).parent
    if not parent.is_dir() and (parent.exists() or parent.is_symlink()):
        set_aside(parent, file, f"{parent}: not a folder, in the way of {Path(path).name}")
    parent.mkdir(parents=True, exist_ok=True)
    clear_way(path, file)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o644), "w", encoding="utf-8")
