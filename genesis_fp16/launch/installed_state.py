"""What is installed on an interpreter's path, as one digest: the run worker's is taken when
it starts and compared before each fork (genesis_fp16/launch/run_worker.py).

A process reads its ``.pth`` files once, when it starts: an editable install made since
(``pip install -e``: a new ``__editable__.*.pth``, a path or an import finder) is invisible
to it and to every child it forks, which then cannot import the new plugin, or imports an
upgraded one's old folder. So the worker is replaced when the digest of its path changes:
for each folder on ``sys.path``, the names in it (a module, a package or a ``.pth`` file
added or removed) and the modification time of each ``.pth`` file and each distribution's
metadata folder (``*.dist-info``, ``*.egg-info``: pip rewrites them at an upgrade).

One listing of each folder on the path and a ``stat`` per file of each distribution's
metadata: about 30 ms for a venv of 200 packages on a loaded 2-core host, once per run.

>>> import sys
>>> installed_digest(sys.path) == installed_digest(sys.path)
True
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

# The entries of a path folder whose own change (not only their presence) matters.
_WATCHED_SUFFIXES = (".pth", ".dist-info", ".egg-info", ".egg-link")
# Written by any import of a module from the folder: its change says nothing of an install.
_IGNORED = frozenset({"__pycache__"})


def installed_digest(paths: Iterable[str]) -> str:
    """A hex digest of what ``paths`` (a ``sys.path``) hold; equal while nothing there was
    installed, uninstalled or upgraded. An unreadable or missing folder counts as such."""
    digest = hashlib.sha256()
    for folder in paths:
        digest.update(f"\0path {folder}\0".encode())
        try:
            entries = sorted(os.scandir(folder or "."), key=lambda entry: entry.name)
        except OSError as exc:  # a zip file, a folder not there (yet): its state is that
            digest.update(f"unreadable {type(exc).__name__}\0".encode())
            continue
        for entry in entries:
            if entry.name in _IGNORED:
                continue
            digest.update(entry.name.encode(errors="surrogateescape") + b"\0")
            if entry.name.endswith(_WATCHED_SUFFIXES):
                digest.update(str(_mtime_ns(entry)).encode() + b"\0")
    return digest.hexdigest()


def _mtime_ns(entry: os.DirEntry[str]) -> int:
    """When ``entry`` changed; for a metadata folder, its newest file (pip writes RECORD
    last, and an in-place reinstall may keep the folder's own time)."""
    try:
        newest = entry.stat().st_mtime_ns
        if entry.is_dir():
            with os.scandir(entry.path) as inside:
                newest = max([newest, *(item.stat().st_mtime_ns for item in inside)])
        return newest
    except OSError:
        return -1
