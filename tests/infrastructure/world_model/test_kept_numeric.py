"""Kept numeric rows (world_model.kept_numeric): the same bits as working every record
out, only what is new, changed or beside a change worked out, a damaged file set aside."""

from __future__ import annotations

import copy
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.world_model import features
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.lineage_columns import PoolIndex

BASE = generate_pool(300, seed=7)
RECORDS: list[dict[str, Any]] = list(BASE["trajectories"].values())


def _columns(folder: Path, files: dict[str, list[dict[str, Any]]]) -> PoolColumns:
    """The pool of ``files`` (name: records), read as a training run reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for name, records in files.items():
        pool = {**BASE, "trajectories": {r["trajectory_id"]: r for r in records}}
        (folder / name).write_text(json.dumps(pool))
    return read_trajectories(folder, keep_text=False).columns


def _bits(a: torch.Tensor) -> np.ndarray:
    return a.numpy().view(np.int64)


def _worked_out(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The rows each call of the per-record work (features.numeric_rows) was asked for."""
    calls: list[np.ndarray] = []
    real = features.numeric_rows

    def counted(
        columns: PoolColumns, rows: np.ndarray, index: PoolIndex | None = None
    ) -> torch.Tensor:
        calls.append(np.array(rows))
        return real(columns, rows, index)

    monkeypatch.setattr(features, "numeric_rows", counted)
    return calls


def _relabel(record: dict[str, Any]) -> None:
    """Another score (a record without one gets one)."""
    score = record.get("success_score")
    record["success_score"] = 0.9 if score is None else round(1.0 - score, 4)


def _ids(columns: PoolColumns, rows: np.ndarray) -> set[str]:
    return {columns.ids[r] for r in rows.tolist()}


# No shrinking: each example reads two pools from files (a failure prints its draw).
@settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    held=st.sets(st.integers(0, len(RECORDS) - 1), max_size=12),
    removed=st.sets(st.integers(0, len(RECORDS) - 1), max_size=6),
    relabelled=st.sets(st.integers(0, len(RECORDS) - 1), max_size=6),
    reparented=st.lists(st.tuples(st.integers(0, 299), st.integers(0, 299)), max_size=4),
    new_first=st.booleans(),
    earlier=st.sets(st.integers(0, len(RECORDS) - 1), max_size=6),
    in_memory=st.booleans(),
)
def test_kept_rows_are_the_worked_out_rows(
    held: set[int],
    removed: set[int],
    relabelled: set[int],
    reparented: list[tuple[int, int]],
    new_first: bool,
    earlier: set[int],
    in_memory: bool,
) -> None:
    """Whatever changed between two pools (records added, removed, relabelled, given
    other parents; the new file read before or after the old), the kept path's rows are
    the very bits of working every record out; the first pool's file kept from an
    earlier pool without the records ``earlier`` (its depths merged, not all worked out),
    or appended to it; the kept pool read from the file or kept in this process's memory."""
    memory = KeptInMemory(64 * 2**20) if in_memory else None
    records = copy.deepcopy(RECORDS)
    old = copy.deepcopy([r for i, r in enumerate(records) if i not in held])  # as before
    for i in relabelled:
        _relabel(records[i])
    for child, parent in reparented:
        records[child]["parent_trajectories"] = [records[parent]["trajectory_id"]]
    kept_now = [r for i, r in enumerate(records) if i not in held and i not in removed]
    added = [records[i] for i in sorted(held - removed)]
    with tempfile.TemporaryDirectory() as tmp:
        first = [r for i, r in enumerate(RECORDS) if i not in held | earlier]
        KeptNumeric(Path(tmp) / "cache", "data", memory).rows(
            _columns(Path(tmp) / "data", {"b.json": first})
        )
        kept = KeptNumeric(Path(tmp) / "cache", "data", memory)
        before = _columns(Path(tmp) / "data", {"b.json": old})
        assert np.array_equal(
            _bits(kept.rows(before)), _bits(features.numeric_rows(before, before.labelled))
        )
        files = {"b.json": kept_now, ("a.json" if new_first else "c.json"): added}
        after = _columns(Path(tmp) / "data", files)
        again = KeptNumeric(Path(tmp) / "cache", "data", memory)
        got = again.rows(after)
        want = _bits(features.numeric_rows(after, after.labelled))
        assert np.array_equal(_bits(got), want)
        assert again.unreadable == 0 and again.reused + again.computed == len(after.labelled)
        cold = KeptNumeric(Path(tmp) / "cache", "data")  # the file as written or appended
        assert np.array_equal(_bits(cold.rows(after)), want) and cold.computed == 0


def test_only_new_records_and_their_siblings_are_worked_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaves added to a kept pool: the per-record work runs for them and the records
    sharing a parent with them, not for the pool; a third read works nothing out."""
    named = {p for r in RECORDS for p in r["parent_trajectories"]}
    leaves = [i for i, r in enumerate(RECORDS) if r["trajectory_id"] not in named][-10:]
    old = [r for i, r in enumerate(RECORDS) if i not in leaves]
    kept = KeptNumeric(tmp_path / "cache", "data")
    kept.rows(_columns(tmp_path / "data", {"a.json": old}))
    calls = _worked_out(monkeypatch)
    columns = _columns(tmp_path / "data", {"a.json": old, "b.json": [RECORDS[i] for i in leaves]})
    kept = KeptNumeric(tmp_path / "cache", "data")
    kept.rows(columns)
    worked = _ids(columns, np.concatenate(calls))
    new = {RECORDS[i]["trajectory_id"] for i in leaves}
    parents = {p for i in leaves for p in RECORDS[i]["parent_trajectories"]}
    siblings = {r["trajectory_id"] for r in RECORDS if set(r["parent_trajectories"]) & parents}
    labelled = _ids(columns, columns.labelled)
    assert new & labelled <= worked <= new | siblings
    assert kept.computed == len(worked) < len(columns.labelled) // 4
    calls.clear()
    third = KeptNumeric(tmp_path / "cache", "data")
    third.rows(columns)
    assert calls == [] and third.computed == 0 and third.reused == len(columns.labelled)


def test_new_records_build_a_lineage_index_of_their_own_not_the_pools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaves added to a kept pool: their lineage numbers come from an index holding the
    child lists of their parents alone and the kept depths, not from the whole pool's
    index (a sort of every parent link and every depth worked out again)."""
    named = {p for r in RECORDS for p in r["parent_trajectories"]}
    leaves = [i for i, r in enumerate(RECORDS) if r["trajectory_id"] not in named][-10:]
    old = [r for i, r in enumerate(RECORDS) if i not in leaves]
    KeptNumeric(tmp_path / "cache", "data").rows(_columns(tmp_path / "data", {"a.json": old}))
    columns = _columns(tmp_path / "data", {"a.json": old, "b.json": [RECORDS[i] for i in leaves]})
    whole: list[int] = []
    seen: list[tuple[PoolIndex, np.ndarray]] = []
    real_whole, real_rows = features.columns_index, features.lineage_rows

    def counted_whole(c: PoolColumns) -> PoolIndex:
        whole.append(len(c))
        return real_whole(c)

    def counted_rows(index: PoolIndex, rows: np.ndarray) -> list[np.ndarray]:
        seen.append((index, np.array(rows)))
        return real_rows(index, rows)

    monkeypatch.setattr(features, "columns_index", counted_whole)
    monkeypatch.setattr(features, "lineage_rows", counted_rows)
    got = KeptNumeric(tmp_path / "cache", "data").rows(columns)
    monkeypatch.setattr(features, "columns_index", real_whole)
    monkeypatch.setattr(features, "lineage_rows", real_rows)
    assert whole == [] and len(seen) == 1
    index, rows = seen[0]
    parents = {p for named in columns.parent_ids(rows) for p in named}
    namings = sum(p in parents for named in columns.parent_ids(np.arange(300)) for p in named)
    assert len(index.children) == namings < len(columns.parent) // 4
    assert np.array_equal(_bits(got), _bits(features.numeric_rows(columns, columns.labelled)))


@pytest.mark.parametrize("where", ["kept", "new", "below"])
def test_parent_loops_give_the_worked_out_rows(tmp_path: Path, where: str) -> None:
    """Parent links that loop (in the kept pool, among the new records, or above new
    records): the depths there follow the loop rule, so the whole pool's index is built,
    and the rows are the very bits of working every record out, on the next read too."""
    records = copy.deepcopy(RECORDS)
    a, b, c, d = (records[i] for i in (20, 40, 60, 80))
    if where == "new":  # c and d new, each the other's parent
        c["parent_trajectories"], d["parent_trajectories"] = (
            [d["trajectory_id"]],
            [c["trajectory_id"]],
        )
    else:  # a and b kept, each the other's parent; "below": c and d new under them
        a["parent_trajectories"], b["parent_trajectories"] = (
            [b["trajectory_id"]],
            [a["trajectory_id"]],
        )
        d["parent_trajectories"], c["parent_trajectories"] = (
            [b["trajectory_id"]],
            [d["trajectory_id"]],
        )
    new = {60, 80} if where != "kept" else set()
    for held in (new | {10, 11}, {10, 11}, set()):  # kept; the new records; two more
        pool = [r for i, r in enumerate(records) if i not in held]
        columns = _columns(tmp_path / "data", {"a.json": pool})
        got = KeptNumeric(tmp_path / "cache", "data").rows(columns)
        assert np.array_equal(_bits(got), _bits(features.numeric_rows(columns, columns.labelled)))


@pytest.mark.parametrize("change", ["relabelled", "edited"])
def test_a_relabelled_or_edited_record_is_worked_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A record relabelled (its score) or edited in place (its planned change): it, and
    its children (their parents' scores), are worked out again; their rows are new."""
    named = [p for r in RECORDS for p in r["parent_trajectories"]]
    target = max(set(named), key=named.count)  # the record with the most children
    kept = KeptNumeric(tmp_path / "cache", "data")
    kept.rows(_columns(tmp_path / "data", {"a.json": RECORDS}))
    records = copy.deepcopy(RECORDS)
    record = next(r for r in records if r["trajectory_id"] == target)
    if change == "relabelled":
        _relabel(record)
    else:
        record["code_changes"] += "\n+one more line"
    calls = _worked_out(monkeypatch)
    columns = _columns(tmp_path / "data", {"a.json": records})
    got = KeptNumeric(tmp_path / "cache", "data").rows(columns)
    worked = _ids(columns, np.concatenate(calls))
    children = {r["trajectory_id"] for r in RECORDS if target in r["parent_trajectories"]}
    labelled = _ids(columns, columns.labelled)
    assert {target} & labelled <= worked
    if change == "relabelled":  # the children read its score
        assert children & labelled <= worked
    assert np.array_equal(_bits(got), _bits(features.numeric_rows(columns, columns.labelled)))


@pytest.mark.parametrize("damage", ["column", "header", "truncated", "fifo"])
def test_a_damaged_file_is_set_aside_counted_and_the_rows_worked_out(
    tmp_path: Path, damage: str
) -> None:
    """A flipped byte in a column or the header, a cut file, a FIFO at its name: a
    logged miss counted in ``unreadable``; every row is worked out (the same bits), and
    the file written again is read back whole. A FIFO never blocks the read."""
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    kept = KeptNumeric(tmp_path / "cache", "data")
    want = _bits(kept.rows(columns))
    raw = bytearray(kept.path.read_bytes())
    if damage == "column":
        at = raw.find(want.tobytes()[:64])  # the numeric rows' column
        assert at > 0
        raw[at + 3] ^= 0x10
        kept.path.write_bytes(bytes(raw))
    elif damage == "header":
        raw[40] ^= 0x01
        kept.path.write_bytes(bytes(raw))
    elif damage == "truncated":
        kept.path.write_bytes(bytes(raw[: len(raw) // 2]))
    else:
        kept.path.unlink()
        os.mkfifo(kept.path)
    found: list[Any] = []

    def run() -> None:
        again = KeptNumeric(tmp_path / "cache", "data")
        found.append((again, again.rows(columns)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the read blocked on the kept file"
    again, got = found[0]
    assert again.unreadable == 1 and again.computed == len(columns.labelled)
    assert np.array_equal(_bits(got), want)
    if damage == "fifo":
        return  # write_atomic replaces it: checked with the others below
    third = KeptNumeric(tmp_path / "cache", "data")
    assert np.array_equal(_bits(third.rows(columns)), want)
    assert third.unreadable == 0 and third.computed == 0


def test_a_file_over_its_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A kept file larger than twice the current pool's columns can make is not read:
    counted, and every row worked out."""
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    kept = KeptNumeric(tmp_path / "cache", "data")
    kept.rows(columns)
    with kept.path.open("ab") as handle:
        handle.truncate(50 * 2**20)
    again = KeptNumeric(tmp_path / "cache", "data")
    again.rows(columns)
    assert again.unreadable == 1 and again.computed == len(columns.labelled)


def test_the_files_of_other_data_paths_are_forgotten(tmp_path: Path) -> None:
    """One kept file per data path; forget_others deletes the others (a moved data
    folder's), not its own."""
    columns = _columns(tmp_path / "data", {"a.json": RECORDS[:50]})
    old, new = KeptNumeric(tmp_path / "cache", "old"), KeptNumeric(tmp_path / "cache", "new")
    old.rows(columns)
    new.rows(columns)
    assert old.path != new.path and old.path.exists()
    assert new.forget_others() == 1
    assert not old.path.exists() and new.path.exists()
