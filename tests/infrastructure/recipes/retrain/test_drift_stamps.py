"""The drift report's kept reference checked by the kept numeric rows' stamps (issue 90
item 3): a later run whose rows are the kept ones, unwritten, compares its sampled
records' stamps, not their numbers; a stamp that changed, a planted one, or rows written
into since are refused or checked by value, and the report is the one from nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_files import read_files

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.recipes.retrain import drift_reference
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

BUDGET = 64 * 2**20

pytestmark = pytest.mark.usefixtures("fresh_drift_memory")  # conftest.py


def _runs(tmp_path: Path) -> tuple[Any, Any, Any]:
    """A first run's pool and a later one's (150 records added at its end), read from one
    data folder, and the first one's fingerprint (the served model's)."""
    old, new = generate_pool(1500, 99), generate_pool(150, 3099)
    data = tmp_path / "data"
    first = read_files(data, {"a.json": old})
    later = read_files(data, {"a.json": old, "b.json": new})
    return first, later, fingerprint_of(first)


def _kept_rows(tmp_path: Path, columns: Any) -> tuple[KeptNumeric, Any, np.ndarray | None]:
    """A run's numeric rows from the kept ones (this process's store), and their stamps."""
    kept = KeptNumeric(tmp_path / "cache", tmp_path / "data", process_memory(BUDGET))
    numeric = kept.rows(columns)
    return kept, numeric, kept.stamps_of(numeric)


def _kept_then_later(tmp_path: Path) -> tuple[Any, Any, Any, np.ndarray]:
    """The first run's reference kept with its rows' stamps; then the later run's pool,
    the served model's fingerprint, and the later run's kept rows with their stamps."""
    first, later, served = _runs(tmp_path)
    _, numeric, stamp = _kept_rows(tmp_path, first)
    assert stamp is not None
    drift.keep_reference(first, numeric, BUDGET, stamp)
    _, numeric, stamp = _kept_rows(tmp_path, later)
    assert stamp is not None
    return later, served, numeric, stamp


def _assert_from_nothing(report: Any, later: Any, served: Any) -> None:
    """``report`` is the one computed from nothing (no kept reference)."""
    fresh = drift.drift_report(later, served, 3, None, 0)
    assert report is not None and fresh is not None and report.to_json() == fresh.to_json()


def _by_value(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the kept reference's checks by value (its sampled numbers gathered)."""
    count = [0]
    real = drift_reference._same_numbers

    def counted(*args: Any) -> bool:
        count[0] += 1
        return real(*args)

    monkeypatch.setattr(drift_reference, "_same_numbers", counted)
    return count


def test_a_later_run_checks_the_kept_reference_by_stamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run keeps its reference with its rows' stamps; the later run's rows are
    the kept ones grown: its sampled records' stamps are compared, no number gathered,
    and the report is the one computed from nothing."""
    later, served, numeric, stamp = _kept_then_later(tmp_path)
    by_value = _by_value(monkeypatch)
    report = drift.drift_report(later, served, 3, numeric, BUDGET, stamp)
    assert by_value[0] == 0 and drift.KEPT["taken"] == 1
    _assert_from_nothing(report, later, served)


@pytest.mark.parametrize("how", ["changed", "planted"])
def test_a_stamp_that_is_not_the_kept_one_measures_again(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sampled record's stamp moved (its row worked out again), or a kept entry whose
    stamps are not this run's (planted): the kept reference is stale, measured again,
    and the report is the one computed from nothing."""
    later, served, numeric, stamp = _kept_then_later(tmp_path)
    if how == "changed":
        stamp = stamp.copy()
        stamp[0] += np.uint64(10**12)  # the first record is in the sample (level 0)
    else:
        memory = process_memory(BUDGET)
        assert memory is not None
        entry = memory.get(drift_reference.KIND, drift_reference.KIND, given=False)
        assert entry.stamps is not None
        planted = entry._replace(stamps=entry.stamps + np.uint64(1))
        memory.put(drift_reference.KIND, drift_reference.KIND, planted, 1, "planted")
    by_value = _by_value(monkeypatch)
    report = drift.drift_report(later, served, 3, numeric, BUDGET, stamp)
    assert drift.KEPT["stale"] == 1 and by_value[0] == 0
    _assert_from_nothing(report, later, served)


def test_rows_written_into_have_no_stamps(tmp_path: Path) -> None:
    """Rows handed out and written into since (a view of the kept store, or the caller's
    own), or another tensor: ``stamps_of`` says None, and the reference is checked by
    value; unwritten, their stamps are the kept ones."""
    first, later, _ = _runs(tmp_path)
    kept, numeric, stamp = _kept_rows(tmp_path, first)  # the first run: the caller's own
    assert stamp is not None and kept.stamps_of(numeric.clone()) is None
    numeric[0, 0] += 1.0
    assert kept.stamps_of(numeric) is None
    kept, numeric, stamp = _kept_rows(tmp_path, later)  # the later run: a view of the store
    assert stamp is not None and np.array_equal(stamp, kept.stamp)
    numeric.mul_(1.0)
    assert kept.stamps_of(numeric) is None


def test_without_stamps_the_numbers_are_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference kept with stamps, then a run without them (rows not the kept ones):
    the sampled numbers are compared, as before stamps."""
    first, later, served = _runs(tmp_path)
    _, numeric, stamp = _kept_rows(tmp_path, first)
    drift.keep_reference(first, numeric, BUDGET, stamp)
    _, numeric, _ = _kept_rows(tmp_path, later)
    by_value = _by_value(monkeypatch)
    report = drift.drift_report(later, served, 3, numeric, BUDGET, None)
    assert by_value[0] == 1 and drift.KEPT["taken"] == 1
    _assert_from_nothing(report, later, served)
