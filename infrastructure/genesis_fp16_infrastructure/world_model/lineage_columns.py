"""The lineage features of a whole pool at once, in numpy columns (issue 36).

:func:`~genesis_fp16_infrastructure.world_model.features.numeric_columns` once worked out
an attempt's ``LINEAGE_FEATURES`` one record at a time (a walk over the pool's objects):
18 µs a record, 18 s of every run on a million-record pool. :func:`lineage_columns` gives
the same numbers, bit for bit, from index arrays:

* every id (the pool's records, then the ids their parents name outside it) gets an
  integer; the pool's scores, operators, creation times, parent lists and child lists
  become arrays once per :class:`~genesis_fp16_infrastructure.data.lineage.Pool`
  (:func:`pool_index`, kept while the pool lives);
* a mean is a sum taken in the record-at-a-time order, one position at a time across all
  attempts (:func:`_ordered_means`), so that it rounds as Python's ``sum`` did; a
  ``log1p`` of a count is looked up from ``math.log1p``;
* depths are worked out a generation at a time, each record once all its parents are
  (Kahn's order); where parent links loop, a record on the loop or below it counts its
  parents there as roots (the walk's depths there depended on which record it was asked
  first, so had no one answer);
* attempts whose sibling candidates would be too many to hold at once are taken a part
  at a time (``MAX_SIBLING_PAIRS``), each attempt's numbers its own either way.

A few of a read's own records (the new ones of a pool whose other records' numbers are
kept: ``world_model.kept_numeric``) need no index of the whole pool: :func:`rows_index`
lists their parents' children alone and works out only the depths it is not given.

A few candidates against a large pool (the prediction API) index the whole pool once
(1.8 s of process time on a million records; the walk's first call, which built every
record's child list, took 1.7 s); later calls on the same pool reuse the index.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from genesis_fp16_infrastructure.data.lineage import MAX_DEPTH, Pool
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, ranges
from genesis_fp16_infrastructure.data.pool_join import numbered_parents
from genesis_fp16_infrastructure.data.schema import OPERATORS, SUCCESS_THRESHOLD, AttemptInput

# Sibling candidates (an attempt, a parent's child) held at once: a generated pool has
# ~2.5 per attempt; a parent with thousands of children would make millions, taken a
# part of the attempts at a time (one attempt at least, however many it has).
MAX_SIBLING_PAIRS = 4_000_000
_UNKNOWN = 0.5  # a mean with nothing to average (no known parent score: the middle, flagged)
_OPERATOR_CODE = {op: i for i, op in enumerate(OPERATORS)}
_indexes: weakref.WeakKeyDictionary[Pool, PoolIndex] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PoolIndex:
    """A pool as arrays. Ids ``0..records-1`` are the pool's records in its order; the
    ids after them are parents named by a record but absent from the pool."""

    ids: dict[str, int]  # empty in an index of a read's columns (asked by row)
    records: int
    size: int  # ids in all: the records, then the parents named outside the pool
    score: np.ndarray  # float64 per record, nan where unknown
    scored: np.ndarray  # bool per record
    created: np.ndarray  # float64 per record, nan where unknown
    operator: np.ndarray  # int64 per record, len(OPERATORS) for another operator
    parent_start: np.ndarray  # int64, records + 1: record r's parents are
    parents: np.ndarray  # parents[parent_start[r]:parent_start[r + 1]], in its order
    child_start: np.ndarray  # int64, size + 1: id i's children (pool order, once per
    children: np.ndarray  # naming) are children[child_start[i]:child_start[i + 1]]
    depth: np.ndarray  # int64 per record: 0 without parents in the pool, else 1 + deepest
    looped: bool = False  # some record's depth came from the loop rule (:func:`_depths`)


def pool_index(pool: Pool) -> PoolIndex:
    """The pool's arrays, built once per pool (kept while the pool lives)."""
    if pool not in _indexes:
        _indexes[pool] = _build_index(pool)
    return _indexes[pool]


def _build_index(pool: Pool) -> PoolIndex:
    entries = list(pool.entries.values())
    n = len(entries)
    ids = dict(zip(pool.entries, range(n), strict=True))
    parent_lists = [e.parents for e in entries]
    names = list(chain.from_iterable(parent_lists))
    counts = np.fromiter(map(len, parent_lists), np.int64, n)
    linked = numbered_parents(names, _numbered(ids, names), counts, np.arange(n))
    ids |= {name: k for k, name in enumerate(linked["outside"], n)}  # parents outside
    scores = [e.score for e in entries]
    score = np.array(scores, dtype=np.float64).reshape(n)  # None: nan
    scored = np.fromiter((s is not None for s in scores), np.bool_, n)
    created = np.array([e.created for e in entries], dtype=np.float64).reshape(n)
    other = len(OPERATORS)
    codes = map(_OPERATOR_CODE.get, [e.operator for e in entries], repeat(other))
    operator = np.fromiter(codes, np.int64, n)
    return _index(ids, len(ids), score, scored, created, operator, counts, linked["parent"])


def columns_index(columns: PoolColumns) -> PoolIndex:
    """The index of a read's columns (``data.pool_columns``): the same arrays as
    :func:`pool_index` of its pool, without the pool's objects; its rows are the
    columns' rows (``ids`` is left empty)."""
    return _index(
        {},
        len(columns) + len(columns.outside),
        columns.score,
        columns.scored,
        columns.created,
        _operator_codes(columns),
        np.diff(columns.parent_start),
        columns.parent,
    )


def _index(
    ids: dict[str, int],
    size: int,
    score: np.ndarray,
    scored: np.ndarray,
    created: np.ndarray,
    operator: np.ndarray,
    counts: np.ndarray,
    parents: np.ndarray,
) -> PoolIndex:
    """The index of ``len(score)`` records whose parents (numbered: records first, then
    the ``size - records`` ids outside) are ``parents``, ``counts`` per record."""
    n = len(score)
    parent_start = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=parent_start[1:])
    child = np.repeat(np.arange(n, dtype=np.int64), counts)
    order = np.argsort(parents, kind="stable")  # each parent's children in pool order
    child_start = np.zeros(size + 1, np.int64)
    np.cumsum(np.bincount(parents, minlength=size), out=child_start[1:])
    depth, looped = _depths(n, child, parents)
    return PoolIndex(
        ids, n, size, score, scored, created, operator, parent_start, parents, child_start,
        child[order], depth, looped,
    )  # fmt: skip


def rows_index(columns: PoolColumns, rows: np.ndarray, depth: np.ndarray) -> PoolIndex | None:
    """An index of a read's columns good for :func:`lineage_rows` of ``rows`` alone, built
    in proportion to them rather than to the pool: the child lists of their parents only,
    and the depths ``depth`` gives (int64 per record, -1 where unknown) with the unknown
    ones worked out from their parents'. None when an unknown depth would come from the
    loop rule (:func:`_depths`): the whole pool's index is then needed (:func:`columns_index`).
    The known depths must be those :func:`columns_index` gives, from an index that did
    not loop."""
    n = len(columns)
    full = _known_depths(columns.parent_start, columns.parent, depth)
    if full is None:
        return None
    size = n + len(columns.outside)
    start, parents = columns.parent_start, columns.parent
    wanted = np.zeros(size, np.bool_)
    wanted[parents[ranges(start[rows], start[rows + 1] - start[rows])]] = True
    slot = np.flatnonzero(wanted[parents])  # each naming of a wanted parent, pool order
    owner = np.searchsorted(start, slot, "right") - 1
    named = parents[slot]
    order = np.argsort(named, kind="stable")  # each parent's children in pool order
    child_start = np.zeros(size + 1, np.int64)
    np.cumsum(np.bincount(named, minlength=size), out=child_start[1:])
    return PoolIndex(
        {}, n, size, columns.score, columns.scored, columns.created, _operator_codes(columns),
        start, parents, child_start, owner[order], full,
    )  # fmt: skip


def _operator_codes(columns: PoolColumns) -> np.ndarray:
    """Each record's operator as its place in ``OPERATORS`` (``len(OPERATORS)``: another)."""
    other = len(OPERATORS)
    table = np.array(
        [_OPERATOR_CODE.get(op, other) for op in columns.operator.values], dtype=np.int64
    )
    return table[columns.operator.codes] if len(columns) else np.zeros(0, np.int64)


def _known_depths(start: np.ndarray, parents: np.ndarray, depth: np.ndarray) -> np.ndarray | None:
    """``depth`` (-1 where unknown) with the unknown depths worked out from their parents'
    (Kahn's order over the unknown records' parent links alone); None when some of them
    are on a loop of parent links, or below one."""
    n = len(depth)
    unknown = np.flatnonzero(depth < 0)
    counts = start[unknown + 1] - start[unknown]
    child = np.repeat(unknown, counts)
    parent = parents[ranges(start[unknown], counts)]
    inside = parent < n
    child, parent = child[inside], parent[inside]
    out = depth.copy()
    out[unknown] = 0
    known = depth[parent] >= 0  # a capped parent's depth + 1, capped: as the uncapped one's
    np.maximum.at(out, child[known], depth[parent[known]] + 1)
    # Kahn's order over the links between unknown records, numbered among the records
    # they link (a later run's few thousand): arrays of the pool's size cost 1 ms a run.
    child, parent = child[~known], parent[~known]
    linked = np.unique(np.concatenate((child, parent)))
    own = out[linked]
    child, parent = np.searchsorted(linked, child), np.searchsorted(linked, parent)
    if _kahn(len(linked), child, parent, own).any():
        return None
    out[linked] = own
    return np.minimum(out, MAX_DEPTH, out=out)


def _depths(n: int, child: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, bool]:
    """Each record's depth: the longest chain of parents inside the pool, capped at
    ``MAX_DEPTH``, and whether some record was never reached. Records are taken a
    generation at a time, each once all its parents are (Kahn's order), so the work is
    one visit per parent link. Those never reached (on a loop of parent links, or below
    one) count their parents that are never reached either as roots: 1 + the deepest of
    their other parents, at least 1."""
    inside = parent < n
    child, parent = child[inside], parent[inside]
    depth = np.zeros(n, np.int64)
    waiting = _kahn(n, child, parent, depth)
    depth[waiting > 0] = np.maximum(depth[waiting > 0], 1)
    return np.minimum(depth, MAX_DEPTH), bool((waiting > 0).any())


def _kahn(n: int, child: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``depth`` raised in place along the links ``parent`` -> ``child`` (records of the
    pool), each child once all its parents among the links are; each record's links never
    taken (above 0: on a loop of them, or below one)."""
    waiting = np.bincount(child, minlength=n)  # parent links not yet taken, per record
    order = np.argsort(parent, kind="stable")
    kids = child[order]
    kid_start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(parent, minlength=n), out=kid_start[1:])
    # The first ready are the parents of a link waiting on none: a record of no link
    # raises no depth, and a later run's few links among 100,000 records took 16 ms
    # walking every one of them (parent[order] is the parents sorted).
    parents = parent[order]
    parents = parents[_firsts(parents)] if len(parents) else parents
    ready = parents[waiting[parents] == 0]
    while len(ready):
        counts = kid_start[ready + 1] - kid_start[ready]
        reached = kids[ranges(kid_start[ready], counts)]
        np.maximum.at(depth, reached, np.repeat(depth[ready] + 1, counts))
        reached = np.sort(reached)
        heads = np.flatnonzero(_firsts(reached))
        links = np.diff(np.r_[heads, len(reached)])
        reached = reached[heads]
        waiting[reached] -= links
        ready = reached[waiting[reached] == 0]
    return waiting


def lineage_columns(attempts: Sequence[AttemptInput], pool: Pool) -> np.ndarray:
    """The ``LINEAGE_FEATURES`` of ``attempts`` in ``pool``: a ``(len(attempts), 25)``
    float64 matrix."""
    index = pool_index(pool)
    m = len(attempts)
    ids = index.ids
    me = _numbered(ids, [a.trajectory_id for a in attempts])
    parent_lists = [a.parent_ids for a in attempts]
    slot_parent = _numbered(ids, list(chain.from_iterable(parent_lists)))
    slot_counts = np.fromiter(map(len, parent_lists), np.int64, m)
    created = np.array([a.created for a in attempts], dtype=np.float64).reshape(m)
    return np.stack(_columns(index, me, slot_parent, slot_counts, created), axis=1)


def lineage_rows(index: PoolIndex, rows: np.ndarray) -> list[np.ndarray]:
    """:func:`lineage_columns` of the index's own records ``rows`` (a read's examples,
    by row of its columns), as one array per feature: the same numbers, with no id
    looked up."""
    counts = index.parent_start[rows + 1] - index.parent_start[rows]
    parents = index.parents[ranges(index.parent_start[rows], counts)]
    return _columns(index, rows, parents, counts, index.created[rows])


def _columns(
    index: PoolIndex, me: np.ndarray, slot_parent: np.ndarray, slot_counts: np.ndarray,
    created: np.ndarray,
) -> list[np.ndarray]:  # fmt: skip
    """The attempts' LINEAGE_FEATURES, a column each: each attempt is ``me`` (its id's
    number, -1 outside the pool), with ``slot_counts`` parents, back to back in
    ``slot_parent``."""
    m = len(me)
    slot_owner = np.repeat(np.arange(m, dtype=np.int64), slot_counts)
    inside = (slot_parent >= 0) & (slot_parent < index.records)  # the parents in the pool
    owner, parent = slot_owner[inside], slot_parent[inside]
    other = parent != me[owner]  # but the attempt itself: the grandparents' and operators'
    others = owner[other], parent[other]
    return [
        *_parent_scores(index, owner, parent, m),
        _log1p(_depth(index, owner, parent, slot_counts, m)),
        *_grandparents(index, me, *others, m),
        *_siblings(index, me, slot_owner, slot_parent, created),
        *_operator_shares(index, *others, m),
    ]


def _parent_scores(
    index: PoolIndex, owner: np.ndarray, parent: np.ndarray, m: int
) -> list[np.ndarray]:
    """The known scores of the parents ``parent`` (in the pool): mean, max, min (0.5
    when none), and whether any."""
    known = index.scored[parent]
    owner, values = owner[known], index.score[parent[known]]
    mean, counts = _ordered_means(owner, values, m)
    heads = np.flatnonzero(_firsts(owner))
    high = np.full(m, _UNKNOWN)
    low = np.full(m, _UNKNOWN)
    if len(owner):
        high[owner[heads]] = np.maximum.reduceat(values, heads)
        low[owner[heads]] = np.minimum.reduceat(values, heads)
    return [mean, high, low, (counts > 0).astype(np.float64)]


def _depth(
    index: PoolIndex, owner: np.ndarray, parent: np.ndarray, slots: np.ndarray, m: int
) -> np.ndarray:
    """0 without parents (``slots``); else 1 + the deepest of the parents ``parent`` (in
    the pool; 0 for one outside)."""
    deepest = np.zeros(m, np.int64)
    np.maximum.at(deepest, owner, index.depth[parent])
    return np.where(slots > 0, deepest + 1, 0)


def _grandparents(
    index: PoolIndex, me: np.ndarray, owner: np.ndarray, parent: np.ndarray, m: int
) -> list[np.ndarray]:
    """The mean of the distinct grandparents' known scores (sorted, then summed), 0.5
    when none, and whether any, of the parents ``parent`` (the attempt itself aside)."""
    counts = index.parent_start[parent + 1] - index.parent_start[parent]
    grand_owner = np.repeat(owner, counts)
    grand = index.parents[ranges(index.parent_start[parent], counts)]
    keep = (grand < index.records) & (grand != me[grand_owner])
    keep[keep] = index.scored[grand[keep]]
    pairs = np.sort(grand_owner[keep] * index.size + grand[keep])
    pairs = pairs[_firsts(pairs)]  # each grandparent once (np.unique hashes: 3x slower)
    grand_owner, grand = pairs // index.size, pairs % index.size
    values = index.score[grand]
    order = np.lexsort((values, grand_owner))
    mean, counts = _ordered_means(grand_owner[order], values[order], m)
    return [mean, (counts > 0).astype(np.float64)]


def _siblings(
    index: PoolIndex, me: np.ndarray, owner: np.ndarray, parent: np.ndarray, created: np.ndarray
) -> list[np.ndarray]:
    """log1p of the number of siblings (the parents' other children with a score and a
    creation time, earlier than the attempt, each once), their mean score (in the order
    met, 0.5 when none) and their share of successes; ``owner`` sorted. Worked out for a
    part of the attempts at a time, their sibling candidates up to ``MAX_SIBLING_PAIRS``."""
    m = len(me)
    timed = ~np.isnan(created[owner]) & (parent >= 0)
    owner, parent = owner[timed], parent[timed]
    counts = index.child_start[parent + 1] - index.child_start[parent]
    pairs = np.bincount(owner, weights=counts, minlength=m).cumsum()  # up to each attempt
    out = [np.zeros(m), np.full(m, _UNKNOWN), np.zeros(m)]
    start = 0
    while start < m:
        before = pairs[start - 1] if start else 0.0
        end = max(start + 1, int(np.searchsorted(pairs, before + MAX_SIBLING_PAIRS, "right")))
        lo, hi = np.searchsorted(owner, [start, end])
        part = _some_siblings(
            index, me[start:end], owner[lo:hi] - start, parent[lo:hi], counts[lo:hi],
            created[start:end],
        )  # fmt: skip
        for column, values in zip(out, part, strict=True):
            column[start:end] = values
        start = end
    return out


def _some_siblings(
    index: PoolIndex, me: np.ndarray, owner: np.ndarray, parent: np.ndarray, counts: np.ndarray,
    created: np.ndarray,
) -> list[np.ndarray]:  # fmt: skip
    """:func:`_siblings` of the attempts ``me``, whose parents ``parent`` have ``counts``
    children."""
    m, total = len(me), int(counts.sum())
    sib_owner = np.repeat(owner, counts)
    sib = index.children[ranges(index.child_start[parent], counts)]
    met = np.arange(total, dtype=np.int64)  # each attempt's parents, their children in pool order
    keep = (sib != me[sib_owner]) & index.scored[sib] & ~np.isnan(index.created[sib])
    sib_owner, sib, met = sib_owner[keep], sib[keep], met[keep]
    # Each sibling once, where first met: sorted by (attempt, sibling, order met).
    order = np.lexsort((met, sib, sib_owner))
    sib_owner, sib, met = sib_owner[order], sib[order], met[order]
    first = _firsts(sib_owner, sib)
    sib_owner, sib, met = sib_owner[first], sib[first], met[first]
    earlier = index.created[sib] < created[sib_owner]
    sib_owner, sib, met = sib_owner[earlier], sib[earlier], met[earlier]
    order = np.lexsort((met, sib_owner))
    sib_owner, values = sib_owner[order], index.score[sib[order]]
    mean, counts = _ordered_means(sib_owner, values, m)
    wins = np.bincount(sib_owner[values >= SUCCESS_THRESHOLD], minlength=m)
    have = counts > 0
    share = np.zeros(m)
    share[have] = wins[have] / counts[have]
    return [_log1p(counts), mean, share]


def _operator_shares(
    index: PoolIndex, owner: np.ndarray, parent: np.ndarray, m: int
) -> list[np.ndarray]:
    """Each operator's share among the operators of the parents ``parent`` (in the pool,
    the attempt itself aside); 0.0 each without such parents."""
    code = index.operator[parent]
    width = len(OPERATORS) + 1
    tally = np.bincount(owner * width + code, minlength=m * width).reshape(m, width)
    counts = tally.sum(axis=1)
    have = counts > 0
    out = []
    for op in range(len(OPERATORS)):
        share = np.zeros(m)
        share[have] = tally[have, op] / counts[have]
        out.append(share)
    return out


def _numbered(ids: dict[str, int], names: list[str]) -> np.ndarray:
    """Each name's integer: looked up in C; a name not in ``ids`` is -1 (a parent outside
    the pool gets its integer from ``data.pool_join.numbered_parents``, as a read's do)."""
    found = list(map(ids.get, names, repeat(-1)))
    return np.array(found, dtype=np.int64).reshape(len(names))


def _firsts(*keys: np.ndarray) -> np.ndarray:
    """True where a row starts a run of equal keys (the rows sorted by them)."""
    first = np.ones(len(keys[0]), np.bool_)
    if len(first) > 1:
        first[1:] = np.any([key[1:] != key[:-1] for key in keys], axis=0)
    return first


def _ordered_means(owner: np.ndarray, values: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Each owner's mean of its values (``owner`` sorted, values in order; 0.5 with none),
    their sum added left to right, as Python's ``sum`` adds (numpy's own sum pairs its
    terms up), and its count. One pass per position: as many as the longest list."""
    counts = np.bincount(owner, minlength=m)
    sums = np.zeros(m)
    mean = np.full(m, _UNKNOWN)
    if not len(owner):
        return mean, counts
    starts = np.cumsum(counts) - counts
    longest_first = np.argsort(-counts, kind="stable")
    ranked = counts[longest_first]
    for position in range(int(ranked[0])):
        rows = longest_first[: int(np.searchsorted(-ranked, -position, side="left"))]
        sums[rows] += values[starts[rows] + position]
    have = counts > 0
    mean[have] = sums[have] / counts[have]
    return mean, counts


def _log1p(counts: np.ndarray) -> np.ndarray:
    """``math.log1p`` of small non-negative integers, looked up (numpy's log1p may round
    its last bit otherwise than the C library's on some CPUs)."""
    table = np.array([math.log1p(k) for k in range(int(counts.max(initial=0)) + 1)])
    return table[counts]
