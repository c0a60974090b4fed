"""A whole read's pool in one file: its columns memory-mapped, its strings in a header.

The record cache (``data.record_cache``) keeps each file's records, and a read still joins
them into one :class:`~genesis_fp16_infrastructure.data.pool_columns.PoolColumns` every
run (the parents matched by id, every match checked by string): at 100,000 records most
of a warm read. When no file changed, :func:`save_pool` kept that join: one file, a
header of msgpack (the ids, the coded values, the quarantined entries to write again,
each column's dtype, shape and offset) and then each numeric column's bytes, 64-byte
aligned. :func:`load_pool` decodes the header and maps the columns (``np.memmap``,
copy-on-write: a run that writes into a column changes its own pages, never the file).

A file that is shorter or longer than its header says, of another version, or whose
header does not decode is a ``ValueError`` (the caller reads the pool again)::

    save_pool(path, stored)  # write_atomic: the old file or the new, never half of one
    again = load_pool(path)  # StoredPool: columns, duplicates, quarantined entries
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.files import write_atomic
from genesis_fp16_infrastructure.data.file_records import FileCache, Rejected
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns

MAGIC = b"GFP16POOL\n"
_ALIGN = 64
_LENGTH = struct.Struct("<Q")  # the header's length, after MAGIC
_ARRAYS = (
    "id_hash", "score", "scored", "created", "timed", "generation", "parent_start", "parent",
    "own", "labelled", "success", "label_score", "label_scored", "outcome", "key",
)  # fmt: skip
_CODED = ("agent", "operator", "tools", "pattern")


@dataclass(frozen=True)
class StoredPool:
    """A read's pool (``text`` None: a slim read), its duplicates left out, and each
    file's quarantined entries in read order (the file's index into ``files``)."""

    columns: PoolColumns
    duplicates: int
    files: list[str]
    rejected: list[tuple[int, Rejected]]


class PoolCache(FileCache, Protocol):
    """A file cache that also keeps a slim read's joined pool (``data.record_cache``)."""

    def load_pool(self, files: list[Path]) -> StoredPool | None:
        """The joined pool of these unchanged files, in read order, or None."""

    def store_pool(self, files: list[Path], stored: StoredPool) -> None: ...


class _Header(msgspec.Struct):
    version: str
    size: int  # the whole file's bytes
    arrays: dict[str, tuple[str, list[int], int]]  # name: dtype, shape, offset
    ids: list[str]
    outside: list[str]
    values: dict[str, list[Any]]  # each coded column's distinct values
    files: list[str]
    rejected: list[tuple[int, str, str, str]]
    duplicates: int


def save_pool(path: Path, stored: StoredPool, version: str) -> None:
    """Write ``stored`` to ``path`` atomically; an OSError or a msgspec.EncodeError (text
    msgpack cannot hold) leaves ``path`` as it was."""
    columns = stored.columns
    if columns.text is not None:
        raise ValueError("only a slim read's pool is stored (its text is not kept)")
    arrays = {name: getattr(columns, name) for name in _ARRAYS}
    arrays |= {f"{name}.codes": getattr(columns, name).codes for name in _CODED}
    arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
    values = {name: getattr(columns, name).values for name in _CODED}
    rejected = [(i, r.where, r.reason, r.text) for i, r in stored.rejected]

    def header(size: int, offsets: dict[str, int]) -> bytes:
        layout = {
            name: (a.dtype.str, list(a.shape), offsets.get(name, 0)) for name, a in arrays.items()
        }
        fields = (columns.ids, columns.outside, values, stored.files, rejected, stored.duplicates)
        return msgspec.msgpack.encode(_Header(version, size, layout, *fields))

    # Offsets depend on the header's length, which depends on the offsets' digits: lay
    # out with room to spare (each offset encodes in at most 9 bytes whatever its value).
    room = len(header(0, dict.fromkeys(arrays, 2**62))) + 16
    offsets, at = {}, _aligned(len(MAGIC) + _LENGTH.size + room)
    for name, array in arrays.items():
        offsets[name] = at
        at = _aligned(at + array.nbytes)
    head = header(at, offsets)
    if len(head) > room:
        raise ValueError("pool header outgrew its room")  # cannot happen: 2**62 is the widest

    def write(handle: IO[bytes]) -> None:
        handle.write(MAGIC + _LENGTH.pack(len(head)) + head)
        for name, array in arrays.items():
            handle.seek(offsets[name])
            handle.write(memoryview(array).cast("B"))  # the column's own bytes, no copy
        handle.truncate(at)

    write_atomic(path, write)


def load_pool(path: Path, version: str) -> StoredPool:
    """The pool :func:`save_pool` wrote at ``path``, its columns mapped; FileNotFoundError
    without one, ValueError for a damaged or other-version file."""
    with open(path, "rb") as handle:
        start = handle.read(len(MAGIC) + _LENGTH.size)
        if len(start) != len(MAGIC) + _LENGTH.size or not start.startswith(MAGIC):
            raise ValueError("not a pool file (no magic)")
        (length,) = _LENGTH.unpack(start[len(MAGIC) :])
        size = os.fstat(handle.fileno()).st_size
        if length > size:
            raise ValueError(f"pool header of {length} bytes in a file of {size}")
        raw = handle.read(length)
    try:
        head = msgspec.msgpack.decode(raw, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"pool header unreadable: {exc}") from None
    if head.version != version:
        raise ValueError(f"pool file version {head.version!r}, this build's {version}")
    if head.size != size:
        raise ValueError(f"pool file of {size} bytes, its header says {head.size}")
    arrays = {name: _mapped(path, *layout, size) for name, layout in head.arrays.items()}
    coded = {
        name: Coded(arrays.pop(f"{name}.codes"), _values(name, head.values[name]))
        for name in _CODED
    }
    a = arrays
    columns = PoolColumns(
        head.ids, a["id_hash"], a["score"], a["scored"], a["created"], a["timed"],
        a["generation"], coded["agent"], coded["operator"], coded["tools"], coded["pattern"],
        a["parent_start"], a["parent"], head.outside, a["own"], None, a["labelled"],
        a["success"], a["label_score"], a["label_scored"], a["outcome"], a["key"],
    )  # fmt: skip
    _check(columns)
    rejected = [(i, Rejected(where, reason, text)) for i, where, reason, text in head.rejected]
    return StoredPool(columns, head.duplicates, head.files, rejected)


def _mapped(path: Path, dtype: str, shape: list[int], offset: int, size: int) -> np.ndarray:
    """One column of the file, mapped copy-on-write (an empty one is a plain array)."""
    kind = np.dtype(dtype)
    nbytes = kind.itemsize * int(np.prod(shape))
    if offset < 0 or offset + nbytes > size:
        raise ValueError(f"pool column at {offset} of {nbytes} bytes past the file's {size}")
    if nbytes == 0:
        return np.zeros(shape, kind)
    # A plain ndarray over the mapping: the memmap subclass would ride along into every
    # slice and result downstream.
    return np.asarray(np.memmap(path, kind, "c", offset, tuple(shape)))


def _values(name: str, values: list[Any]) -> list[Any]:
    """A coded column's values as a read makes them (a tool list is a tuple)."""
    return [tuple(v) for v in values] if name == "tools" else values


def _check(columns: PoolColumns) -> None:
    """Every column as long as the pool: a header and columns that disagree are damage."""
    n, labelled = len(columns.ids), len(columns.labelled)
    rows = ("id_hash", "score", "scored", "created", "timed", "generation", "own")
    per_label = ("success", "label_score", "label_scored", "outcome", "key")
    lengths = [len(getattr(columns, name)) for name in rows]
    lengths += [len(getattr(columns, name).codes) for name in _CODED]
    if set(lengths) - {n} or {len(getattr(columns, k)) for k in per_label} - {labelled}:
        raise ValueError("pool columns of other lengths than its ids")
    if len(columns.parent_start) != n + 1:
        raise ValueError("pool parents' starts of another length than its ids")


def _aligned(at: int) -> int:
    return -(-at // _ALIGN) * _ALIGN
