"""Atomic file writes: after a crash the old file or the new one is there, never half of one.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "state.json"
>>> write_json_atomic(target, {"precision": "bf16"})
>>> target.read_text()
'{\\n  "precision": "bf16"\\n}\\n'
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write(handle)``: a temp file in the same folder, flushed and
    fsynced, renamed over ``path`` with ``os.replace``, then the folder fsynced so the rename
    itself is durable. A failure removes the temp file and leaves ``path`` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except OSError as error:
        Path(tmp_name).unlink(missing_ok=True)
        if error.filename is None and error.errno is not None:  # write() names no file
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_atomic` of ``data`` as indented, key-sorted JSON with a final newline."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_atomic(path, lambda handle: handle.write(text.encode()))


def fsync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    # Not every platform can open a folder (Windows); there the rename is as durable as it gets.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class UnusableStateFile(ValueError):
    """A state file that cannot be read as one: not a regular file, too big, not UTF-8."""


def read_state_text(path: Path, limit: int) -> str | None:
    """The text of the small state file ``path``, or None when there is none.

    Read as a regular file only, at most ``limit`` bytes: a folder, a FIFO (which would
    block the read for ever), a link, a file over ``limit`` bytes (read whole at every run)
    or bytes that are not UTF-8 raise :class:`UnusableStateFile` naming the path and why.
    """
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
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnusableStateFile(f"{path}: over the {limit}-byte bound")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UnusableStateFile(f"{path}: not UTF-8 text") from None
