"""What the data files were when a model was trained on them: size, mtime and content digest.

Whether a folder of data files changed since the served model's run is one ``stat`` per
file, not a parse of every record: :func:`scan_files` hashes only the files whose size,
modification time, change time or inode differ from the previous manifest's (and those
modified too close to the previous scan to trust their mtime, see ``RACY_NS``), and
reuses the stored digest of every other. The change time (``st_ctime_ns``) is there
because a file's mtime can be set back (``cp -p``, ``rsync -t``, ``touch -r``, a tar
extracted over the pool): other bytes of the same size under the old mtime would
otherwise keep the old digest. Its ctime moves with every write, rename or chmod and no
program can set it back, so a stat that matches in all four is the file the digest was
taken of (git's index trusts the same fields); any other is hashed again, which costs a
read and never serves old records. What is left: a same-size rewrite in place with its
mtime set back, all within one timestamp tick of the scan's ``stat`` (ctime, like mtime,
has the kernel's coarse clock); the racy rule covers that tick for mtime only. Two
manifests hold the same data when a read of their files gives the same records
(:meth:`Manifest.same_content`): the same digests in the same formats (suffixes) and read
order, a file that repeats an earlier file's bytes left out (its records are all
duplicates). A file rewritten with identical bytes, renamed or moved without changing
the read order, or copied beside itself, is unchanged; one renamed ahead of another
(which of two files' records with one id is read first) is a change, read in full.

Torch-free and cheap on purpose: the daemon asks it before starting a run's process
(``genesis_fp16_infrastructure.recipes.retrain.freshness``), and an unchanged pool then costs
neither a child, nor torch's import, nor a parse::

    manifest, report = scan_files(Path("pool"), previous)
    if manifest.same_content(previous):
        ...  # nothing to learn
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
from msgspec.structs import astuple

from genesis_fp16_infrastructure.data.sources import DATA_SUFFIXES, list_data_files
from genesis_fp16_infrastructure.errors import DataError

MANIFEST_VERSION = 1
# A file whose mtime is this close to the scan (or after it) may be written again within
# the same mtime tick without its size or mtime changing: its digest is not trusted at the
# next scan, which hashes it again (git's "racily clean" entries, for the same reason).
RACY_NS = 2_000_000_000
_CHUNK = 2**20  # bytes hashed at a time: a file is streamed, never held whole


class Prefix(msgspec.Struct, frozen=True, array_like=True):
    """What a scan saw of a grown file's first ``size`` bytes (its size at the previous
    scan): their digest (the manifest's digest of a file that size), their newlines and
    their last byte, as hex (``"0a"``: a line's end). The record cache continues an
    appended ``.jsonl`` from it instead of reading those bytes a second time."""

    size: int
    digest: str
    lines: int
    last: str


class FileState(msgspec.Struct, frozen=True, array_like=True):
    """One data file as scanned: its path (as listed), size, mtime and content digest,
    in its JSON's order (a list, as :meth:`Manifest.to_json` writes it); ``prefix``, for
    a ``.jsonl`` file that grew since the previous scan, what its old bytes were (worked
    out in the same pass, handed to a run, never saved)."""

    path: str
    size: int
    mtime_ns: int
    digest: str  # blake2b-128 of the file's bytes, hex
    # st_ctime_ns and st_ino as scanned; 0: not known (a manifest saved before they
    # were kept, four fields a file), and then the file is hashed again rather than trusted
    ctime_ns: int = 0
    inode: int = 0
    prefix: Prefix | None = None

    # Equal, and hashed, by the file's six saved fields: a prefix is one scan's by-product.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileState) and astuple(self)[:6] == astuple(other)[:6]

    def __hash__(self) -> int:
        return hash(astuple(self)[:6])

    def same_stat(self, stat: os.stat_result) -> bool:
        """``stat`` is of the file this state was taken of: size, mtime, ctime and inode
        all as scanned (and the latter two known)."""
        return self.ctime_ns != 0 and (self.size, self.mtime_ns, self.ctime_ns, self.inode) == (
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
            stat.st_ino,
        )


@dataclass(frozen=True)
class ScanReport:
    """What a scan cost: the files hashed (and their bytes) and the files taken on trust."""

    hashed: int = 0
    hashed_bytes: int = 0
    reused: int = 0


@dataclass(frozen=True)
class Manifest:
    """The data files of a pool by path, and when they were scanned (``time.time_ns``)."""

    files: tuple[FileState, ...]
    scanned_ns: int

    def same_content(self, other: Manifest | None) -> bool:
        """The same bytes in the same formats, read in the same order, whatever the files'
        names and mtimes; a file that repeats an earlier one's bytes adds nothing."""
        if other is None:
            return False
        return _contents(self) == _contents(other)

    def to_json(self, prefixes: bool = True) -> dict[str, Any]:
        """The manifest with each grown file's :class:`Prefix`, for a scan handed to a run's
        process (the record cache continues an appended file from it); ``prefixes=False``:
        as saved (a prefix is never saved)."""
        files = [list(astuple(f))[: 7 if prefixes and f.prefix else 6] for f in self.files]
        scanned = {"version": MANIFEST_VERSION, "scanned_ns": self.scanned_ns, "files": files}
        return msgspec.to_builtins(scanned)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Manifest | None:
        """The manifest saved by :meth:`to_json`; None for another version or a malformed one.
        A file saved without its ctime and inode (four fields) is hashed at the next scan."""
        if not isinstance(data, Mapping) or data.get("version") != MANIFEST_VERSION:
            return None
        try:
            files = msgspec.convert(data["files"], tuple[FileState, ...])
            return cls(files, int(data["scanned_ns"]))
        except (KeyError, TypeError, ValueError):  # msgspec's refusal is a ValueError
            return None


def scan_files(path: Path, previous: Manifest | None = None) -> tuple[Manifest, ScanReport]:
    """The manifest of the data files under ``path`` (listed as the readers list them),
    hashing only what ``previous`` cannot vouch for. Raises ``DataError`` as the readers
    do for a missing path, a folder without data files or a file that cannot be read."""
    known = {f.path: f for f in previous.files} if previous is not None else {}
    trusted_before = previous.scanned_ns - RACY_NS if previous is not None else 0
    scanned_ns = time.time_ns()
    files: list[FileState] = []
    hashed = hashed_bytes = reused = 0
    for file in list_data_files(Path(path)):
        name = str(file)
        try:
            stat = os.stat(file)
            old = known.get(name)
            if old is not None and old.same_stat(stat) and stat.st_mtime_ns < trusted_before:
                files.append(old)
                reused += 1
                continue
            prefix_size = 0
            if old is not None and 0 < old.size < stat.st_size and name.endswith(".jsonl"):
                prefix_size = old.size  # appended to: its old bytes' digest in the same pass
            digest, size, prefix = _digest_and_prefix(file, prefix_size)
        except FileNotFoundError:  # rotated away since the listing: the data without it
            continue
        except OSError as exc:  # as the readers say it: the user has to fix it
            raise DataError(f"cannot read data file {name!r}: {exc.strerror or exc}") from exc
        hashed += 1
        hashed_bytes += size
        # The stat taken before hashing: a write during the hash moves the mtime past it,
        # so the next scan hashes the file again instead of trusting this digest.
        files.append(
            FileState(
                name, stat.st_size, stat.st_mtime_ns, digest, stat.st_ctime_ns, stat.st_ino, prefix
            )
        )
    report = ScanReport(hashed, hashed_bytes, reused)
    return Manifest(tuple(files), scanned_ns), report


def prefix_of(file: Path, size: int) -> Prefix:
    """The :class:`Prefix` of ``file``'s first ``size`` bytes (the record cache's check
    that an appended file's head is unchanged); ValueError if the file is shorter."""
    with open(file, "rb") as handle:
        prefix, _, _ = _read_prefix(handle, size)
    if prefix is None:
        raise ValueError(f"{file} is shorter than {size} bytes")
    return prefix


def _digest_and_prefix(file: Path, prefix_size: int) -> tuple[str, int, Prefix | None]:
    """The blake2b-128 hex digest of the whole file (the manifest's), the bytes hashed
    and, when ``prefix_size`` > 0, the :class:`Prefix` of its first ``prefix_size`` bytes
    (the same digest of fewer bytes), in one pass over the file."""
    with open(file, "rb") as handle:
        prefix, hasher, size = _read_prefix(handle, prefix_size)
        while chunk := handle.read(_CHUNK):  # the rest, a chunk at a time
            hasher.update(chunk)
            size += len(chunk)
    return hasher.hexdigest(), size, prefix if prefix_size else None


def _read_prefix(handle: BinaryIO, size: int) -> tuple[Prefix | None, Any, int]:
    """The :class:`Prefix` of the ``size`` bytes ``handle`` reads next (None if it ends
    before), the hasher that took them (to go on with) and how many it took."""
    hasher = hashlib.blake2b(digest_size=16)
    hashed, lines, last = 0, 0, b""
    while chunk := handle.read(min(_CHUNK, size - hashed)):
        hasher.update(chunk)
        hashed, lines, last = hashed + len(chunk), lines + chunk.count(b"\n"), chunk[-1:]
    if hashed != size:
        return None, hasher, hashed
    return Prefix(size, hasher.copy().hexdigest(), lines, last.hex()), hasher, hashed


def _contents(manifest: Manifest) -> list[tuple[str, str]]:
    """What a read of ``manifest``'s files gives, whatever their names: each file's format
    (its data suffix: the reader parses by it) and digest, in read order (the listing's:
    where two files hold one id, the first read wins). A file of the format and bytes of
    one read before it is left out: each of its records is a later one of an id already
    read, which the read leaves out as a duplicate.

    >>> def files(*named):
    ...     return Manifest(tuple(FileState(p, 1, 1, d) for p, d in named), 0)
    >>> _contents(files(("d/a.json", "x"), ("d/a copy.json", "x"), ("d/b.jsonl", "x")))
    [('.json', 'x'), ('.jsonl', 'x')]
    """
    contents: list[tuple[str, str]] = []
    for file in manifest.files:  # as scan_files listed them: the readers' order
        content = (_format(file.path), file.digest)
        if content not in contents:
            contents.append(content)
    return contents


def _format(path: str) -> str:
    """The data suffix ``path`` ends with, the longest ('' for a data path named otherwise)."""
    return max((s for s in DATA_SUFFIXES if path.endswith(s)), key=len, default="")
