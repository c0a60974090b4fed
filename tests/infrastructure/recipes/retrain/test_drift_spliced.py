"""The drift report when new files sort among the old (recipes.retrain.drift_reference,
new_records.new_among): a resident process reads them laid among the kept pool's records
(data.pool_splice), finds the new records by the read's note, no search, and follows
its kept reference to their places; every report is the one computed from nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_files import ResidentReads

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure.data.fingerprint import fingerprint_of
from genesis_fp16_infrastructure.data.pool_columns import SPLICED_FROM, PoolColumns, set_derived
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import drift_reference, new_records

BUDGET = 64 * 2**20


pytestmark = pytest.mark.usefixtures("fresh_drift_memory")  # conftest.py


def _measures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the references measured from nothing, and the records searched for."""
    count = [0, 0]
    measured, search = drift_reference.measured, new_records.new_records

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return measured(*args, **kwargs)

    def searched(*args: Any, **kwargs: Any) -> Any:
        count[1] += 1
        return search(*args, **kwargs)

    monkeypatch.setattr(drift_reference, "measured", counted)
    monkeypatch.setattr(drift, "new_records", searched)
    return count


def _same_as_fresh(columns: PoolColumns, served: Any) -> None:
    """The report a resident process makes is the one computed from nothing."""
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert kept is not None and fresh is not None
    assert kept.to_json() == fresh.to_json()


def _reads(tmp_path: Path) -> ResidentReads:
    return ResidentReads(tmp_path / "data", tmp_path / "cache", KeptInMemory(256 * 2**20))


def _read_again(reads: ResidentReads) -> PoolColumns:
    """The folder read twice, as a run reads it (its judging, then its training): the
    second read takes the kept pool whole, a copy that carries the first's note."""
    first = reads.read().columns
    again = reads.read().columns
    assert again is not first and again.token is first.token
    assert vars(again).get(SPLICED_FROM) is vars(first).get(SPLICED_FROM)
    return again


def test_files_sorting_among_the_old_are_followed_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served model, then a file sorting first: the first report measures its
    reference (nothing kept); the model of that pool promoted, a file sorting first
    again: the kept reference is followed to its records' places and grown by the ones
    it lacks, among them; promoted again, a file sorting between: grown again. No
    search, nothing measured after the first, every report the fresh one's."""
    laid = new_records.AT_END["laid among"]
    reads = _reads(tmp_path)
    reads.write("m.json", generate_pool(1500, 99))
    served = fingerprint_of(reads.read().columns)
    reads.write("c.json", generate_pool(150, 3099))
    columns = _read_again(reads)
    assert vars(columns).get(SPLICED_FROM) is not None
    count = _measures(monkeypatch)
    _same_as_fresh(columns, served)
    assert count == [2, 0]  # nothing kept yet, and the fresh report's: no search
    for grown, name in enumerate(["a.json", "b.json"], start=1):
        served = fingerprint_of(columns)  # that pool's model promoted
        reads.write(name, generate_pool(150, 4099 + grown))
        columns = _read_again(reads)
        _same_as_fresh(columns, served)
        assert drift.KEPT["grown"] == grown and drift.KEPT["stale"] == 0
        assert count == [2 + grown, 0]  # the fresh report's measure alone
    assert new_records.AT_END["laid among"] - laid == 6  # kept and fresh, three reads


def test_a_relabel_beside_a_file_sorting_first_is_searched(tmp_path: Path) -> None:
    """A record relabelled while a new file sorts first: the read joins every file (no
    note), the new records are searched for, and the report is the fresh one's."""
    laid = new_records.AT_END["laid among"]
    reads = _reads(tmp_path)
    old = generate_pool(1500, 99)
    reads.write("m.json", old)
    served = fingerprint_of(reads.read().columns)
    record = next(r for r in old["trajectories"].values() if "success_score" in r)
    record["success_score"] = 1.0 - record["success_score"]
    reads.write("m.json", old)
    reads.aged.clear()  # the edited file is new to the cache
    reads.write("a.json", generate_pool(150, 3099))
    columns = reads.read().columns
    assert vars(columns).get(SPLICED_FROM) is None
    _same_as_fresh(columns, served)
    assert new_records.AT_END["laid among"] == laid


def test_a_note_of_other_places_is_not_trusted(tmp_path: Path) -> None:
    """A note naming the kept reference's pool but placing its records in another
    order (the same places, so the new records are the same): the kept reference
    followed to those places fails its hash check there and is measured again; the
    report is the fresh one's."""
    laid = new_records.AT_END["laid among"]
    reads = _reads(tmp_path)
    reads.write("m.json", generate_pool(1500, 99))
    first = reads.read().columns
    reads.write("a.json", generate_pool(150, 3099))
    columns = reads.read().columns
    drift.drift_report(columns, fingerprint_of(first), 3, None, BUDGET)  # keeps a reference
    reads.write("b.json", generate_pool(150, 4099))
    later = reads.read().columns
    note = vars(later)[SPLICED_FROM]
    set_derived(later, {SPLICED_FROM: (note[0], np.roll(note[1], 7))})
    _same_as_fresh(later, fingerprint_of(columns))
    assert new_records.AT_END["laid among"] == laid + 3  # the first report's, then both
    assert drift.KEPT["stale"] == 1 and drift.KEPT["grown"] == drift.KEPT["taken"] == 0
