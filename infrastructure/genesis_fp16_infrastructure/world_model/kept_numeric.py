"""Each record's unscaled numeric features, kept from one run to the next: a record is
worked out once (issue 90, item 2).

The encoder is fitted on each run's training records, so its matrix cannot be kept; the
rows it is made from can. :func:`~.features.numeric_rows` (a record's own numbers and
its lineage numbers) does not depend on the fit, only on the record and the records
around it: its parents (their score, operator, depth and parents), its siblings (the
parents' other children) and, through the depth, every ancestor. At 100,000 records it
was over half of a run's ``encode``, and the judged run's scorings built it again.

:class:`KeptNumeric` keeps the rows of a pool's labelled records in one file of its own
beside the record cache, named by the data path (the files of other paths are deleted by
:meth:`KeptNumeric.forget_others`, as a training run starts), and gives the next pool's
rows from it:

* **Keyed by content.** Every record of the pool has a key: a hash of its id, score,
  time, operator, parents (their ids, in order) and, when labelled, its
  ``labelled_hash`` (its label and every input). A row is reused only for a record of
  the same key whose neighbourhood is unchanged too.
* **What changed, and who sees it.** The records whose key is new (added, relabelled,
  edited) or gone (removed, or the old version of an edited one) are changed. A record
  is worked out again when it changed, when one of its parents names a changed record
  (or, again and again, a record so worked out: every descendant, for the depth; the
  grandchildren with them), or when it shares a parent with a changed record (its
  siblings). Everything else reads what it read before. A pool whose unchanged records
  come in another order (files read in another order: a sibling mean adds in that
  order) is worked out whole.
* **Worked out from what they need.** The records worked out read the pool's columns,
  but not a whole pool's lineage index: the file keeps every record's depth too, so
  :func:`~.lineage_columns.rows_index` takes the depths of the records whose rows hold
  (their ancestors unchanged), works out the rest from their parents, and lists the
  children of the worked-out records' parents alone. A pool whose parent links loop
  keeps no depths (the loop rule's depths are the whole pool's): the next run builds
  the whole index, as it does when new records make a loop.
* **Checked where it is used.** The file is ``data.pool_file``'s columns file: opened
  without following a link or blocking on a FIFO, no larger than the current pool can
  make it (:func:`_size_bound`), its header and each column by a CRC-32 on every read,
  every row in range. A file that fails is a logged miss, counted (``unreadable``): the
  rows are worked out and the file written again.

    kept = KeptNumeric(folder, data_path)
    numeric = kept.rows(columns)  # == numeric_rows(columns, columns.labelled), bit for bit
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import NamedTuple

import msgspec
import numpy as np
import torch

from genesis_fp16_infrastructure.data.lineage import MAX_DEPTH
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.pool_file import (
    Layout,
    mapped_column,
    open_columns,
    write_columns,
)
from genesis_fp16_infrastructure.data.record_cache import CACHE_VERSION
from genesis_fp16_infrastructure.data.schema import id_digest, record_id_hashes
from genesis_fp16_infrastructure.world_model import features
from genesis_fp16_infrastructure.world_model.features import ENCODER_VERSION, NUMERIC_FEATURES
from genesis_fp16_infrastructure.world_model.lineage_columns import (
    PoolIndex,
    columns_index,
    ranges,
    rows_index,
)

logger = logging.getLogger(__name__)

# Bump when a numeric feature, or what it reads of the records around one, changes.
NUMERIC_VERSION = f"2.e{ENCODER_VERSION}.{CACHE_VERSION}"
_WIDTH = len(NUMERIC_FEATURES)
_DTYPES = {
    "key": "<u8",  # per pool record: its content key
    "order": "<i8",  # the records by key, ascending (distinct: checked)
    "id_hash": "<i8",  # per pool record
    "parent_start": "<i8",  # pool records + 1
    "parent_hash": "<i8",  # per parent named: its id's hash
    "labelled": "<i8",  # the labelled rows, in pool order
    "numeric": "<f8",  # (labelled, NUMERIC_FEATURES)
    "depth": "<i8",  # per pool record (lineage_columns' depth); none when the lineage loops
}
_FIXED = 64 * 2**10
_MIX = np.uint64(0x9E3779B97F4A7C15)


class _Header(msgspec.Struct):
    version: str
    arrays: Layout


class Kept(NamedTuple):
    """A pool's kept columns (``_DTYPES``)."""

    key: np.ndarray
    order: np.ndarray
    id_hash: np.ndarray
    parent_start: np.ndarray
    parent_hash: np.ndarray
    labelled: np.ndarray
    numeric: np.ndarray
    depth: np.ndarray


class KeptNumeric:
    """The numeric rows of the pool read from ``data_path``, kept in ``folder``; its
    counts say what each :meth:`rows` did (``train --json``'s ``extra.record_cache``)."""

    def __init__(self, folder: Path, data_path: Path | str) -> None:
        name = hashlib.blake2b(os.fsencode(str(data_path)), digest_size=8).hexdigest()
        self.path = Path(folder) / f"numeric-{name}.gfnum"
        self.reused = 0  # records whose rows came from the file
        self.computed = 0  # records worked out (new, changed, or beside a change)
        self.unreadable = 0  # files refused (damaged, too large, another version)
        self.write_failures = 0

    def forget_others(self) -> int:
        """Delete the kept files of other data paths in this folder (an agent reads one:
        a moved data folder's file is never read again); their count."""
        removed = 0
        for other in self.path.parent.glob("numeric-*.gfnum"):
            if other.name != self.path.name:
                try:
                    other.unlink(missing_ok=True)
                except OSError as exc:  # a folder at its name: the run goes on
                    logger.warning("kept numeric rows: cannot remove %s (%s)", other, exc)
                    continue
                removed += 1
        return removed

    def rows(self, columns: PoolColumns, rows: np.ndarray | None = None) -> torch.Tensor:
        """``numeric_rows(columns, rows)`` (``rows``: the labelled records, by default),
        the kept records' rows read, the rest worked out; with every labelled record
        asked for, the file is written again when anything was worked out."""
        whole = rows is None
        asked = columns.labelled if rows is None else rows
        slots = parent_hashes(columns)
        keys = content_keys(columns, slots)
        kept = self._read(len(columns), len(columns.parent))
        if kept is not None and whole and _unchanged(columns, keys, kept):
            # The kept pool itself (a scoring, then the run's encode, of the same pool):
            # its rows as they lie in the file, mapped copy-on-write, no copy made.
            self.reused += len(asked)
            return torch.from_numpy(kept.numeric)
        order = np.argsort(keys)  # the file's order column, and _fresh's searches
        fresh = _fresh(columns, slots, keys, order, kept) if kept is not None else None
        out = np.empty((len(asked), _WIDTH), dtype=np.float64)
        found = np.zeros(len(asked), np.bool_)
        if kept is not None and fresh is not None:
            at, usable = fresh
            # Each kept record's place among its labelled ones (-1: unlabelled then).
            place = np.full(len(kept.key), -1, np.int64)
            place[kept.labelled] = np.arange(len(kept.labelled))
            row = place[at[asked]]
            found = usable[asked] & (row >= 0)
            if found.any():  # one gather of the pool's rows (the rest overwritten below)
                out = np.take(kept.numeric, np.where(found, row, 0), axis=0)
        need = np.flatnonzero(~found)
        depth = None
        if len(need):
            index = _index(columns, asked[need], kept, fresh)
            out[need] = features.numeric_rows(columns, asked[need], index).numpy()
            depth = None if index.looped else index.depth
        self.reused += len(asked) - len(need)
        self.computed += len(need)
        if whole and (len(need) or kept is None):
            self._write(columns, slots, keys, order, out, depth)
        return torch.from_numpy(out)

    def _read(self, records: int, parents: int) -> Kept | None:
        """The kept columns, checked; None without a file or with a refused one."""
        try:
            raw, mapping = open_columns(self.path, _size_bound(records, parents))
            head = msgspec.msgpack.decode(raw, type=_Header)
            if head.version != NUMERIC_VERSION:
                raise ValueError(f"version {head.version!r}, this build's {NUMERIC_VERSION}")
            if set(head.arrays) != set(_DTYPES):
                raise ValueError(f"columns {sorted(head.arrays)}, not this build's")
            arrays = {
                name: mapped_column(mapping, name, _DTYPES[name], *at)
                for name, at in head.arrays.items()
            }
            kept = Kept(**arrays)
            _check(kept)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, msgspec.DecodeError) as exc:
            logger.warning("kept numeric rows %s unreadable (%s): worked out", self.path, exc)
            self.unreadable += 1
            return None
        return kept

    def _write(
        self,
        columns: PoolColumns,
        slots: np.ndarray,
        keys: np.ndarray,
        order: np.ndarray,
        numeric: np.ndarray,
        depth: np.ndarray | None,
    ) -> None:
        arrays = {
            "key": keys,
            "order": order,
            "id_hash": columns.id_hash,
            "parent_start": columns.parent_start,
            "parent_hash": slots,
            "labelled": columns.labelled,
            "numeric": numeric,
            "depth": np.zeros(0, np.int64) if depth is None else depth,
        }
        arrays = {k: np.ascontiguousarray(a, _DTYPES[k]) for k, a in arrays.items()}

        def header(layout: Layout) -> bytes:
            return msgspec.msgpack.encode(_Header(NUMERIC_VERSION, layout))

        try:
            # No fsync: a file torn by a crash fails its CRC-32, and costs one full encode.
            write_columns(self.path, arrays, header, sync=False)
        except (OSError, ValueError) as exc:  # the run has its rows; the next works them out
            self.write_failures += 1
            logger.warning("cannot write %s (%s): worked out again next run", self.path, exc)


def content_keys(columns: PoolColumns, slots: np.ndarray) -> np.ndarray:
    """Each pool record's key (uint64): its id, score, time, operator, parents' ids in
    order (``slots``: :func:`parent_hashes`) and, when labelled, its ``labelled_hash``
    (label and every input)."""
    operators = np.frombuffer(
        b"".join(id_digest(str(op)) for op in columns.operator.values) or b"", "<u8"
    )
    key = _fmix(columns.id_hash.view(np.uint64))
    parts = (
        columns.score.view(np.uint64),
        columns.scored.astype(np.uint64),
        columns.created.view(np.uint64),
        operators[columns.operator.codes] if len(operators) else np.zeros(len(key), np.uint64),
        _row_sums(columns.parent_start, _slot_keys(columns.parent_start, slots)),
    )
    for part in parts:
        key = _fmix(key ^ part)
    labelled = columns.key.view(np.uint64) ^ _MIX
    key[columns.labelled] = _fmix(key[columns.labelled] ^ labelled)
    return key


def parent_hashes(columns: PoolColumns) -> np.ndarray:
    """Each parent named (``columns.parent``) as its id's hash, inside the pool or out."""
    outside = record_id_hashes(columns.outside)
    table = np.concatenate((columns.id_hash, outside)).astype(np.int64)
    return table[columns.parent]


def _slot_keys(start: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Each parent named, by its id's hash and its place in its record's list."""
    place = np.arange(len(slots), dtype=np.int64)
    place -= np.repeat(start[:-1], np.diff(start))
    mixed: np.ndarray = slots.view(np.uint64) ^ (place.view(np.uint64) * _MIX)
    return _fmix(mixed)


def _row_sums(start: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's values summed (uint64, wrapping), rows ``start[r]:start[r + 1]``."""
    total = np.zeros(len(values) + 1, np.uint64)
    np.cumsum(values, out=total[1:])
    return total[start[1:]] - total[start[:-1]]


def _fmix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (uint64, wrapping)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _unchanged(columns: PoolColumns, keys: np.ndarray, kept: Kept) -> bool:
    """Whether the pool is the kept one: the same records, in the same order."""
    return np.array_equal(keys, kept.key) and np.array_equal(columns.labelled, kept.labelled)


def _fresh(
    columns: PoolColumns, slots: np.ndarray, keys: np.ndarray, order: np.ndarray, kept: Kept
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per pool record, its kept record's index (where ``keys`` match) and whether that
    record's row still holds (module docstring); None when none does (the unchanged
    records in another order)."""
    # Both sides by key (``order``: keys'): the searches run in order (cache-friendly).
    kept_sorted = kept.key[kept.order]
    at, same = _search(kept_sorted, kept.order, keys, order)
    old_same = np.zeros(len(kept.key), np.bool_)  # keys are distinct: a match is one record
    old_same[at[same]] = True
    if (np.diff(at[same]) <= 0).any():  # unchanged records in another order
        return None
    counts = np.diff(columns.parent_start)
    owner = np.repeat(np.arange(len(keys)), counts)
    by_parent = np.argsort(slots)  # children as sets: a stable sort took ~10x longer
    named = slots[by_parent]  # each parent named, sorted: its children by a search

    def children(ids: np.ndarray) -> np.ndarray:
        ids = np.sort(ids)
        low, high = np.searchsorted(named, ids), np.searchsorted(named, ids, "right")
        return owner[by_parent[ranges(low, high - low)]]

    reached = ~same  # the changed records, then their descendants (the depth)
    frontier = np.concatenate((columns.id_hash[~same], kept.id_hash[~old_same]))
    while len(frontier):  # a parent changed, or a parent reached: its children
        found = np.unique(children(frontier))
        found = found[~reached[found]]
        reached[found] = True
        frontier = columns.id_hash[found]
    kept_slots = np.repeat(~old_same, np.diff(kept.parent_start))
    changed_parents = np.concatenate(
        (slots[np.repeat(~same, counts)], kept.parent_hash[kept_slots])
    )
    reached[children(changed_parents)] = True  # the siblings of a changed record
    return at, ~reached


def _index(
    columns: PoolColumns,
    rows: np.ndarray,
    kept: Kept | None,
    fresh: tuple[np.ndarray, np.ndarray] | None,
) -> PoolIndex:
    """The lineage index to work out ``rows`` with: built for those rows alone, the depths
    of the records whose rows still hold taken from the file (their ancestors are
    unchanged: a changed record's descendants are worked out again), when the file has
    them; else the whole pool's."""
    if kept is not None and fresh is not None and len(kept.depth) == len(kept.key):
        at, usable = fresh
        depth = np.full(len(columns), -1, np.int64)
        depth[usable] = kept.depth[at[usable]]
        index = rows_index(columns, rows, depth)
        if index is not None:
            return index
    return columns_index(columns)


def _search(
    ranked: np.ndarray, rank_order: np.ndarray, values: np.ndarray, value_order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``values`` in ``ranked`` (sorted, distinct; ``rank_order[i]`` the index of
    ``ranked[i]``), searched in sorted order (``value_order``): its index, and whether
    it is there."""
    at, found = np.zeros(len(values), np.intp), np.zeros(len(values), np.bool_)
    if not len(ranked) or not len(values):
        return at, found
    queries = values[value_order]
    place = np.minimum(np.searchsorted(ranked, queries), len(ranked) - 1)
    at[value_order] = rank_order[place]
    found[value_order] = ranked[place] == queries
    return at, found


def _size_bound(records: int, parents: int) -> int:
    """The most bytes a kept file for a pool of about ``records`` records naming
    ``parents`` parents can hold: twice that pool's columns (a pool may shrink by half
    between runs and still be read), and the header."""
    per_record = 4 * 8 + 8 + _WIDTH * 8  # key, id hash, parents' start, depth; labelled; rows
    return 2 * (records * per_record + parents * 8) + _FIXED


def _check(kept: Kept) -> None:
    """Every column as long as its pool, every row and parent start in range."""
    n = len(kept.key)
    if len(kept.id_hash) != n or len(kept.parent_start) != n + 1:
        raise ValueError("kept columns of other lengths than the pool's")
    if len(kept.depth) not in (0, n):
        raise ValueError("kept depths of another length than the pool's")
    if len(kept.depth) and (kept.depth.min() < 0 or kept.depth.max() > MAX_DEPTH):
        raise ValueError("kept depths out of range")
    if kept.numeric.shape != (len(kept.labelled), _WIDTH):
        raise ValueError("kept numeric rows of another shape than the labelled records'")
    start = kept.parent_start
    if start[0] != 0 or start[-1] != len(kept.parent_hash) or (np.diff(start) < 0).any():
        raise ValueError("kept parents' starts out of order")
    labelled = kept.labelled
    if len(labelled) and (labelled.min() < 0 or labelled.max() >= n):
        raise ValueError("kept labelled rows out of range")
    if len(kept.order) != n or (n and (kept.order.min() < 0 or kept.order.max() >= n)):
        raise ValueError("kept key order out of range")
    if (np.diff(kept.key[kept.order]) <= 0).any():  # distinct ids: distinct keys
        raise ValueError("kept keys out of order, or repeated")
