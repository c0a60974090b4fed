"""A joined pool grown by files read after it, joining only their records (issue 90).

A daemon's later run reads the pool it read before plus a new file or two. Joining every
file's records again (:func:`~genesis_fp16_infrastructure.data.pool_join.collect`:
every id matched, every parent matched and checked by string) cost 0.28 s at 100,000
records for 1,000 new. :func:`extended` joins the new files' records among themselves and
sets them after the old pool's rows: the same pool ``collect`` makes of all the files,
array for array, because the old files come first in read order:

- an old record stays where it was (the first record of an id wins, and the old files'
  records come before every new one); a new record whose id the old pool holds is a
  duplicate, left out;
- a parent is a row wherever its id is a record now: an old record's parent that was
  outside the old pool is the new record's row once a new file holds its id;
- the ids outside the pool are numbered in the order first named, row after row: the old
  pool's that are still outside, then the new rows';
- a coded column's values are in first-seen order over every record read, left-out
  duplicates too: the old pool's values, then the new files' unseen ones.

Each column of the grown pool is the old one with the new rows written after it, into
room its buffer kept for them (``pool_columns.appended``: read-only arrays, the whole
column copied only when the room runs out, or when the old pool's parents name ids
outside it, which are numbered past its rows); what still grows with the pool is the ids
list (a pointer each) and one hash per id outside the old pool (usually few). The old
pool's ids are found by its id ranking (``PoolColumns.id_rank``: its id hashes sorted),
which a kept pool takes along, checked before use; the grown pool's is the old one with
the new hashes inserted (the new ones alone sorted): a later growth starts from it
again. The grown pool notes the old one's token (``GROWN_FROM``): what was worked out of
the old pool's rows and kept beside it (a judged run's listing) is grown by the new rows
alone. Its labelled ids (``example_ids``) are worked out only when asked (a walk of every
id: ~2 ms at 100,000 records). Ids are matched by their 64-bit hashes and every match
checked by string; where two different ids share a hash, :func:`extended` says None and
the caller joins the whole pool, which matches by string.

    columns, left_out = extended(kept.columns, new_blocks) or collect(every_block, False)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from genesis_fp16_infrastructure.data.file_records import RecordBlock, joined_codes
from genesis_fp16_infrastructure.data.pool_columns import (
    GROWN_FROM,
    Coded,
    IdRank,
    PoolColumns,
    appended,
    derived,
    ranges,
    set_derived,
)
from genesis_fp16_infrastructure.data.pool_join import collect
from genesis_fp16_infrastructure.data.schema import record_id_hashes


def extended(old: PoolColumns, blocks: Sequence[RecordBlock]) -> tuple[PoolColumns, int] | None:
    """``old`` (a slim read's pool) with the records of ``blocks`` (files after its own,
    in read order) joined on, and how many of those it left out as duplicates; None when
    an id hash is shared by two different ids (join the whole pool instead)."""
    if old.text is not None:
        raise ValueError("extended: a slim pool only (read with keep_text=False)")
    new, within = collect(blocks, keep_text=False)  # the new records among themselves
    old_ids = _rank_of(old)
    new_ids = IdRank.of(new.id_hash)
    if old_ids is None or new_ids is None:
        return None  # a hash shared within a pool: it was matched by string
    old_row, known = old_ids.find(new.id_hash, new.ids, old.ids)
    if old_row is None:
        return None
    fresh = np.flatnonzero(~known)  # the new records kept, in read order
    n, total = len(old), len(old) + len(fresh)
    placed = np.empty(len(new), np.int64)  # each new record's pool row
    placed[fresh] = n + np.arange(len(fresh))
    placed[known] = old_row[known]
    outside = _Outside.of(old, new, fresh, placed, new_ids, old_ids)
    if outside is None:
        return None
    start = new.parent_start
    picked = ranges(start[fresh], start[fresh + 1] - start[fresh])
    new_parents = outside.new_parents(new.parent[picked], placed, total)
    if old.outside:  # numbered past the pool's rows: renumbered, so copied
        parent = np.concatenate([outside.old_parents(old.parent, n, total), new_parents])
    else:  # every old parent a row, unchanged: the new rows' appended
        parent = appended(old.parent, new_parents)
    counts = np.diff(start)[fresh]
    parent_start = appended(old.parent_start, old.parent_start[-1] + np.cumsum(counts))
    kept_label = ~known[new.labelled]  # the new labelled records kept
    labelled_new = new.labelled[kept_label]

    def rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return appended(a, b[fresh])

    def labels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return appended(a, b[kept_label])

    columns = PoolColumns(
        ids=old.ids + tuple(map(new.ids.__getitem__, fresh.tolist())),
        id_hash=rows(old.id_hash, new.id_hash),
        score=rows(old.score, new.score),
        scored=rows(old.scored, new.scored),
        created=rows(old.created, new.created),
        timed=rows(old.timed, new.timed),
        generation=rows(old.generation, new.generation),
        agent=_coded(old.agent, new.agent, fresh),
        operator=_coded(old.operator, new.operator, fresh),
        tools=_coded(old.tools, new.tools, fresh),
        pattern=_coded(old.pattern, new.pattern, fresh),
        parent_start=parent_start,
        parent=parent,
        outside=outside.names,
        own=rows(old.own, new.own),
        text=None,
        labelled=appended(old.labelled, placed[labelled_new]),
        success=labels(old.success, new.success),
        label_score=labels(old.label_score, new.label_score),
        label_scored=labels(old.label_scored, new.label_scored),
        outcome=labels(old.outcome, new.outcome),
        key=labels(old.key, new.key),
        judged=labels(old.judged, new.judged),
    )
    # What the old pool worked out, grown by the new rows alone: the next growth's too;
    # and which pool its first rows are.
    set_derived(
        columns,
        {"id_rank": old_ids.grown(new.id_hash[fresh], n), GROWN_FROM: old.token},
    )
    return columns, within + int(known.sum())


def _rank_of(old: PoolColumns) -> IdRank | None:
    """``old``'s id ranking: the one it took along (a grown or kept pool's), checked
    against its id hashes first, else sorted now."""
    kept = derived(old).get("id_rank")
    if kept is not None and not kept.agrees(old.id_hash):
        del vars(old)["id_rank"]  # not this pool's: worked out again
    return old.id_rank


class _Outside:
    """Where the ids outside the old pool or the new records' pool go in the joined one."""

    def __init__(self, old_to: np.ndarray, new_to: np.ndarray, names: list[str]) -> None:
        # A pool row, or -(1 + k) for the joined pool's k-th outside id.
        self.old_to, self.new_to, self.names = old_to, new_to, names

    @classmethod
    def of(
        cls,
        old: PoolColumns,
        new: PoolColumns,
        fresh: np.ndarray,
        placed: np.ndarray,
        new_ids: IdRank,
        old_ids: IdRank,
    ) -> _Outside | None:
        """None when a hash found names another id."""
        # The old pool's outside ids that a new record kept now holds become its row.
        old_hash = record_id_hashes(old.outside)
        row, found = new_ids.find(old_hash, old.outside, new.ids)
        if row is None:
            return None
        old_to = np.full(len(old.outside), -1, np.int64)
        old_to[found] = placed[row[found]]
        still = np.flatnonzero(~found)
        old_to[still] = -(1 + np.arange(len(still)))
        names = [old.outside[k] for k in still.tolist()]
        # The new records' outside ids: an old record's row, an old outside id, or new.
        new_hash = record_id_hashes(new.outside)
        row, found = old_ids.find(new_hash, new.outside, old.ids)
        if row is None:
            return None
        new_to = np.where(found, row, 0)
        if len(still):
            remaining = IdRank.of(old_hash[still])
            if remaining is None:
                return None  # two outside ids of one hash
            at, same = remaining.find(new_hash, new.outside, names)
            if at is None:
                return None
            same &= ~found
            new_to[same] = -(1 + at[same])
            found |= same
        # The rest, numbered in the order the kept new rows first name them.
        start = new.parent_start
        named = new.parent[ranges(start[fresh], start[fresh + 1] - start[fresh])]
        firsts = named[named >= len(new)] - len(new)
        firsts = firsts[~found[firsts]]
        unique, first_at = np.unique(firsts, return_index=True)
        order = unique[np.argsort(first_at)]
        new_to[order] = -(1 + len(names) + np.arange(len(order)))
        names.extend(new.outside[k] for k in order.tolist())
        return cls(old_to, new_to, names)

    def old_parents(self, parent: np.ndarray, n: int, total: int) -> np.ndarray:
        """The old rows' parents in the joined pool (``n`` old rows, ``total`` rows)."""
        out = parent.copy()
        beyond = parent >= n
        out[beyond] = self._numbered(self.old_to[parent[beyond] - n], total)
        return out

    def new_parents(self, parent: np.ndarray, placed: np.ndarray, total: int) -> np.ndarray:
        """The kept new rows' parents (as the new records' pool numbered them)."""
        q = len(placed)
        out = np.empty(len(parent), np.int64)
        inside = parent < q
        out[inside] = placed[parent[inside]]
        out[~inside] = self._numbered(self.new_to[parent[~inside] - q], total)
        return out

    @staticmethod
    def _numbered(to: np.ndarray, total: int) -> np.ndarray:
        """A row as it is; outside id ``k`` (``-(1 + k)``) as ``total + k``."""
        return np.where(to >= 0, to, total - 1 - to)


def _coded(old: Coded, new: Coded, fresh: np.ndarray) -> Coded:
    """The old rows' column then the kept new rows', its values in first-seen order.
    The old values (distinct) come first, in their order: the old codes stand as they
    are, and only the new records' codes are mapped (not a gather over every row)."""
    nothing = np.zeros(0, np.int64)
    codes, values = joined_codes([(nothing, old.values), (new.codes, new.values)])
    return Coded(appended(old.codes, codes[fresh]), values)
