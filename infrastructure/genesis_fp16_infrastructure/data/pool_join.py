"""A read's file blocks joined into one pool (:func:`collect`): the first record of each
id, in file order (a later record of an id is a duplicate, left out), its labelled
records as row numbers, the repeated strings as codes, every parent as a row number (an
id outside the pool numbered after the pool's rows). Ids are matched by their 64-bit
hashes and every match checked string by string; two ids of one hash match the whole
pool by string instead.

    columns, duplicates = collect(blocks, keep_text=False)
    rows = columns.labelled  # the examples' rows in the pool
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from genesis_fp16_infrastructure.data.file_records import (
    OWN_FEATURES,
    TEXT_FIELDS,
    RecordBlock,
    joined_codes,
)
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns, ranges, same_ids
from genesis_fp16_infrastructure.data.schema import find_ids


def collect(blocks: Sequence[RecordBlock], keep_text: bool) -> tuple[PoolColumns, int]:
    """The pool of ``blocks`` (files in read order) and how many records it left out as
    duplicates (a later record of an id already read). ``keep_text=False``: the change's
    text and files are not kept.

    Ids are matched by their 64-bit hashes (``RecordBlock.id_key``, ``parent_hash``),
    which costs no string hashing, and every match is then checked string by string;
    if two different ids share a hash, the whole pool is matched by string instead."""
    raw_ids = list(chain.from_iterable(b.trajectory_id for b in blocks))
    total = len(raw_ids)
    id_hash = _joined(blocks, "id_key", "<i8").astype(np.int64)
    names = list(chain.from_iterable(b.parent_ids for b in blocks))
    counts = _joined(blocks, "parent_counts", "<i4").astype(np.int64)
    parent_hash = _joined(blocks, "parent_hash", "<i8").astype(np.int64)
    matched = _by_hash(raw_ids, id_hash, names, counts, parent_hash)
    rows, parents = matched if matched is not None else _by_string(raw_ids, names, counts)
    n = len(rows)
    every = n == total
    keep = slice(None) if every else rows  # no duplicates: every record, no copy
    ids = tuple(raw_ids) if every else tuple(map(raw_ids.__getitem__, rows.tolist()))
    success = _joined(blocks, "success", "<i1", keep)
    labelled = np.flatnonzero(success >= 0)
    # Each block's coded columns decoded once, then joined a column at a time.
    by_block = map(RecordBlock.coded, blocks)
    coded = [Coded(*joined_codes(part)).at(keep) for part in zip(*by_block, strict=True)]
    agent, operator, tools, pattern = coded or [Coded.of(())] * 4  # no blocks: empty columns
    columns = PoolColumns(
        ids=ids,
        id_hash=id_hash[keep],
        score=_joined(blocks, "score", "<f8", keep).astype(np.float64),
        scored=_joined(blocks, "scored", "?", keep),
        created=_joined(blocks, "created", "<f8", keep).astype(np.float64),
        timed=_joined(blocks, "timed", "?", keep),
        generation=_joined(blocks, "generation", "<i8", keep).astype(np.int64),
        agent=agent,
        operator=operator,
        tools=tools,
        pattern=pattern,
        **parents,
        own=_joined(blocks, "own", "<f8").reshape(total, len(OWN_FEATURES))[keep],
        text=tuple(_taken(blocks, n, rows, every) for n in TEXT_FIELDS) if keep_text else None,
        labelled=labelled,
        success=success[labelled] == 1,
        label_score=_joined(blocks, "label_score", "<f8", keep).astype(np.float64)[labelled],
        label_scored=_joined(blocks, "label_scored", "?", keep)[labelled],
        outcome=_joined(blocks, "outcome", "<i1", keep).astype(np.int64)[labelled],
        key=_joined(blocks, "key", "<i8", keep).astype(np.int64)[labelled],
        judged=_joined(blocks, "judged", "u8", keep)[labelled],
    )
    return columns, total - n


def _joined(
    blocks: Sequence[RecordBlock], name: str, dtype: str, keep: Any = slice(None)
) -> np.ndarray:
    """A bytes column of every block, as one array (a copy: writable, not the blocks'),
    of the ``keep`` rows."""
    return np.frombuffer(bytearray().join(getattr(b, name) for b in blocks), dtype)[keep]


def _taken(blocks: Sequence[RecordBlock], name: str, rows: np.ndarray, every: bool) -> list[Any]:
    values = list(chain.from_iterable(getattr(b, name) for b in blocks))
    return values if every else list(map(values.__getitem__, rows.tolist()))


def _by_hash(
    raw_ids: list[str],
    id_hash: np.ndarray,
    names: list[str],
    counts: np.ndarray,
    parent_hash: np.ndarray,
) -> tuple[np.ndarray, dict[str, Any]] | None:
    """The kept records (the first of each id, as raw positions in order) and their
    parents (``numbered_parents``' columns), matched by id hash; None if two different ids
    share a hash (two records', or a record's and a parent's, a left-out record's too)."""
    first = _first_by_hash(raw_ids, id_hash)
    if first is None:
        return None
    keepers, known = first
    kept = np.zeros(len(raw_ids), np.bool_)
    kept[keepers] = True
    rows = np.flatnonzero(kept)  # keepers in file order, with no sort
    n = len(rows)
    if not n:  # no records: every parent is outside
        return rows, numbered_parents(names, np.full(len(names), -1, np.int64), counts, rows)
    row_of = (np.cumsum(kept) - 1)[keepers]  # the pool row of known[i]
    # Sorted, the parents' hashes are found in one walk over known, instead of a cache
    # miss each (1.1M parents of a 1M pool: 0.16 s, sort included, instead of 0.25 s).
    where, found = find_ids(known, parent_hash)
    parent = np.where(found, row_of[where], -1)
    hits = np.flatnonzero(found)
    named = names if len(hits) == len(names) else map(names.__getitem__, hits.tolist())
    if not same_ids(named, raw_ids, rows[parent[hits]]):
        return None
    return rows, numbered_parents(names, parent, counts, rows)


def _first_by_hash(raw_ids: list[str], id_hash: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The raw position of the first record of each id hash, in hash order, and those
    hashes (sorted); None unless every later record of a hash has its first one's id."""
    order = np.argsort(id_hash, kind="stable")  # equal hashes in file order
    ordered = id_hash[order]
    starts = np.ones(len(order), np.bool_)
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    keepers = order[starts]
    later = np.flatnonzero(~starts)
    if len(later):
        named = map(raw_ids.__getitem__, order[later].tolist())
        if not same_ids(named, raw_ids, keepers[np.cumsum(starts)[later] - 1]):
            return None
    return keepers, ordered[starts]


def _by_string(
    raw_ids: list[str], names: list[str], counts: np.ndarray
) -> tuple[np.ndarray, dict[str, Any]]:
    """``_by_hash``'s answer, by a dict of every id: exact whatever the hashes."""
    first: dict[str, int] = {}
    deque(map(first.setdefault, raw_ids, range(len(raw_ids))), maxlen=0)  # first id wins
    n = len(first)
    rows = np.fromiter(first.values(), np.int64, n)
    position = np.full(len(raw_ids), -1, np.int64)
    position[rows] = np.arange(n)  # a raw record's row in the pool (first of its id)
    found = np.array(list(map(first.get, names, [-1] * len(names))), np.int64)
    found = found.reshape(len(names))
    parent = np.where(found >= 0, position[np.maximum(found, 0)], -1)
    return rows, numbered_parents(names, parent, counts, rows)


def numbered_parents(
    names: list[str], parent: np.ndarray, counts: np.ndarray, rows: np.ndarray
) -> dict[str, Any]:
    """``PoolColumns``' parent columns, of the kept ``rows`` (raw positions) alone:
    ``parent`` holds each raw record's parents' rows, -1 for an id outside the pool,
    which becomes ``n + k`` for the k-th such id first named."""
    n = len(rows)
    if n != len(counts):  # records left out as duplicates: their parents go too
        picked = ranges((np.cumsum(counts) - counts)[rows], counts[rows])
        names = list(map(names.__getitem__, picked.tolist()))
        parent, counts = parent[picked], counts[rows]
    outside: dict[str, int] = {}
    if (parent < 0).any():
        for k in np.flatnonzero(parent < 0).tolist():
            parent[k] = n + outside.setdefault(names[k], len(outside))
    start = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    return {"parent_start": start, "parent": parent, "outside": list(outside)}
