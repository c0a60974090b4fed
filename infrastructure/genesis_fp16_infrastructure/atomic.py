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
