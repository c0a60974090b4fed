"""The drift report's reference grows with the pool in a resident process (issue 90 item
3): each later run over a promoted model adds the records past the kept reference alone,
the report is the one computed from nothing, and a planted or stale kept reference (its
records, numbers, values or sample) is refused, counted and measured again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from pool_files import Pool, read_files

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import drift_reference
from genesis_fp16_infrastructure.recipes.retrain.drift_reference import SortedValues

BUDGET = 64 * 2**20


pytestmark = pytest.mark.usefixtures("fresh_drift_memory")  # conftest.py


def _measures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the references measured from nothing (each of its records sorted), by size."""
    sizes: list[int] = []
    real = drift_reference.measured

    def counted(columns: PoolColumns, numeric: Any, rows: np.ndarray, tables: Any) -> Any:
        sizes.append(len(rows))
        return real(columns, numeric, rows, tables)

    monkeypatch.setattr(drift_reference, "measured", counted)
    return sizes


def _files(count: int) -> list[Pool]:
    """A pool of 1,200 records, then ``count`` files of 60 new records each."""
    return [generate_pool(1200, 99)] + [generate_pool(60, 3099 + k) for k in range(count)]


def _read(tmp_path: Path, files: list[Pool]) -> PoolColumns:
    return read_files(tmp_path / "data", {f"{k:02}.json": p for k, p in enumerate(files)})


def _report(columns: PoolColumns, served: DataFingerprint, budget: int) -> Any:
    report = drift.drift_report(columns, served, 3, None, budget)
    assert report is not None
    return report.to_json()


@pytest.mark.parametrize("sample", [50_000, 400], ids=["whole", "sampled"])
def test_promotions_grow_the_reference_by_what_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: int
) -> None:
    """A run with no served model keeps its pool's reference; each later run's served
    model the last run's (promoted): the kept reference is grown by the records of the
    last run's new files alone (none measured from nothing), whole or sampled, and each
    report is the one computed from nothing."""
    monkeypatch.setattr(drift, "DRIFT_SAMPLE", sample)
    files = _files(4)
    first = _read(tmp_path, files[:1])
    drift.keep_reference(first, None, BUDGET)
    assert drift.KEPT == {"measured": 1}
    measures = _measures(monkeypatch)
    served = fingerprint_of(first)
    for k in range(2, len(files) + 1):
        columns = _read(tmp_path, files[:k])
        kept = _report(columns, served, BUDGET)
        assert measures == []
        assert kept == _report(columns, served, 0)  # from nothing: measured
        assert len(measures) == 1
        measures.clear()
        served = fingerprint_of(columns)  # promoted
    fresh = len(files) - 1  # the reports from nothing
    assert {"measured": 1 + fresh, "taken": 1, "grown": len(files) - 2} == drift.KEPT


def test_a_reference_doubling_past_its_sample_is_sampled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference grown past twice the sample's size (a new level): the kept sample is
    not this one's (counted stale), the reference is measured again, the report the one
    computed from nothing."""
    monkeypatch.setattr(drift, "DRIFT_SAMPLE", 300)  # ~1,180 records: level 2; ~1,240: 3
    files = _files(1)
    first = _read(tmp_path, files[:1])
    drift.keep_reference(first, None, BUDGET)
    columns = _read(tmp_path, files)
    served = fingerprint_of(columns)  # as if the 60 new records were served already
    assert _report(_read(tmp_path, [*files, generate_pool(60, 7099)]), served, BUDGET) == _report(
        _read(tmp_path, [*files, generate_pool(60, 7099)]), served, 0
    )
    assert drift.KEPT["stale"] == 1 and not drift.KEPT["grown"]


def test_the_same_served_model_takes_the_reference_as_kept(tmp_path: Path) -> None:
    """Runs over one served model, the pool growing: the reference is taken as kept."""
    files = _files(2)
    served = fingerprint_of(_read(tmp_path, files[:1]))
    for k in (2, 3):
        columns = _read(tmp_path, files[:k])
        assert _report(columns, served, BUDGET) == _report(columns, served, 0)
    assert drift.KEPT == {"measured": 1 + 2, "taken": 1}


def _plant(change: Callable[[Any], Any]) -> None:
    """The kept reference replaced by ``change`` of it, as a put would."""
    memory = kept_in_memory._PROCESS[0]
    entry = memory._entries[drift_reference.KIND]
    memory.put(drift_reference.KIND, entry.identity, change(entry.value), entry.size, "planted")


def _flipped_number(kept: Any) -> Any:
    numbers = kept.reference.numbers.copy()
    numbers[5, 2] += 1.0
    return kept._replace(reference=kept.reference._replace(numbers=numbers))


def _other_record(kept: Any) -> Any:
    keys = kept.keys.copy()
    keys[7] ^= 1
    return kept._replace(keys=keys)


def _other_value(kept: Any) -> Any:
    return kept._replace(values={**kept.values, "operator": ["renamed", *kept.values["operator"]]})


def _other_level(kept: Any) -> Any:
    return kept._replace(level=kept.level + 1)


def _longer(kept: Any) -> Any:
    return kept._replace(records=kept.records + 1)


@pytest.mark.parametrize(
    "change",
    [_flipped_number, _other_record, _other_value, _other_level, _longer],
    ids=lambda f: f.__name__[1:],
)
def test_a_planted_or_stale_kept_reference_is_refused(
    tmp_path: Path, change: Callable[[Any], Any]
) -> None:
    """A kept reference of other numbers, another record, other categorical values,
    another sample or more records than the served model's: refused (counted stale),
    measured again, and the report is the one computed from nothing."""
    files = _files(2)
    first = _read(tmp_path, files[:1])
    drift.keep_reference(first, None, BUDGET)
    _plant(change)
    columns = _read(tmp_path, files)
    served = fingerprint_of(first)
    assert _report(columns, served, BUDGET) == _report(columns, served, 0)
    assert drift.KEPT["stale"] == 1 and not drift.KEPT["taken"] and not drift.KEPT["grown"]


def test_a_relabel_among_the_served_records_is_never_taken(tmp_path: Path) -> None:
    """A served record relabelled: its pool is no longer the served model's first records
    plus new ones; nothing kept is taken, and the report is the one computed from nothing."""
    files = _files(1)
    first = _read(tmp_path, files[:1])
    drift.keep_reference(first, None, BUDGET)
    record = next(r for r in files[0]["trajectories"].values() if "success_score" in r)
    record["success_score"] = 1.0 - record["success_score"]
    columns = _read(tmp_path, files)
    served = fingerprint_of(first)
    assert _report(columns, served, BUDGET) == _report(columns, served, 0)
    assert not drift.KEPT["taken"] and not drift.KEPT["grown"]


def test_sorted_values_grown_are_one_sort_of_every_value() -> None:
    """Values added a few at a time (ties among them and with the base, past 1/GROWTH of
    it: merged): each rank's value and each bound's count are those of one sort of
    every value, float32 and float64."""
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        values = rng.integers(0, 40, (3, 600)).astype(dtype)
        values[1] = rng.normal(size=600).astype(dtype)
        ordered = SortedValues.of(values[:, :400])
        for start in range(400, 600, 17):
            ordered = ordered.grown(values[:, start : start + 17])
            seen = values[:, : min(600, start + 17)]
            whole = np.sort(seen, axis=1)
            ranks = np.arange(whole.shape[1])
            assert np.array_equal(ordered.at(ranks), whole)
            bounds = np.array([-1, 0, 3.5, 20, 39, 50], dtype=dtype)
            for feature in range(3):
                expected = np.searchsorted(whole[feature], bounds, "right")
                assert np.array_equal(ordered.at_most(feature, bounds), expected)
        assert ordered.added.shape[1] * drift_reference.GROWTH <= ordered.base.shape[1]


def test_the_sample_grows_with_the_reference() -> None:
    """A record's place in the sample is its hash's alone: a grown reference's sample is
    the old one's and the new records' in it, at one level; a level past holds about half
    as many, every one of them in the level before."""
    keys = np.random.default_rng(2).integers(-(2**63), 2**63 - 1, 40_000)
    one, two = drift_reference.in_sample(keys, 1), drift_reference.in_sample(keys, 2)
    assert np.array_equal(drift_reference.in_sample(keys[:30_000], 1), one[:30_000])
    assert not (two & ~one).any()
    assert 0.48 < one.mean() < 0.52 and 0.23 < two.mean() < 0.27
    assert drift_reference.in_sample(keys, 0).all()


@pytest.mark.parametrize("where", ["none", "first", "edge", "last", "nan", "past"])
def test_sampled_numbers_are_compared_in_every_block(where: str) -> None:
    """The kept sample's numbers against the pool's, gathered a block of ``CHECK_ROWS`` at
    a time: equal, taken; one number moved in the first block, at a block's edge or in the
    last, a NaN, or a record past the pool's numbers: refused."""
    block = drift_reference.CHECK_ROWS
    values = np.random.default_rng(5).standard_normal((8 * block, 29)).astype(np.float32)
    rows = np.arange(1, 8 * block, 2)  # every other record: not a slice, 4 blocks
    kept = np.take(values, rows, axis=0)
    changed = {"first": 3, "edge": block, "last": len(rows) - 1, "nan": 2 * block + 7}
    if where in changed:
        values[rows[changed[where]], 11] = np.nan if where == "nan" else 0.5
    if where == "past":
        rows = np.append(rows[1:], len(values))
    columns = cast(PoolColumns, None)  # not read: the numbers are given
    same = drift_reference._same_numbers(columns, torch.from_numpy(values), rows, kept)
    assert same is (where == "none")
