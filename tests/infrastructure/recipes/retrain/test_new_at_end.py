"""A pool grown at its end needs no search for its new records (issue 90 item 3): when its
first records are the served model's, the rest are new, checked by two sums of the
hashes; a pool whose first records are not (a relabel or an edit among them, a removal,
new records first, a planted hash in the served fingerprint) is refused and searched, and
every answer is the search's."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from pool_files import read_files

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import drift, new_records
from genesis_fp16_infrastructure.recipes.retrain.new_records import (
    new_at_end,
    sorted_labelled,
)

KEY = ("test", "served")


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Each test starts with nothing kept and no counts."""
    kept_in_memory._PROCESS.clear()
    new_records.AT_END.clear()
    yield
    kept_in_memory._PROCESS.clear()


def _searched(columns: PoolColumns, served: DataFingerprint) -> np.ndarray:
    """Which records are new, every one searched for (nothing kept)."""
    return new_records.new_records(columns, sorted_labelled(served, KEY, 0), KEY, 0)


def _pools(tmp_path: Path) -> tuple[dict, dict]:
    return generate_pool(600, 99), generate_pool(80, 3099)


def test_new_records_at_the_end_are_the_searchs(tmp_path: Path) -> None:
    """The served model's pool and a file after it: the last records are new, the answer
    the search gives, and the drift report the same as the searched one's."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": new})
    is_new = new_at_end(columns, served)
    assert is_new is not None and new_records.AT_END == {"at end": 1}
    assert np.array_equal(is_new, _searched(columns, served))
    assert int(is_new.sum()) == len(columns.key) - len(served.labelled) > 0
    report = drift.drift_report(columns, served, 3, None, 0)
    assert report is not None and report.new_records == int(is_new.sum())


def test_new_records_first_are_refused_and_searched(tmp_path: Path) -> None:
    """The new file sorts before the served one's: its first records are not the served
    model's, refused; the drift report is the search's."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"b.json": old}))
    columns = read_files(tmp_path / "data", {"a.json": new, "b.json": old})
    assert new_at_end(columns, served) is None and new_records.AT_END == {"refused": 1}
    report = drift.drift_report(columns, served, 3, None, 0)
    assert report is not None and report.new_records == int(_searched(columns, served).sum())


def test_a_relabelled_first_record_is_refused(tmp_path: Path) -> None:
    """One of the served model's records relabelled in place (a stale fingerprint of the
    pool's first records): refused, and the relabelled one is among the new."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    first = next(iter(old["trajectories"].values()))
    first["success_score"] = 0.999 if first["success_score"] < 0.5 else 0.001
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": new})
    assert new_at_end(columns, served) is None
    searched = _searched(columns, served)
    assert int(searched.sum()) == len(columns.key) - len(served.labelled) + 1


def test_a_removed_first_record_is_refused(tmp_path: Path) -> None:
    """One of the served model's records gone from the pool: its first records hold one of
    the new ones instead, refused."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    del old["trajectories"][next(iter(old["trajectories"]))]
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": new})
    assert new_at_end(columns, served) is None
    assert int(_searched(columns, served).sum()) == len(columns.key) - len(served.labelled) + 1


@pytest.mark.parametrize("where", [0, 311, -1])
def test_a_planted_served_hash_is_refused(tmp_path: Path, where: int) -> None:
    """The served fingerprint with one record hash changed (a planted or stale one):
    refused by either sum, and the search answers."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": new})
    labelled = served.labelled.clone()
    labelled[where] += 1
    planted = dataclasses.replace(served, labelled=labelled)
    assert new_at_end(columns, planted) is None
    searched = _searched(columns, planted)
    assert int(searched.sum()) == len(columns.key) - len(served.labelled) + 1


def test_two_hashes_traded_between_records_are_refused() -> None:
    """Two hashes changed so that their plain sum stands (one up, one down): the mixed
    sum refuses them."""
    hashes = np.arange(1000, 2000, dtype=np.int64) * 7919
    traded = hashes.copy()
    traded[3] += 5
    traded[9] -= 5
    assert new_records._sums(hashes)[0] == new_records._sums(traded)[0]
    assert new_records._sums(hashes) != new_records._sums(traded)
    assert new_records._sums(hashes) == new_records._sums(hashes[::-1].copy())


def test_a_served_model_of_more_records_than_the_pool_is_refused(tmp_path: Path) -> None:
    """A served fingerprint of more records than the pool holds: refused, not indexed
    past the pool."""
    old, new = _pools(tmp_path)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old, "b.json": new}))
    columns = read_files(tmp_path / "data", {"a.json": old})
    assert new_at_end(columns, served) is None
    longer = dataclasses.replace(served, labelled=torch.cat([served.labelled] * 2))
    assert new_at_end(columns, longer) is None
