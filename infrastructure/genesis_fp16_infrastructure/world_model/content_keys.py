"""A pool record's content key, and a pool's keys taken from a kept pool's where the
record is the same bits (issue 90: a kept record is not hashed again).

A record's key (:func:`content_keys`, uint64) hashes its id, score, time, operator,
parents (their ids, in order) and, when labelled, its ``labelled_hash`` (its label and
every input): ``world_model.kept_numeric`` reuses a record's numeric row only under the
same key. A resident run process keeps a pool's keys with the columns they were hashed
from (:class:`KeyInputs`); the next pool's (:func:`keyed`) compares those columns with
its own, byte for byte (a record at a time where a column differs), and hashes only the
records that differ and the new ones. The comparison is the check: a key is never taken
for a record whose columns are not the ones it was hashed from.

    keys = keyed(columns, parent_hashes(columns, kept), kept)  # kept: KeptKeys, or None

A pool grown at its end (``data.pool_extend``) hands its old rows' columns on in the same
memory: the kept keys and parent hashes are then grown by the new records' alone, written
after the kept ones (``pool_columns.appended``), no pool-sized array made or compared.

Keys are found sorted (:func:`search_sorted`); a kept pool's are kept sorted as it grows
(``world_model.sorted_growth``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, appended
from genesis_fp16_infrastructure.data.schema import id_digest, record_id_hashes
from genesis_fp16_infrastructure.world_model.lineage_columns import ranges

_MIX = np.uint64(0x9E3779B97F4A7C15)


class KeyInputs(NamedTuple):
    """The columns a pool's content keys were worked out from (:func:`content_keys`),
    beside ``Kept``'s id hashes, parents and labelled rows: the next pool's records whose
    inputs are these very bits keep their keys, with no hash worked out again. The pool's
    own arrays (as ``Kept``'s are): the record cache hands each read arrays of its own."""

    score: np.ndarray  # uint64: the float64 bits
    scored: np.ndarray
    created: np.ndarray  # uint64: the float64 bits
    operator: np.ndarray  # each record's operator code
    operators: np.ndarray  # each code's value hashed (uint64)
    labelled_key: np.ndarray  # uint64 per labelled record: ``columns.key``
    parent: np.ndarray  # each parent named, numbered (``columns.parent``)
    outside: int  # how many ids the parents named outside the pool

    @classmethod
    def of(cls, columns: PoolColumns) -> KeyInputs:
        return cls(
            columns.score.view(np.uint64),
            columns.scored,
            columns.created.view(np.uint64),
            columns.operator.codes,
            _operator_hashes(columns),
            columns.key.view(np.uint64),
            columns.parent,
            len(columns.outside),
        )


class KeptKeys(NamedTuple):
    """A kept pool's keys, what they were hashed from, and its records' id hashes,
    parents (``parent_start``, ``parent_hash``: :func:`parent_hashes`) and labelled rows."""

    key: np.ndarray
    id_hash: np.ndarray
    parent_start: np.ndarray
    parent_hash: np.ndarray
    labelled: np.ndarray
    inputs: KeyInputs


def content_keys(
    columns: PoolColumns, slots: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """Each pool record's key (uint64): its id, score, time, operator, parents' ids in
    order (``slots``: :func:`parent_hashes`) and, when labelled, its ``labelled_hash``
    (label and every input); ``rows``: those records' alone (ascending), the same keys."""
    start, labelled = columns.parent_start, columns.labelled
    if rows is None:
        named, first, at, own = slots, start, labelled, columns.key
    else:  # the rows' parents alone, as a pool of these rows would list them
        counts = start[rows + 1] - start[rows]
        named = slots[ranges(start[rows], counts)]
        first = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts, out=first[1:])
        place = np.minimum(np.searchsorted(labelled, rows), max(len(labelled) - 1, 0))
        found = labelled[place] == rows if len(labelled) else np.zeros(len(rows), np.bool_)
        at, own = np.flatnonzero(found), columns.key[place[found]]
    every = slice(None) if rows is None else rows
    operators = _operator_hashes(columns)
    codes = columns.operator.codes[every]
    key = _fmix(columns.id_hash[every].view(np.uint64))
    parts = (
        columns.score[every].view(np.uint64),
        columns.scored[every].astype(np.uint64),
        columns.created[every].view(np.uint64),
        operators[codes] if len(operators) else np.zeros(len(key), np.uint64),
        _row_sums(first, _slot_keys(first, named)),
    )
    for part in parts:
        key = _fmix(key ^ part)
    key[at] = _fmix(key[at] ^ (own.view(np.uint64) ^ _MIX))
    return key


def _operator_hashes(columns: PoolColumns) -> np.ndarray:
    """Each of the pool's operator values hashed (uint64), by code."""
    return np.frombuffer(
        b"".join(id_digest(str(op)) for op in columns.operator.values) or b"", "<u8"
    )


def keyed(columns: PoolColumns, slots: np.ndarray, kept: KeptKeys | None) -> np.ndarray:
    """:func:`content_keys` of the pool: the kept pool's keys for its records whose inputs
    are still the very bits they were keyed from (``kept.inputs``: checked column by
    column, a record at a time where a column differs), the rest (new, relabelled, edited)
    keyed now. A pool whose kept records' parents or labelled rows moved is keyed whole."""
    if kept is None:
        return content_keys(columns, slots)
    inputs = kept.inputs
    n, n_labelled = len(kept.key), len(kept.labelled)
    labelled = columns.labelled
    now = _operator_hashes(columns)
    if not (
        len(columns) >= n
        and same_bits(columns.parent_start[: n + 1], kept.parent_start)
        and same_bits(slots[: len(kept.parent_hash)], kept.parent_hash)
        and same_bits(labelled[:n_labelled], kept.labelled)
        and (len(labelled) == n_labelled or bool(labelled[n_labelled] >= n))
        and len(now) >= len(inputs.operators)
    ):
        return content_keys(columns, slots)
    pairs = (
        (columns.id_hash[:n], kept.id_hash),
        (columns.score[:n].view(np.uint64), inputs.score),
        (columns.scored[:n], inputs.scored),
        (columns.created[:n].view(np.uint64), inputs.created),
    )
    changed = np.zeros(n, np.bool_)
    for now_column, then in pairs:  # one comparison of the bytes; a record's where it fails
        if not same_bits(now_column, then):
            changed |= now_column != then
    codes = columns.operator.codes[:n]
    if not (
        same_bits(codes, inputs.operator)
        and same_bits(now[: len(inputs.operators)], inputs.operators)
    ):
        changed |= now[codes] != inputs.operators[inputs.operator]
    label_key = columns.key[:n_labelled].view(np.uint64)
    if not same_bits(label_key, inputs.labelled_key):
        changed[kept.labelled[label_key != inputs.labelled_key]] = True
    again = np.concatenate((np.flatnonzero(changed), np.arange(n, len(columns))))
    if not len(again):  # the kept pool's records, unchanged: its keys (nothing writes them)
        return kept.key
    if len(again) == len(columns) - n:  # grown at its end: the new keys after the kept
        return appended(kept.key, content_keys(columns, slots, again))
    keys = np.empty(len(columns), np.uint64)
    keys[:n] = kept.key
    keys[again] = content_keys(columns, slots, again)
    return keys


def same_bits(now: np.ndarray, then: np.ndarray) -> bool:
    """Whether ``now`` and ``then`` hold the same bits: at once when they are views of the
    same memory laid out alike (a pool's own arrays, handed on from one use to the next),
    else one comparison of the bytes.

    >>> a = np.arange(5)
    >>> same_bits(a[:3], a[:3]), same_bits(a, np.arange(5)), same_bits(a, a[::-1])
    (True, True, False)
    """
    face_now, face_then = now.__array_interface__, then.__array_interface__
    if (
        now.dtype == then.dtype
        and now.shape == then.shape
        and face_now["data"][0] == face_then["data"][0]
        and face_now["strides"] == face_then["strides"]
    ):
        return True
    return bool(np.array_equal(now, then))


def parent_hashes(columns: PoolColumns, kept: KeptKeys | None = None) -> np.ndarray:
    """Each parent named (``columns.parent``) as its id's hash, inside the pool or out:
    one table of both, made as int64 in one pass (no second, pool-sized copy to cast).
    With ``kept``: its hashes for the parents it named, when the pool names them as it
    did (the same numbers, the same bits) and they are its records (it named none
    outside: numbered past its rows, they move as the pool grows), the new ones' after."""
    start = 0 if kept is None else _kept_parents(columns, kept)
    outside = record_id_hashes(columns.outside)
    if start:  # the new records' parents alone, each an id inside the pool or out
        named, n = columns.parent[start:], len(columns)
        new = np.empty(len(named), np.int64)
        inside = named < n
        new[inside] = columns.id_hash[named[inside]]
        new[~inside] = outside.astype(np.int64, copy=False)[named[~inside] - n]
        assert kept is not None
        return appended(kept.parent_hash, new)
    table = np.concatenate((columns.id_hash, outside), dtype=np.int64, casting="unsafe")
    return table[columns.parent]


def _kept_parents(columns: PoolColumns, kept: KeptKeys) -> int:
    """How many of the pool's parents named are ``kept``'s, their hashes its own: all of
    its own when the pool's first parents are its numbers, the same bits, naming its
    records alone (none outside), whose id hashes are the pool's first; else 0."""
    m, n = len(kept.parent_hash), len(kept.id_hash)
    inputs = kept.inputs
    if not m or inputs.outside or len(inputs.parent) != m or len(columns.parent) < m:
        return 0
    if len(columns) < n or not same_bits(columns.id_hash[:n], kept.id_hash):
        return 0
    return m if same_bits(columns.parent[:m], inputs.parent) else 0


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


def search_sorted(
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
