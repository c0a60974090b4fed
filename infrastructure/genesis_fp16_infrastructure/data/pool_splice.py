"""A joined pool grown by new files that sort among its own, joining only their records.

:mod:`.pool_extend` grows a kept pool by files that sort after every file of it (the
common later run). A new file may sort among them: ``pool-1099.json`` before
``pool-99.json``, an export dropped beside the data folder's sample
(``qa_pool.json`` before ``trajectory_pools/``). Its records' rows then lie between old
rows, and the read joined every file again: at 100,000 records with 1,000 new, 0.09 s
more than a growth at the end (issue 90). :func:`spliced` joins the new files' records
among themselves and lays the pool out as :func:`~.pool_join.collect` lays out every
file's, array for array:

- the rows in file order: each old file's rows (a range of the old pool's) and each new
  file's, where its file sorts;
- a parent is a row wherever its id is a record now; the ids outside the pool are
  numbered in the order first named, row after row;
- a coded column's values in first-seen order, row after row.

It holds only where a record of each file read is a row: the old pool left out no
duplicate, the new files hold none among themselves and no id of the old pool
(``None`` otherwise: the caller joins every file, which matches by string). A coded value
is then first seen at a row, which the order above finds. Every column is gathered a
whole at a time (numpy); what grows with the pool is a gather per column and the ids
tuple, a pointer each. The grown pool notes the old one's token and where its rows went
(:data:`SPLICED_FROM`): what was worked out of the old pool's rows and kept beside it is
laid out again by that map, not worked out again.

    grown = spliced(kept.columns, rows_per_file, slots, new_blocks)  # or collect(...)
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from genesis_fp16_infrastructure.data.file_records import RecordBlock, joined_codes
from genesis_fp16_infrastructure.data.pool_columns import (
    SPLICED_FROM,
    Coded,
    IdRank,
    PoolColumns,
    ranges,
    set_derived,
)
from genesis_fp16_infrastructure.data.pool_join import collect
from genesis_fp16_infrastructure.data.schema import record_id_hashes


class Layout:
    """Where the old pool's files and the new files' rows go in the spliced pool: its rows
    as stretches of the old rows and of the new, in read order."""

    def __init__(self, rows_per_file: Sequence[int], slots: Sequence[int], new_rows: Sequence[int]):
        """``rows_per_file``: each old file's rows, in order; ``slots[i]``: how many old
        files sort before the i-th new file (non-decreasing); ``new_rows[i]``: its rows."""
        old_start = np.concatenate(([0], np.cumsum(rows_per_file, dtype=np.int64)))
        new_start = np.concatenate(([0], np.cumsum(new_rows, dtype=np.int64)))
        n, q = int(old_start[-1]), int(new_start[-1])
        # Each old row's and each new row's spliced row: shifted by the rows of the files
        # of the other kind that sort before its own file.
        files = np.arange(len(rows_per_file))
        old_shift = new_start[np.searchsorted(np.asarray(slots, np.int64), files, "right")]
        self.old_at = np.arange(n, dtype=np.int64) + np.repeat(old_shift, rows_per_file)
        new_shift = old_start[np.asarray(slots, np.int64)]
        self.new_at = np.arange(q, dtype=np.int64) + np.repeat(new_shift, new_rows)
        self.total = n + q
        # The stretches, (new?, first, end): the files in read order, neighbours of a kind joined
        self.stretches: list[tuple[bool, int, int]] = []
        k = 0
        for i in range(len(rows_per_file) + 1):
            while k < len(slots) and slots[k] == i:
                self._add(True, int(new_start[k]), int(new_start[k + 1]))
                k += 1
            if i < len(rows_per_file):
                self._add(False, int(old_start[i]), int(old_start[i + 1]))

    def _add(self, new: bool, first: int, end: int) -> None:
        last = self.stretches[-1] if self.stretches else None
        if last is not None and last[0] == new and last[2] == first:
            self.stretches[-1] = (new, last[1], end)
        elif end > first:
            self.stretches.append((new, first, end))

    def rows(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """A row column of the spliced pool, from the old pool's and the new records'."""
        if not self.stretches:
            return old[:0]
        return np.concatenate([(new if b else old)[first:end] for b, first, end in self.stretches])

    def ids(self, old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
        """The spliced pool's ids (a pointer each: slices joined)."""
        return tuple(chain.from_iterable((new if b else old)[f:e] for b, f, e in self.stretches))


def spliced(
    old: PoolColumns,
    rows_per_file: Sequence[int],
    slots: Sequence[int],
    blocks: Sequence[RecordBlock],
) -> PoolColumns | None:
    """``old`` (a slim read's pool, of files whose rows are ``rows_per_file``, no duplicate
    left out) with the records of ``blocks`` (new files, in read order; ``slots[i]``: how
    many old files sort before the i-th) laid among its rows as a join of every file lays
    them out; None where that join would leave a duplicate out, or an id hash is shared by
    two different ids (join every file instead)."""
    if old.text is not None:
        raise ValueError("spliced: a slim pool only (read with keep_text=False)")
    if sum(rows_per_file) != len(old) or len(slots) != len(blocks):
        raise ValueError("spliced: the files' rows are not the old pool's, or a slot is missing")
    new, within = collect(blocks, keep_text=False)
    if within or not _every_value_used(old) or not _every_value_used(new):
        return None
    old_ids, new_ids = old.id_rank, IdRank.of(new.id_hash)
    if old_ids is None or new_ids is None:
        return None
    _, known = old_ids.find(new.id_hash, new.ids, old.ids)
    if bool(known.any()):
        return None  # a new record of an old id: the join leaves one of them out
    layout = Layout(rows_per_file, slots, [len(b.trajectory_id) for b in blocks])
    if layout.total != len(old) + len(new):
        return None  # a block's records are not its rows
    parents = _Parents.of(old, new, layout, old_ids, new_ids)
    if parents is None:
        return None
    rows = layout.rows
    labelled_at = np.concatenate((layout.old_at[old.labelled], layout.new_at[new.labelled]))
    by_row = np.argsort(labelled_at, kind="stable")

    def labels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate((a, b))[by_row]

    columns = PoolColumns(
        ids=layout.ids(old.ids, new.ids),
        id_hash=rows(old.id_hash, new.id_hash),
        score=rows(old.score, new.score),
        scored=rows(old.scored, new.scored),
        created=rows(old.created, new.created),
        timed=rows(old.timed, new.timed),
        generation=rows(old.generation, new.generation),
        agent=_coded(old.agent, new.agent, layout),
        operator=_coded(old.operator, new.operator, layout),
        tools=_coded(old.tools, new.tools, layout),
        pattern=_coded(old.pattern, new.pattern, layout),
        parent_start=parents.start,
        parent=parents.rows,
        outside=parents.outside,
        own=rows(old.own, new.own),
        text=None,
        labelled=labelled_at[by_row],
        success=labels(old.success, new.success),
        label_score=labels(old.label_score, new.label_score),
        label_scored=labels(old.label_scored, new.label_scored),
        outcome=labels(old.outcome, new.outcome),
        key=labels(old.key, new.key),
        judged=labels(old.judged, new.judged),
    )
    set_derived(columns, {SPLICED_FROM: (old.token, layout.old_at)})
    return columns


def _every_value_used(columns: PoolColumns) -> bool:
    """Whether every value of each coded column is some row's: its first-seen place is
    then a row's, which the spliced order finds."""
    return all(
        bool(np.bincount(c.codes, minlength=len(c.values)).all())
        for c in (columns.agent, columns.operator, columns.tools, columns.pattern)
    )


def _coded(old: Coded, new: Coded, layout: Layout) -> Coded:
    """The spliced rows' column, its values in first-seen order, row after row."""
    both, values = joined_codes([(old.codes, old.values), (new.codes, new.values)])
    codes = layout.rows(both[: len(old.codes)], both[len(old.codes) :])
    first = np.full(len(values), len(codes), np.int64)  # each value's first row
    np.minimum.at(first, codes, np.arange(len(codes)))
    order = np.argsort(first, kind="stable")  # the values in the order first seen
    rank = np.empty(len(values), np.int64)
    rank[order] = np.arange(len(order))
    return Coded(rank[codes], [values[k] for k in order.tolist()])


class _Parents:
    """The spliced pool's parent columns: ``start``, ``rows`` and ``outside``."""

    def __init__(self, start: np.ndarray, rows: np.ndarray, outside: list[str]) -> None:
        self.start, self.rows, self.outside = start, rows, outside

    @classmethod
    def of(
        cls,
        old: PoolColumns,
        new: PoolColumns,
        layout: Layout,
        old_ids: IdRank,
        new_ids: IdRank,
    ) -> _Parents | None:
        """None when a hash found names another id."""
        # Each side's outside ids: a row of the other side's records, or a name
        names: dict[str, int] = {}
        old_out = _outside_to(old.outside, new_ids, new.ids, layout.new_at, names)
        new_out = _outside_to(new.outside, old_ids, old.ids, layout.old_at, names)
        if old_out is None or new_out is None:
            return None
        # Every parent as a spliced row, or -(1 + k) for the k-th name
        old_to = np.concatenate((layout.old_at, old_out))
        new_to = np.concatenate((layout.new_at, new_out))
        every = np.concatenate((old_to[old.parent], new_to[new.parent]))
        counts = layout.rows(np.diff(old.parent_start), np.diff(new.parent_start))
        firsts = layout.rows(old.parent_start[:-1], len(old.parent) + new.parent_start[:-1])
        parent = every[ranges(firsts, counts)]
        # The names, numbered in the order first named, row after row
        out = parent < 0
        named = -1 - parent[out]
        distinct, first = np.unique(named, return_index=True)
        order = distinct[np.argsort(first)]
        rank = np.empty(len(names), np.int64)
        rank[order] = np.arange(len(order))
        parent[out] = layout.total + rank[named]
        listed = list(names)
        start = np.concatenate(([0], np.cumsum(counts)))
        return cls(start, parent, [listed[k] for k in order.tolist()])


def _outside_to(
    outside: list[str],
    other: IdRank,
    other_ids: Sequence[str],
    other_at: np.ndarray,
    names: dict[str, int],
) -> np.ndarray | None:
    """Each of ``outside`` (one side's ids outside it) in the spliced pool: the other
    side's record's row, or ``-(1 + k)`` for the k-th of ``names`` (grown here)."""
    row, found = other.find(record_id_hashes(outside), outside, other_ids)
    if row is None:
        return None
    to = np.where(found, other_at[np.where(found, row, 0)] if len(other_at) else 0, 0)
    rest = np.flatnonzero(~found).tolist()
    to[rest] = [-1 - names.setdefault(outside[k], len(names)) for k in rest]
    return to.astype(np.int64)


def labelled_places(
    columns: PoolColumns, old_at: np.ndarray, rows: np.ndarray
) -> np.ndarray | None:
    """Where the old pool's labelled records ``rows`` (its rows, ascending) lie among the
    spliced pool's labelled records (``columns.labelled``), ``old_at`` being the note's
    place of each old row (:data:`SPLICED_FROM`); None when one of them is past the old
    pool or not labelled here."""
    labelled = columns.labelled
    if len(rows) and (int(rows.max()) >= len(old_at) or not len(labelled)):
        return None
    now = old_at[rows]
    places = np.minimum(np.searchsorted(labelled, now), max(len(labelled) - 1, 0))
    return places if np.array_equal(labelled[places], now) else None


def move_rows(store: np.ndarray, places: np.ndarray) -> None:
    """``store``'s first ``len(places)`` rows moved to ``places`` (ascending, each at or
    after its own, within ``store``), in place: stretch by stretch from the last, each one
    slice copy (numpy copies overlapping slices as ``memmove`` does)."""
    shift = places - np.arange(len(places))
    cuts = np.concatenate(([0], np.flatnonzero(np.diff(shift)) + 1, [len(places)]))
    for low, high in zip(cuts[-2::-1], cuts[:0:-1], strict=True):
        by = int(shift[low])
        if by:
            store[low + by : high + by] = store[low:high]
