"""What changed between a kept pool and the one read now (``world_model.kept_numeric``):
the same pool, the kept one grown at its end, or which records' rows still hold.

A record's row holds while its key (``content_keys``) and its neighbourhood are the
kept ones: :func:`fresh` marks the changed records, their descendants (the depth) and
their siblings (the sibling means) as worked out again; :func:`index_for` gives the
lineage index to work them out with, from the kept depths where they hold.

    if unchanged(columns, keys, kept): ...  # the kept rows, as they are
    elif extends(columns, slots, keys, kept): ...  # KeptNumeric._grown
    else: at, usable = fresh(columns, slots, keys, order, kept)
"""

from __future__ import annotations

import numpy as np

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.world_model.content_keys import same_bits, search_sorted
from genesis_fp16_infrastructure.world_model.kept_numeric_columns import Kept
from genesis_fp16_infrastructure.world_model.lineage_columns import (
    PoolIndex,
    columns_index,
    ranges,
    rows_index,
)


def extends(columns: PoolColumns, slots: np.ndarray, keys: np.ndarray, kept: Kept) -> bool:
    """Whether the pool is the kept one with records added at its end (the same records
    first, in the same order, none of them relabelled or edited), and the kept pool has
    its depths (its lineage did not loop)."""
    n, n_labelled = len(kept.key), len(kept.labelled)
    labelled = columns.labelled
    return (
        len(kept.depth) == n
        and len(keys) > n
        and same_bits(keys[:n], kept.key)
        and same_bits(columns.parent_start[: n + 1], kept.parent_start)
        and same_bits(slots[: len(kept.parent_hash)], kept.parent_hash)
        and same_bits(labelled[:n_labelled], kept.labelled)
        and (len(labelled) == n_labelled or bool(labelled[n_labelled] >= n))
    )


def unchanged(columns: PoolColumns, keys: np.ndarray, kept: Kept) -> bool:
    """Whether the pool is the kept one: the same records, in the same order."""
    return same_bits(keys, kept.key) and same_bits(columns.labelled, kept.labelled)


def fresh(
    columns: PoolColumns, slots: np.ndarray, keys: np.ndarray, order: np.ndarray, kept: Kept
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per pool record, its kept record's index (where ``keys`` match) and whether that
    record's row still holds (module docstring); None when none does (the unchanged
    records in another order)."""
    # Both sides by key (``order``: keys'): the searches run in order (cache-friendly).
    kept_sorted = kept.key[kept.order]
    at, same = search_sorted(kept_sorted, kept.order, keys, order)
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


def index_for(
    columns: PoolColumns,
    rows: np.ndarray,
    kept: Kept | None,
    holds: tuple[np.ndarray, np.ndarray] | None,
) -> PoolIndex:
    """The lineage index to work out ``rows`` with: built for those rows alone, the depths
    of the records whose rows still hold taken from the file (their ancestors are
    unchanged: a changed record's descendants are worked out again), when the file has
    them; else the whole pool's."""
    if kept is not None and holds is not None and len(kept.depth) == len(kept.key):
        at, usable = holds
        depth = np.full(len(columns), -1, np.int64)
        depth[usable] = kept.depth[at[usable]]
        index = rows_index(columns, rows, depth)
        if index is not None:
            return index
    return columns_index(columns)
