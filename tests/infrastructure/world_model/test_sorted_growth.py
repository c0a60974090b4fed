"""Values kept sorted in two levels as a pool grows (world_model.sorted_growth): every
search and the whole order are those of one sort of every value, whatever the growths,
and a kept sorting that is not of the array it is used with is refused."""

from __future__ import annotations

import numpy as np
import pytest

from genesis_fp16_infrastructure.world_model.kept_numeric_state import sorting as _sorting
from genesis_fp16_infrastructure.world_model.sorted_growth import GROWTH, SortedGrowth


@pytest.mark.parametrize("seed", range(6))
def test_growths_search_and_order_as_one_sort(seed: int) -> None:
    """Grown many times (some growths past 1/GROWTH of the base, values repeated): each
    value's indices found in both levels are the indices holding it, and the whole order
    sorts the array, as one sort of it does."""
    rng = np.random.default_rng(seed)
    values = rng.integers(-50, 50, 400)
    sorting = SortedGrowth.of(values)
    for size in (3, 0, 40, 7, 120, 1, 60):
        values = np.concatenate((values, rng.integers(-60, 60, size)))
        sorting = sorting.grown(values)
        assert sorting.values == len(values) and sorting.indexes(values)
        assert len(sorting.added) * GROWTH <= len(sorting.base)
        wanted = np.unique(rng.integers(-70, 70, 30))
        found = np.sort(sorting.indices_of(wanted))
        assert np.array_equal(found, np.flatnonzero(np.isin(values, wanted)))
        order, ranked = sorting.whole()
        assert np.array_equal(ranked, np.sort(values)) and np.array_equal(values[order], ranked)
        assert np.array_equal(np.sort(order), np.arange(len(values)))


@pytest.mark.parametrize("seed", range(6))
def test_splices_search_and_order_as_one_sort(seed: int) -> None:
    """Values laid among the kept ones (a splice: the kept in their order at some places,
    new ones at the rest), mixed with growths at the end: each search and the whole order
    are one sort's, as for growths alone."""
    rng = np.random.default_rng(seed)
    values = rng.integers(-50, 50, 300)
    sorting = SortedGrowth.of(values)
    for size in (5, 0, 50, 2, 130, 9):
        total = len(values) + size
        new_at = np.sort(rng.choice(total, size, replace=False))
        kept_at = np.setdiff1d(np.arange(total), new_at)
        laid = np.empty(total, values.dtype)
        laid[kept_at], laid[new_at] = values, rng.integers(-60, 60, size)
        values = laid
        sorting = sorting.spliced(values, kept_at, new_at)
        if size % 2:  # and a growth at the end
            values = np.concatenate((values, rng.integers(-60, 60, 3)))
            sorting = sorting.grown(values)
        assert sorting.values == len(values) and sorting.indexes(values)
        wanted = np.unique(rng.integers(-70, 70, 30))
        found = np.sort(sorting.indices_of(wanted))
        assert np.array_equal(found, np.flatnonzero(np.isin(values, wanted)))
        order, ranked = sorting.whole()
        assert np.array_equal(ranked, np.sort(values)) and np.array_equal(values[order], ranked)


def test_a_kept_sorting_of_other_values_is_made_again() -> None:
    """A kept sorting used with another array (a value moved, one more or fewer) fails
    its check and is sorted again; with its own array, or a copy of the same bits, it is
    taken as it is. Its levels are read-only."""
    values = np.arange(100, dtype=np.int64)[::-1].copy()
    kept = SortedGrowth.of(values[:90]).grown(values)
    assert _sorting(kept, values) is kept and _sorting(kept, values.copy()) is kept
    moved = values.copy()
    moved[95] = 1000
    for other in (values[:-1], np.concatenate((values, [7])), moved):
        again = _sorting(kept, other)
        assert again is not kept and np.array_equal(other[again.whole()[0]], np.sort(other))
    for level in kept[:4]:
        with pytest.raises(ValueError):
            level[:1] = 0
