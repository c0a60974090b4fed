"""A lookup given a kept order (data/schema.py:find_ids, judging/id_lookups.py:ranked, issue
90): it answers as a sort of the ids would, bit for bit; an order that does not sort the
ids is not believed, and a kept order of ids that changed is not grown."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.data.schema import find_ids
from genesis_fp16_infrastructure.judging import id_lookups

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept (another test's store is not its)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


@pytest.fixture
def sorts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each array numpy's argsort is asked to sort."""
    lengths: list[int] = []
    real = np.argsort

    def counted(a: Any, *args: Any, **kwargs: Any) -> Any:
        lengths.append(len(a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", counted)
    return lengths


def _same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])
    assert got[1].dtype == want[1].dtype and np.array_equal(got[1], want[1])


hashes_of = st.lists(st.integers(0, 40), max_size=60).map(lambda v: np.array(v, np.uint64))


@settings(max_examples=200, deadline=None)
@given(hashes_of, hashes_of, st.sampled_from(["quicksort", "stable", "heapsort"]))
def test_a_lookup_in_a_kept_order_is_the_sorted_lookup(
    pool: np.ndarray, asked: np.ndarray, kind: Any
) -> None:
    """Any ids (repeated, absent, none) looked up in any sorted distinct set give the same
    rows and the same found-mask, dtype and all, whether they come with an order that
    sorts them (any sort's) or are sorted by the lookup."""
    ranked = np.unique(pool)
    order = np.argsort(asked, kind=kind)
    _same(find_ids(ranked, asked, order), find_ids(ranked, asked))
    assert np.array_equal(schema.known(asked, ranked, order), np.isin(asked, ranked))


def _bad_orders(asked: np.ndarray) -> dict[str, np.ndarray]:
    good = np.argsort(asked, kind="stable")
    twice = good.copy()
    twice[1] = twice[0]  # rows 0 and 1 hold the same hash: still sorted, a row missed
    return {
        "reversed": good[::-1].copy(),
        "a row twice": twice,
        "too short": good[:-1],
        "past the end": np.append(good[:-1], len(asked)),
        "negative": np.append(good[:-1], -1),
        "floats": good.astype(np.float64),
    }


@pytest.mark.parametrize("bad", list(_bad_orders(np.array([3, 3, 1, 7, 5]))))
def test_an_order_that_does_not_sort_the_ids_is_not_believed(bad: str, sorts: list[int]) -> None:
    """An order that does not sort the ids (out of order, a row taken twice and another
    missed, another length, a row past the end, not integers) is checked, refused, and
    the ids sorted by the lookup: the answer is the sorted lookup's."""
    asked = np.array([3, 3, 1, 7, 5], dtype=np.uint64)
    ranked = np.array([1, 3, 4, 5], dtype=np.uint64)
    want, order, good = find_ids(ranked, asked), _bad_orders(asked)[bad], np.argsort(asked)
    sorts.clear()
    _same(find_ids(ranked, asked, order), want)
    assert sorts == [len(asked)]  # sorted here, the order refused
    sorts.clear()
    _same(find_ids(ranked, asked, good), want)
    assert sorts == []  # a good order: believed, nothing sorted


def _pool(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.permutation(np.unique(rng.integers(0, 2**63, count * 2, dtype=np.uint64)))[:count]


def test_a_kept_order_is_grown_by_the_new_ids_alone(sorts: list[int]) -> None:
    """A lookup's ids kept in order; the next run's, the same ids and 50 new ones after
    them, are ordered by a sort of those 50 alone (not of all 5,050), and the lookup in
    that order is the sorted lookup."""
    rng = np.random.default_rng(7)
    ids = _pool(rng, 5_050)
    id_lookups.ranked("listed ids", ids[:5_000], BUDGET)
    before = dict(id_lookups.RANKED)
    sorts.clear()
    order = id_lookups.ranked("listed ids", ids, BUDGET)
    assert sorts == [50]
    assert id_lookups.RANKED["grown"] == before.get("grown", 0) + 1
    assert order is not None and bool((np.diff(ids[order].astype(np.float64)) > 0).all())
    ranked = np.sort(rng.choice(ids, 4_000, replace=False))
    _same(find_ids(ranked, ids, order), find_ids(ranked, ids))


@pytest.mark.parametrize("change", ["one id changed", "two rows swapped", "fewer ids", "dtype"])
def test_a_kept_order_of_other_ids_is_not_grown(change: str) -> None:
    """A kept order is compared, id by id, with the ids it is asked for: a record edited
    or relabelled in place (its hash changed), two records swapped, a pool that shrank,
    ids of another type: never grown, the ids sorted whole, and the order given sorts
    them."""
    rng = np.random.default_rng(8)
    ids = _pool(rng, 3_050)
    id_lookups.ranked("record hashes", ids[:3_000], BUDGET)
    later = ids.copy()
    if change == "one id changed":
        later[1_234] = later[1_234] ^ np.uint64(1 << 40)
    elif change == "two rows swapped":
        later[[10, 2_000]] = later[[2_000, 10]]
    elif change == "fewer ids":
        later = ids[:2_999]
    else:
        later = ids.view(np.int64)
    before = dict(id_lookups.RANKED)
    order = id_lookups.ranked("record hashes", later, BUDGET)
    assert id_lookups.RANKED["sorted"] == before.get("sorted", 0) + 1
    assert id_lookups.RANKED["grown"] == before.get("grown", 0)
    assert order is not None and bool((later[order][1:] > later[order][:-1]).all())


def test_nothing_is_kept_without_a_budget_or_with_an_id_twice() -> None:
    """A budget of 0 keeps no order (the lookup sorts); ids that hold a hash twice get
    none either (a kept ranking holds each once), and their lookups are still right."""
    ids = np.array([5, 2, 9, 2], dtype=np.uint64)
    assert id_lookups.ranked("listed ids", ids, 0) is None
    assert id_lookups.ranked("listed ids", ids, BUDGET) is None
    assert id_lookups.ranked("listed ids", ids[:0], BUDGET) is not None  # none: kept
    assert id_lookups.ranked("listed ids", ids, BUDGET) is None  # not grown from it either
    assert id_lookups.ranked("listed ids", ids[:3], BUDGET) is not None
    assert id_lookups.ranked("listed ids", np.append(ids[:3], [2, 2]), BUDGET) is None
    assert schema.known(ids, np.array([2, 9], dtype=np.uint64)).tolist() == [0, 1, 1, 1]


def test_a_first_models_known_ids_leave_the_order_of_the_next_listing(sorts: list[int]) -> None:
    """The first model knows every record it was scored on: written sorted (by one sort,
    kept), so that the next run's listing of them and 40 new ones sorts the 40 alone."""
    from types import SimpleNamespace

    from genesis_fp16_infrastructure.judging.run import _known_after

    ids = _pool(np.random.default_rng(9), 2_040)
    losses = SimpleNamespace(id_hashes=ids[:2_000])
    sorts.clear()
    knew = _known_after(SimpleNamespace(losses=None), losses, BUDGET)  # type: ignore[arg-type]
    assert sorts == [2_000]
    assert np.array_equal(knew, np.sort(ids[:2_000]))
    sorts.clear()
    order = id_lookups.ranked("listed ids", ids, BUDGET)
    assert sorts == [40] and order is not None
    assert np.array_equal(ids[order], np.sort(ids))
