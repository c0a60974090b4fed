"""The joined pool's cache entry, ``pool-<key>.gfpool``: written whole, read back checked.

A slim read whose files are all unchanged takes its :class:`PoolColumns` from this one
file (``data.record_cache``). The file is believed by the next run, so nothing in it is
used unchecked (issue 92: a flipped byte, a code past its values, an older entry copied
under the new key, a FIFO, a huge file each read as a hit once):

    MAGIC | header length, file size, header CRC-32 | header (msgpack) | columns

* **The size first.** The file is opened without following a link and without
  blocking (a FIFO at its name is refused, never waited on) and must be a regular file
  no larger than ``limit`` (:func:`size_bound`: what the files' own entries can make),
  before a byte of it is read; then of the size its first bytes state, before its
  header is read.
* **The header by its CRC-32.** It holds the ids, the coded values, the quarantined
  entries, and each file of the pool by path *and content digest*: the cache asks for
  the digests its manifest has now, so an entry of other bytes (an older pool's, copied
  under the new key) is refused, whatever its name.
* **Every column by its CRC-32, on every read.** Each column's bytes are mapped
  (``mmap``, copy-on-write: a run that writes into a column changes its own pages, never
  the file) and checksummed: the score column and all the others, so that no record is
  used that is not what was written. It costs one pass over the mapped bytes (about 240
  bytes a record), which also brings them into memory for the run that reads them next;
  ``benchmarks/pool_scale.py --pool-read`` shows what it costs at 100,000 records.
* **Every code and row in range.** Each coded column's codes name one of its values, the
  labelled rows are rows of the pool in order, each parent a row or an outside id, each
  outcome one of ``OUTCOMES``; each column has its dtype and length.

Any of these failing is a ``ValueError`` naming what (``FileNotFoundError``: no entry).

    write_pool_file(path, StoredPool(columns, 0, [("a.json", digest)], []), "v")
    stored = read_pool_file(path, "v", size_bound(entries_bytes, ["a.json"]))
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.files import write_atomic
from genesis_fp16_infrastructure.data.file_records import OWN_FEATURES, Rejected
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns
from genesis_fp16_infrastructure.data.schema import OUTCOMES

MAGIC = b"GFP16POOL\n"
# 2: each file's digest, a CRC-32 of the header and of each column, the size up front
FORMAT = 2
_PREFIX = struct.Struct("<QQI")  # after MAGIC: the header's length, the file's size, its CRC-32
_START = len(MAGIC) + _PREFIX.size
_ALIGN = 64
# The pool's columns: PoolColumns' arrays and coded columns, in its field order, and the
# dtype each is written in (a column of another dtype is damage).
_ARRAYS = tuple(f.name for f in fields(PoolColumns) if f.type == "np.ndarray")
_CODED = tuple(f.name for f in fields(PoolColumns) if f.type == "Coded")
_DTYPES = {
    **dict.fromkeys(("id_hash", "generation", "parent_start", "parent"), "<i8"),
    **dict.fromkeys(("labelled", "outcome", "key"), "<i8"),
    **dict.fromkeys(("score", "created", "own", "label_score"), "<f8"),
    **dict.fromkeys(("scored", "timed", "success", "label_scored"), "|b1"),
    "judged": "<u8",
    **{f"{name}.codes": "<i8" for name in _CODED},
}
# size_bound: a record costs the pool entry at most 236 bytes of columns (8 each for its
# id hash, score, time, generation, parents' start, labelled row, label score, outcome,
# key and judged hash, 4 x 8 of codes, 120 of own numbers, 4 flags) against at least 210
# in its file's entry (the same numbers, int32 codes and a byte of outcome); its id, its
# parents and the quarantined entries take at most what they take there, plus a file
# index. Twice the files' entries covers that; the rest is per file (its path, up to
# PATH_MAX, and digest) and fixed (the header's other fields, each column's alignment).
_PER_FILE = 4096 + 256
_FIXED = 64 * 2**10


@dataclass(frozen=True)
class StoredPool:
    """A read's pool (``text`` None: a slim read), its duplicates left out, each file of
    the pool as (path, content digest) in read order, and each file's quarantined entries
    in read order (the file's index into ``files``)."""

    columns: PoolColumns
    duplicates: int
    files: list[tuple[str, str]]
    rejected: list[tuple[int, Rejected]]


class _Header(msgspec.Struct):
    version: str
    arrays: dict[str, tuple[str, list[int], int, int]]  # name: dtype, shape, offset, CRC-32
    ids: tuple[str, ...]
    outside: list[str]
    values: dict[str, list[Any]]  # each coded column's distinct values
    files: list[tuple[str, str]]  # (path, content digest), in read order
    rejected: list[tuple[int, str, str, str]]
    duplicates: int


def size_bound(entries: int, paths: list[str]) -> int:
    """The most bytes a pool entry can hold when the files' own entries (the blocks it was
    joined from) hold ``entries`` bytes: larger is not an entry this build wrote."""
    return 2 * entries + sum(len(os.fsencode(p)) + _PER_FILE for p in paths) + _FIXED


def arrays_of(columns: PoolColumns) -> dict[str, np.ndarray]:
    """The pool's numeric columns by their names in the file (a coded column's codes as
    ``<name>.codes``), each C-contiguous in the dtype it is written in."""
    arrays = {name: getattr(columns, name) for name in _ARRAYS}
    arrays |= {f"{name}.codes": getattr(columns, name).codes for name in _CODED}
    return {name: np.ascontiguousarray(array, _DTYPES[name]) for name, array in arrays.items()}


def checksums(arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """Each column's CRC-32, of its bytes in memory (one pass over a mapped column)."""
    return {name: zlib.crc32(_bytes(array)) for name, array in arrays.items()}


def _bytes(array: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes, no copy (flat first: an empty 2-D view will not cast)."""
    flat: Any = array.reshape(-1)
    return memoryview(flat).cast("B")


def write_pool_file(path: Path, stored: StoredPool, version: str) -> None:
    """Write ``stored`` to ``path`` atomically; an OSError or a msgspec.EncodeError (text
    msgpack cannot hold) leaves ``path`` as it was."""
    columns = stored.columns
    if columns.text is not None:
        raise ValueError("only a slim read's pool is stored (its text is not kept)")
    values = {name: getattr(columns, name).values for name in _CODED}
    rejected = [(i, r.where, r.reason, r.text) for i, r in stored.rejected]
    fields = (columns.ids, columns.outside, values, stored.files, rejected, stored.duplicates)

    def header(layout: Layout) -> bytes:
        return msgspec.msgpack.encode(_Header(version, layout, *fields))

    write_columns(path, arrays_of(columns), header)


# Each column's place in a columns file: its dtype, shape, offset and CRC-32, by name.
Layout = dict[str, tuple[str, list[int], int, int]]


def write_columns(
    path: Path,
    arrays: dict[str, np.ndarray],
    header: Callable[[Layout], bytes],
    sync: bool = True,
) -> None:
    """Write C-contiguous ``arrays`` to ``path`` atomically, as this module's file: MAGIC,
    the prefix, ``header(layout)`` (which must hold the layout, for :func:`mapped_column`)
    and each column aligned, by its CRC-32. The pool entry's writer, and any other kept
    columns' (``world_model.kept_numeric``); ``sync=False``: no fsync (write_atomic)."""
    crcs = checksums(arrays)

    def head_of(offsets: dict[str, int]) -> bytes:
        return header(
            {
                name: (a.dtype.str, list(a.shape), offsets.get(name, 0), crcs[name])
                for name, a in arrays.items()
            }
        )

    # Offsets depend on the header's length, which depends on the offsets' digits: lay
    # out with room to spare (each offset encodes in at most 9 bytes whatever its value).
    room = len(head_of(dict.fromkeys(arrays, 2**62))) + 16
    offsets, at = {}, _aligned(_START + room)
    for name, array in arrays.items():
        offsets[name] = at
        at = _aligned(at + array.nbytes)
    head = head_of(offsets)
    if len(head) > room:
        raise ValueError("pool header outgrew its room")  # cannot happen: 2**62 is the widest

    def write(handle: IO[bytes]) -> None:
        handle.write(MAGIC + _PREFIX.pack(len(head), at, zlib.crc32(head)) + head)
        for name, array in arrays.items():
            handle.seek(offsets[name])
            handle.write(_bytes(array))  # the column's own bytes, no copy
        handle.truncate(at)

    write_atomic(path, write, sync)


def read_pool_file(path: Path, version: str, limit: int) -> StoredPool:
    """The pool :func:`write_pool_file` wrote at ``path``, checked (the module docstring)
    and its columns mapped; FileNotFoundError without one, ValueError for anything else
    than a regular file of at most ``limit`` bytes that this build wrote for ``version``."""
    raw, mapping = open_columns(path, limit)
    try:
        head = msgspec.msgpack.decode(raw, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"pool header unreadable: {exc}") from None
    if head.version != version:
        raise ValueError(f"pool file version {head.version!r}, this build's {version}")
    if set(head.arrays) != set(_DTYPES):  # each column by its name: none missing, none more
        raise ValueError(f"pool file columns {sorted(head.arrays)}, not this build's")
    arrays: dict[str, Any] = {
        name: mapped_column(mapping, name, _DTYPES[name], *at) for name, at in head.arrays.items()
    }
    coded: dict[str, Any] = {
        name: Coded(arrays.pop(f"{name}.codes"), _values(name, head.values[name]))
        for name in _CODED
    }
    columns = PoolColumns(ids=head.ids, outside=head.outside, text=None, **coded, **arrays)
    _check(columns)
    rejected = [(i, Rejected(where, reason, text)) for i, where, reason, text in head.rejected]
    return StoredPool(columns, head.duplicates, head.files, rejected)


def open_columns(path: Path, limit: int) -> tuple[bytes, mmap.mmap]:
    """The header's bytes (its CRC-32 checked) and the mapped file (copy-on-write) of the
    columns file :func:`write_columns` wrote at ``path``; FileNotFoundError without one,
    ValueError for anything but a regular file of at most ``limit`` bytes, whole."""
    # O_NOFOLLOW: a link is refused (ELOOP); O_NONBLOCK: a FIFO opens at once, refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        size = info.st_size
        if size > limit:
            raise ValueError(f"{size:,} bytes, over the {limit:,} its files' entries allow")
        start = os.pread(fd, _START, 0)
        if len(start) != _START or not start.startswith(MAGIC):
            raise ValueError("not a pool file (no magic)")
        length, stated, crc = _PREFIX.unpack(start[len(MAGIC) :])
        if stated != size or length > size - _START:
            raise ValueError(f"pool file of {size} bytes, its first bytes say {stated}")
        raw = os.pread(fd, length, _START)
        if len(raw) != length or zlib.crc32(raw) != crc:
            raise ValueError("pool header damaged (its CRC-32 differs)")
        return raw, mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # copy-on-write
    finally:
        os.close(fd)


def mapped_column(
    mapping: mmap.mmap, name: str, expected: str, dtype: str, shape: list[int], offset: int,
    crc: int,
) -> np.ndarray:  # fmt: skip
    """One column of the mapped file, its dtype (``expected``), place and CRC-32 checked."""
    if dtype != expected or any(d < 0 for d in shape):
        raise ValueError(f"pool column {name} of dtype {dtype} and shape {shape}")
    kind = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = kind.itemsize * count
    if offset < _START or offset + nbytes > len(mapping):
        raise ValueError(f"pool column {name} at {offset} of {nbytes} bytes past the file")
    # A plain ndarray over the mapping (writable: a write changes the run's copy only).
    array = np.frombuffer(mapping, kind, count, offset).reshape(shape)
    if zlib.crc32(_bytes(array)) != crc:
        raise ValueError(f"pool column {name} damaged (its CRC-32 differs)")
    return array


def _values(name: str, values: list[Any]) -> list[Any]:
    """A coded column's values as a read makes them (a tool list is a tuple)."""
    return [tuple(v) for v in values] if name == "tools" else values


def _check(columns: PoolColumns) -> None:
    """Every column as long as the pool, and every code and row in range: an entry
    whose checksums hold but whose numbers do not (a writer's bug) is damage too, never
    an IndexError in the run that reads it."""
    n, labelled = len(columns.ids), len(columns.labelled)
    rows = ("id_hash", "score", "scored", "created", "timed", "generation", "own")
    per_label = ("success", "label_score", "label_scored", "outcome", "key", "judged")
    lengths = [len(getattr(columns, name)) for name in rows]
    lengths += [len(getattr(columns, name).codes) for name in _CODED]
    if set(lengths) - {n} or {len(getattr(columns, k)) for k in per_label} - {labelled}:
        raise ValueError("pool columns of other lengths than its ids")
    if columns.own.shape != (n, len(OWN_FEATURES)) or len(columns.parent_start) != n + 1:
        raise ValueError("pool columns of other shapes than its ids")
    for name in _CODED:
        if not _within(getattr(columns, name).codes, len(getattr(columns, name).values)):
            raise ValueError(f"pool column {name}: a code names no value")
    if not _within(columns.labelled, n) or (np.diff(columns.labelled) <= 0).any():
        raise ValueError("pool labelled rows out of range or out of order")
    if not _within(columns.outcome, len(OUTCOMES)):
        raise ValueError("pool outcomes out of range")
    start = columns.parent_start
    if start[0] != 0 or start[-1] != len(columns.parent) or (np.diff(start) < 0).any():
        raise ValueError("pool parents' starts out of order")
    if not _within(columns.parent, n + len(columns.outside)):
        raise ValueError("pool parents out of range")


def _within(values: np.ndarray, end: int) -> bool:
    """Whether every value is in ``range(end)`` (none: True)."""
    return not len(values) or (int(values.min()) >= 0 and int(values.max()) < end)


def _aligned(at: int) -> int:
    return -(-at // _ALIGN) * _ALIGN
