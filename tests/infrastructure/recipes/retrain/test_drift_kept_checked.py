"""What a resident process keeps for the drift report is checked before it is used (issue
90 item 3): a planted or stale kept value (the served hashes' order, the records' places
among them, the tool table) is refused, counted, and worked out again, and the report is
the one computed from nothing. The kept reference's own checks (its records, numbers,
values and sample): ``test_drift_reference.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pool_files import read_files

import genesis_fp16_infrastructure.recipes.retrain.drift as drift
from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.judging import id_lookups
from genesis_fp16_infrastructure.recipes.retrain import drift_categories, new_records

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Each test starts with nothing kept and no counts."""
    kept_in_memory._PROCESS.clear()
    for counter in (
        drift.KEPT,
        drift_categories.TOOL_TABLES,
        new_records.SORTS,
        new_records.PLACES,
        new_records.AT_END,
    ):
        counter.clear()
    yield
    kept_in_memory._PROCESS.clear()


def _later_run(tmp_path: Path) -> tuple[PoolColumns, DataFingerprint]:
    """A served model's pool, a run over it and 150 new records (what it keeps), and the
    columns of the next run: 150 more records. The first 150 new records sort before the
    served ones, so that the pool's first records are not the served model's
    (``new_records.new_at_end`` refuses) and what is kept is what answers."""
    old, first, second = generate_pool(1500, 99), generate_pool(150, 3099), generate_pool(150, 4099)
    served = fingerprint_of(read_files(tmp_path / "served", {"b.json": old}))
    data = tmp_path / "data"
    drift.drift_report(read_files(data, {"a.json": first, "b.json": old}), served, 3, None, BUDGET)
    columns = read_files(data, {"a.json": first, "b.json": old, "c.json": second})
    return columns, served


def _plant(kind: object, change: Callable[[Any], Any]) -> None:
    """The value kept under ``kind`` replaced by ``change`` of it, as a put would."""
    memory = kept_in_memory._PROCESS[0]
    found = [(k, e) for k, e in memory._entries.items() if k[0] == kind]
    assert len(found) == 1, list(memory._entries)
    key, entry = found[0]
    memory.put(key, entry.identity, change(entry.value), entry.size, "planted")


def _report_is_fresh(columns: PoolColumns, served: DataFingerprint) -> None:
    """The next report (what is kept) is the one computed from nothing."""
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert kept is not None and fresh is not None and kept.to_json() == fresh.to_json()


def test_a_later_run_takes_the_order_and_the_places_checked(tmp_path: Path) -> None:
    """Nothing planted: the order is taken, every served record's place is taken and
    only the new records (both later files') are searched for."""
    columns, served = _later_run(tmp_path)
    before = dict(new_records.PLACES)
    report = drift.drift_report(columns, served, 3, None, BUDGET)
    assert report is not None and 250 < report.new_records <= 300
    assert new_records.SORTS["kept"] == 1 and not new_records.SORTS["refused"]
    assert new_records.AT_END == {"refused": 2}  # the first 150 new sort first
    assert new_records.PLACES["searched"] - before["searched"] == report.new_records
    assert new_records.PLACES["taken"] - before.get("taken", 0) == report.reference_records
    assert not new_records.PLACES["refused"]


def _swapped(order: np.ndarray) -> np.ndarray:
    out = order.copy()
    out[[3, 4]] = out[[4, 3]]  # two hashes out of order
    return out


def _repeated(order: np.ndarray) -> np.ndarray:
    out = order.copy()
    out[7] = out[8]  # one hash twice, one lost
    return out


@pytest.mark.parametrize("change", [_swapped, _repeated], ids=["swapped", "repeated"])
def test_a_planted_order_is_refused_and_sorted_again(
    tmp_path: Path, change: Callable[[np.ndarray], np.ndarray]
) -> None:
    """A kept order that does not sort the served hashes (two swapped, one repeated) is
    refused, counted, and sorted again: the report is the one computed from nothing."""
    columns, served = _later_run(tmp_path)
    _plant(new_records.ORDER_KIND, change)
    _report_is_fresh(columns, served)
    assert new_records.SORTS["refused"] == 1


def _flipped(places: np.ndarray) -> np.ndarray:
    out = places.copy()
    at = int(np.flatnonzero(out >= 0)[10])
    out[at] = out[at] + 1  # another record's place
    return out


def _new_as_old(places: np.ndarray) -> np.ndarray:
    out = places.copy()
    out[out < 0] = 0  # a new record kept as the first served one
    return out


def _past_the_end(places: np.ndarray) -> np.ndarray:
    out = places.copy()
    out[0] = 10**9
    return out


def _old_as_new(places: np.ndarray) -> np.ndarray:
    out = places.copy()
    out[:200] = -1  # served records kept as new: searched, found
    return out


@pytest.mark.parametrize(
    "change",
    [_flipped, _new_as_old, _past_the_end, _old_as_new],
    ids=["flipped", "new-as-old", "past-the-end", "old-as-new"],
)
def test_planted_places_are_refused_and_searched(
    tmp_path: Path, change: Callable[[np.ndarray], np.ndarray]
) -> None:
    """Kept places that are not the records' (another's, a new record's kept as a served
    one's, one past the end) are refused, counted and searched for; records kept as new
    are searched for. Each report is the one computed from nothing."""
    columns, served = _later_run(tmp_path)
    _plant(new_records.PLACES_KIND, change)
    _report_is_fresh(columns, served)
    refused = new_records.PLACES["refused"]
    assert refused == 0 if change is _old_as_new else refused >= 1


def test_the_tool_table_grows_by_the_new_lists_with_new_tools(tmp_path: Path) -> None:
    """A later run whose new records use a tool no earlier record did: the kept table is
    taken (its lists begin this pool's), grown by the new lists and the new tool's column,
    and the report is the one computed from nothing."""
    old, first, second = generate_pool(1500, 99), generate_pool(150, 3099), generate_pool(150, 4099)
    for record in second["trajectories"].values():
        record["tools_used"] = ["ripgrep" if t == "grep" else t for t in record["tools_used"]]
    served = fingerprint_of(read_files(tmp_path / "served", {"a.json": old}))
    data = tmp_path / "data"
    drift.drift_report(read_files(data, {"a.json": old, "b.json": first}), served, 3, None, BUDGET)
    assert not drift_categories.TOOL_TABLES and new_records.AT_END == {"at end": 1}
    columns = read_files(data, {"a.json": old, "b.json": first, "c.json": second})
    kept = drift.drift_report(columns, served, 3, None, BUDGET)
    assert drift_categories.TOOL_TABLES == {"kept": 1}
    fresh = drift.drift_report(columns, served, 3, None, 0)
    assert kept is not None and fresh is not None and kept.to_json() == fresh.to_json()
    memory = kept_in_memory._PROCESS[0]
    table = memory.get(drift_categories.TOOLS_KIND, drift_categories.TOOLS_KIND, given=False)
    assert "ripgrep" in table.vocab and table.pairs.shape[1] == len(table.vocab)
    assert kept.features["tool"] > 0


def test_a_kept_tool_table_of_other_lists_is_refused(tmp_path: Path) -> None:
    """A kept tool table made of other lists (one list changed) is refused, counted and
    built again: the report is the one computed from nothing."""
    columns, served = _later_run(tmp_path)
    drift_categories.TOOL_TABLES.clear()

    def other(kept: Any) -> Any:
        lists = list(kept.lists)
        lists[3] = ("not", "a", "list", "of", "this", "pool")
        return kept._replace(lists=lists, pairs=np.zeros_like(kept.pairs))

    _plant(drift_categories.TOOLS_KIND[0], other)
    _report_is_fresh(columns, served)
    assert drift_categories.TOOL_TABLES["refused"] == 1


def test_a_new_served_models_first_report_searches_in_the_kept_hash_order(
    tmp_path: Path,
) -> None:
    """After a promotion (another served model, nothing of it kept), every record is
    searched for, in the order of the pool's hashes the last report kept, grown by the
    new file's (no sort of the pool's hashes); the report is the one computed from
    nothing."""
    old, first, second = generate_pool(1500, 99), generate_pool(150, 3099), generate_pool(150, 4099)
    # The first new records sort first, and the promoted model trained on the last file's
    # records, not on those: neither pool's first records are its served model's
    # (new_records.new_at_end refuses), so both reports search every record.
    served = fingerprint_of(read_files(tmp_path / "served", {"b.json": old}))
    promoted = fingerprint_of(read_files(tmp_path / "promoted", {"b.json": old, "c.json": second}))
    data = tmp_path / "data"
    drift.drift_report(read_files(data, {"a.json": first, "b.json": old}), served, 3, None, BUDGET)
    columns = read_files(data, {"a.json": first, "b.json": old, "c.json": second})
    id_lookups.RANKED.clear()
    before = dict(new_records.PLACES)
    _report_is_fresh(columns, promoted)
    assert id_lookups.RANKED == {"grown": 1}
    assert new_records.PLACES["searched"] - before["searched"] >= len(columns.key)
    assert new_records.AT_END["refused"] >= 1
