"""The drift report's reference kept in a resident process (issue 90 item 3): a later run
over the same served model sorts nothing of the reference, and every change that moves
the reference (a relabel, an edit, a removal, another served model) gives the report that
computing from nothing gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pool_files import Pool, read_files

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import drift_reference

BUDGET = 64 * 2**20


pytestmark = pytest.mark.usefixtures("fresh_drift_memory")  # conftest.py


def _sorts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the references measured from nothing (each of its features sorted)."""
    count = [0]
    real = drift_reference.measured

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(drift_reference, "measured", counted)
    return count


def _both(columns: PoolColumns, served: DataFingerprint) -> tuple[Any, Any]:
    """The report as a resident process makes it (what it kept), and from nothing."""
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert kept is not None and fresh is not None
    return kept.to_json(), fresh.to_json()


def _setting(tmp_path: Path) -> tuple[Pool, Pool, Pool, DataFingerprint]:
    """A served model's pool (its fingerprint), and two later files of new records."""
    old, first, second = generate_pool(1500, 99), generate_pool(150, 3099), generate_pool(150, 4099)
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    return old, first, second, served


def test_a_later_run_over_the_same_served_model_sorts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records added since the last run, the served model the same: the kept reference
    is taken (nothing measured, no feature sorted) and the report is the one computed
    from nothing."""
    old, first, second, served = _setting(tmp_path)
    data = tmp_path / "data"
    drift.drift_report(read_files(data, {"a.json": old, "b.json": first}), served, 3, None, BUDGET)
    assert drift.KEPT == {"measured": 1}
    columns = read_files(data, {"a.json": old, "b.json": first, "c.json": second})
    sorts = _sorts(monkeypatch)
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    assert sorts[0] == 0 and drift.KEPT["taken"] == 1
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert kept is not None and fresh is not None and kept.to_json() == fresh.to_json()
    assert sorts[0] > 0  # the fresh report measures: the count sees a sort


def _relabel(pool: Pool) -> None:
    record = next(r for r in pool["trajectories"].values() if "success_score" in r)
    record["success_score"] = 1.0 - record["success_score"]


def _edit(pool: Pool) -> None:
    for record in list(pool["trajectories"].values())[:40]:
        record["generation"] = 10 * record["generation"] + 1


def _remove(pool: Pool) -> None:
    for key in list(pool["trajectories"])[:25]:
        del pool["trajectories"][key]


@pytest.mark.parametrize("change", [_relabel, _edit, _remove], ids=lambda f: f.__name__[1:])
def test_a_changed_reference_is_measured_again_with_the_same_report(
    tmp_path: Path, change: Callable[[Pool], None]
) -> None:
    """A relabel, an edit or a removal among the served model's records: the pool's
    first records are not the served model's, so the kept reference is neither taken
    nor grown (the records are measured), and the report is the one computed from
    nothing."""
    old, first, _, served = _setting(tmp_path)
    data = tmp_path / "data"
    drift.drift_report(read_files(data, {"a.json": old, "b.json": first}), served, 3, None, BUDGET)
    change(old)
    kept, fresh = _both(read_files(data, {"a.json": old, "b.json": first}), served)
    assert drift.KEPT == {"measured": 1}  # the first report's: none taken, none grown
    assert kept == fresh


def test_another_served_model_has_a_reference_of_its_own(tmp_path: Path) -> None:
    """A rollback to another checkpoint (another set of records served: the pool's first
    1,200 records): the kept reference, of more records, is refused (stale) and
    its own measured; back to the first, that one is grown by the records past it. Each
    report the one computed from nothing."""
    old, first, _, served = _setting(tmp_path)
    fewer = {**old, "trajectories": dict(list(old["trajectories"].items())[:1200])}
    before = fingerprint_of(read_files(tmp_path / "before", {"a.json": fewer}))
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": first})
    reports = [_both(columns, s) for s in (served, before, served)]
    assert drift.KEPT == {"measured": 1 + 3, "stale": 1, "grown": 1}  # 3 from nothing
    assert all(kept == fresh for kept, fresh in reports)
    assert reports[0][0] != reports[1][0]


def test_the_served_models_record_hashes_are_sorted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later run over the same served model takes its record hashes sorted as the last
    run sorted them (kept beside its reference; a budget of 0 sorts them each run), and
    the report is the one computed from nothing. The new records sort first, so that the
    hashes are looked up (``new_records.new_at_end`` refuses); a pool grown at its end
    sorts none of them, budget or not."""
    old, first, second, served = _setting(tmp_path)
    data = tmp_path / "data"
    grown = read_files(data, {"a.json": old, "b.json": first})
    drift.drift_report(read_files(data, {"0.json": first, "a.json": old}), served, 3, None, BUDGET)
    sorted_: list[int] = []
    real = drift.np.sort

    def counted(a: Any, *args: Any, **kwargs: Any) -> Any:
        if a.ndim == 1 and len(a) == len(served.labelled):
            sorted_.append(len(a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(drift.np, "sort", counted)
    assert drift.drift_report(grown, served, 3, None, 0) is not None and sorted_ == []
    columns = read_files(data, {"0.json": first, "a.json": old, "c.json": second})
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    assert sorted_ == []
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert sorted_ == [len(served.labelled)]
    assert kept is not None and fresh is not None and kept.to_json() == fresh.to_json()


def test_the_draws_shares_are_counted_alike_in_any_chunks_of_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The noise draws' bin shares counted a feature at a time (SHARE_KEYS under one
    draw's keys) and all features at once: the same report, field for field."""
    old, first, _, served = _setting(tmp_path)
    columns = read_files(tmp_path / "data", {"a.json": old, "b.json": first})
    whole = drift.drift_report(columns, served, 3, None, 0)
    monkeypatch.setattr(drift, "SHARE_KEYS", 1)
    alone = drift.drift_report(columns, served, 3, None, 0)
    assert whole is not None and alone is not None and whole.to_json() == alone.to_json()
