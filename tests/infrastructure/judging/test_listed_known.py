"""A listing's lookup among the known ids kept from run to run (judging/id_lookups.py:
listed_known, issue 90): a later run's grown listing searches its new ids alone and
answers as a search of every id would; a kept answer of other known ids, of ids the
listing does not begin with, or planted wrong, is not believed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging import id_lookups

BUDGET = 64 * 2**20
NAME = "listed ids"


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept (another test's store is not its)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of ids each search among the known ones is asked about."""
    lengths: list[int] = []
    real = schema.find_ids

    def counted(ranked: np.ndarray, hashes: np.ndarray, order: Any = None) -> Any:
        lengths.append(len(hashes))
        return real(ranked, hashes, order)

    monkeypatch.setattr(schema, "find_ids", counted)
    return lengths


def _pool(seed: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.permutation(np.unique(rng.integers(0, 2**63, count * 2, dtype=np.uint64)))[:count]


def _known(ids: np.ndarray, seed: int, share: float = 0.9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(ids, int(len(ids) * share), replace=False))


def test_a_grown_listing_searches_its_new_ids_alone(searched: list[int]) -> None:
    """A listing looked up, then the same ids and 70 new ones against the same known ids:
    the second lookup searches the 70 (and a sample of 64 kept answers, checked), and
    answers as ``np.isin`` does."""
    ids, extra = _pool(1, 3_070), _pool(2, 500)
    known = _known(np.concatenate([ids, extra]), 3)
    first = id_lookups.listed_known(NAME, ids[:3_000], known, BUDGET)
    assert np.array_equal(first, np.isin(ids[:3_000], known))
    searched.clear()
    before = dict(id_lookups.LOOKUPS)
    found = id_lookups.listed_known(NAME, ids, known, BUDGET)
    assert np.array_equal(found, np.isin(ids, known))
    assert sorted(searched) == [64, 70]
    assert id_lookups.LOOKUPS["grown"] == before.get("grown", 0) + 1


def test_the_known_ids_written_for_a_candidate_answer_the_next_listing(
    searched: list[int],
) -> None:
    """What a run wrote as its candidate's known ids (every listed record among them:
    ``remember_known``) answers the next run's lookup when that candidate is served: the
    new ids alone searched; the served model's own known ids still answer too (a
    candidate rejected, the same model served)."""
    ids = _pool(4, 2_040)
    before_known = _known(ids[:2_000], 5)
    id_lookups.listed_known(NAME, ids[:2_000], before_known, BUDGET)
    written = np.union1d(before_known, ids[:2_000])
    id_lookups.remember_known(NAME, ids[:2_000], written, np.ones(2_000, bool), BUDGET)
    for known in (written, before_known):
        searched.clear()
        found = id_lookups.listed_known(NAME, ids, known, BUDGET)
        assert np.array_equal(found, np.isin(ids, known))
        assert sorted(searched) == [40, 64]
        id_lookups.remember_known(NAME, ids[:2_000], written, np.ones(2_000, bool), BUDGET)
        id_lookups.listed_known(NAME, ids[:2_000], before_known, BUDGET)


@pytest.mark.parametrize(
    "change", ["known changed", "an id changed", "rows swapped", "fewer ids", "planted", "junk"]
)
def test_a_kept_lookup_that_does_not_hold_is_not_believed(change: str, searched: list[int]) -> None:
    """A kept lookup against known ids that differ by one hash, of ids one of which was
    edited in place, two swapped, or more than are listed now, a wrong answer planted in
    the store, or something else kept under its key: every id is searched again, and
    the answer is the search's."""
    ids = _pool(6, 2_050)
    known = _known(ids, 7)
    id_lookups.listed_known(NAME, ids[:2_000], known, BUDGET)
    later, now_known = ids.copy(), known
    memory = kept_in_memory.process_memory(BUDGET)
    assert memory is not None
    if change == "known changed":
        now_known = np.sort(np.concatenate([known[:-1], [known[-1] ^ np.uint64(1 << 50)]]))
    elif change == "an id changed":
        later[1_000] ^= np.uint64(1 << 40)
    elif change == "rows swapped":
        later[[3, 1_500]] = later[[1_500, 3]]
    elif change == "fewer ids":
        later = ids[:1_999]
    elif change == "planted":
        kept = memory.get((id_lookups.LOOKUP_KIND, NAME), id_lookups.LOOKUP_KIND)
        wrong = id_lookups.KnownLookup.of(kept[0].ids, kept[0].known, ~kept[0].found)
        memory.put((id_lookups.LOOKUP_KIND, NAME), id_lookups.LOOKUP_KIND, (wrong,), 1, "planted")
    else:
        junk = ["not", "lookups"]
        memory.put((id_lookups.LOOKUP_KIND, NAME), id_lookups.LOOKUP_KIND, junk, 1, "junk")
    searched.clear()
    before = dict(id_lookups.LOOKUPS)
    found = id_lookups.listed_known(NAME, later, now_known, BUDGET)
    assert np.array_equal(found, np.isin(later, now_known))
    assert id_lookups.LOOKUPS["searched"] == before.get("searched", 0) + 1
    assert len(later) in searched


def test_nothing_is_kept_without_a_budget(searched: list[int]) -> None:
    """A budget of 0 keeps no lookup: each is of every id."""
    ids = _pool(8, 500)
    known = _known(ids, 9)
    id_lookups.listed_known(NAME, ids[:400], known, 0)
    searched.clear()
    assert np.array_equal(id_lookups.listed_known(NAME, ids, known, 0), np.isin(ids, known))
    assert searched == [500]
