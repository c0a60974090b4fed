"""A later run's input keys cost what is new (issue 90, kept_outputs.PoolKeys): a row the
kept numeric rows kept as it was (its stamp the same) keeps the key the previous run
hashed, a new, relabelled or worked-out row is hashed again, and the keys are those
hashing every row gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.kept_in_memory import KeptInMemory
from genesis_fp16_infrastructure.recipes.retrain import kept_outputs
from genesis_fp16_infrastructure.recipes.retrain.kept_outputs import InputKeys, PoolKeys
from genesis_fp16_infrastructure.world_model.features import Categorical
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric

BASE = generate_pool(240, seed=11)
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


def _hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each call of input_keys hashed."""
    calls: list[int] = []
    real = kept_outputs.input_keys

    def counted(parts: Categorical, numeric: torch.Tensor, values: Any = None) -> InputKeys:
        calls.append(len(numeric))
        return real(parts, numeric, values)

    monkeypatch.setattr(kept_outputs, "input_keys", counted)
    return calls


def _keys(
    columns: PoolColumns, numeric: np.ndarray, stamp: Any = None, before: Any = None
) -> tuple[PoolKeys, InputKeys]:
    """Every labelled row's keys, the numeric rows ``numeric``."""
    keys = PoolKeys(columns, stamp, before)
    every = np.arange(len(columns.labelled))
    return keys, keys.of(every, lambda rows: torch.from_numpy(numeric[rows]))


def _same(a: InputKeys, b: InputKeys) -> bool:
    return np.array_equal(a.first, b.first) and np.array_equal(a.second, b.second)


def test_kept_rows_keep_their_keys_and_new_rows_are_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool, then records added in a file sorting last: the rows whose stamps stayed
    keep the previous run's keys (not hashed), the rest are hashed, and the keys are
    those of hashing every row."""
    memory = KeptInMemory(64 * 2**20)
    first = _columns(tmp_path / "data", {"a.json": RECORDS[:200]})
    grown = _columns(tmp_path / "data", {"a.json": RECORDS[:200], "b.json": RECORDS[200:]})
    rows = KeptNumeric(tmp_path / "cache", "data", memory).view(first)
    before, _ = _keys(first, rows.numeric, rows.stamp)
    after = KeptNumeric(tmp_path / "cache", "data", memory).view(grown)
    calls = _hashed(monkeypatch)
    keys, got = _keys(grown, after.numeric, after.stamp, before.rows)
    kept = int(np.count_nonzero(after.stamp[: len(first.labelled)] == rows.stamp))
    assert kept > 0 and keys.reused == kept
    assert calls == [len(grown.labelled) - kept]
    assert _same(got, _keys(grown, after.numeric)[1])


def test_rows_moved_by_a_file_sorting_first_keep_their_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records added in a file sorting before the old one: the old rows move after the
    new ones, the kept numeric rows keep their stamps (the rows worked out again get new
    ones), and the keys of those rows are taken wherever they moved; only the new and
    worked-out rows are hashed, and the keys are those of hashing every row. On the code
    before, every row was hashed (a whole write gave every row a new stamp)."""
    memory = KeptInMemory(64 * 2**20)
    first = _columns(tmp_path / "data", {"m.json": RECORDS[:200]})
    moved = _columns(tmp_path / "data", {"a.json": RECORDS[200:], "m.json": RECORDS[:200]})
    rows = KeptNumeric(tmp_path / "cache", "data", memory).view(first)
    before, _ = _keys(first, rows.numeric, rows.stamp)
    after = KeptNumeric(tmp_path / "cache", "data", memory).view(moved)
    calls = _hashed(monkeypatch)
    keys, got = _keys(moved, after.numeric, after.stamp, before.rows)
    kept = int(np.count_nonzero(np.isin(after.stamp, rows.stamp)))
    assert kept > len(first.labelled) // 2 and keys.reused == kept
    assert calls == [len(moved.labelled) - kept]
    assert _same(got, _keys(moved, after.numeric)[1])


def test_a_relabelled_record_is_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same pool with one record relabelled: its kept key is not taken (the kept rows
    give its row a new stamp): it is hashed again (to the same key: no label enters
    one), and the keys are those of hashing every row; the same pool unchanged hashes
    nothing."""
    memory = KeptInMemory(64 * 2**20)
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    rows = KeptNumeric(tmp_path / "cache", "data", memory).view(columns)
    before, _ = _keys(columns, rows.numeric, rows.stamp)
    calls = _hashed(monkeypatch)
    again = KeptNumeric(tmp_path / "cache", "data", memory).view(columns)
    _, got = _keys(columns, again.numeric, again.stamp, before.rows)
    assert calls == [] and _same(got, _keys(columns, rows.numeric)[1])
    records = [dict(r) for r in RECORDS]
    target = columns.ids[columns.labelled[len(columns.labelled) // 2]]
    record = next(r for r in records if r["trajectory_id"] == target)
    score = record.get("success_score")
    record["success_score"] = 0.9 if score is None else round(1.0 - score, 4)
    changed = _columns(tmp_path / "data", {"a.json": records})
    after = KeptNumeric(tmp_path / "cache", "data", memory).view(changed)
    row = int(np.flatnonzero(np.array(changed.ids)[changed.labelled] == target)[0])
    assert not PoolKeys(changed, after.stamp, before.rows).rows.done[row]  # not taken
    _, got = _keys(changed, after.numeric, after.stamp, before.rows)
    assert calls and sum(calls) >= 1
    assert _same(got, _keys(changed, after.numeric)[1])


def test_rows_of_another_stamp_are_never_taken(tmp_path: Path) -> None:
    """Keys kept beside stamps that no row has now (a file read again, another path's) are
    not taken: every row is hashed."""
    columns = _columns(tmp_path / "data", {"a.json": RECORDS})
    rows = KeptNumeric(tmp_path / "cache", "data").view(columns)
    before, _ = _keys(columns, rows.numeric, rows.stamp)
    other = KeptNumeric(tmp_path / "cache", "data").view(columns)  # read from the file
    assert not np.isin(other.stamp, rows.stamp).any()
    keys, _ = _keys(columns, other.numeric, other.stamp, before.rows)
    assert keys.reused == 0
