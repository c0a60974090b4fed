"""A resident process's later judged run looks its pool's ids up in the order the run
before kept (judging/id_lookups.py:ranked, issue 90): the listed records' ids and the drift's
record hashes are not sorted whole again, only what is new."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from first_served import write_pool
from se_darwin_runs import train

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.judging import id_lookups
from genesis_fp16_infrastructure.recipes.retrain import new_records

BUDGET = 64 * 2**20


def _run(folder: Path) -> TrainResult:
    plan = AgentSnapshot(
        pointer=read_pointer(folder / "ck"), data=DataCheck(scan_files(folder / "data")[0])
    )
    return train(
        folder / "data",
        folder / "ck",
        snapshot=plan,
        steps=40,
        keep_in_memory_bytes=BUDGET,
        resume=True,
    )


def test_a_later_run_sorts_none_of_the_pools_ids_it_looks_up(
    first: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run after one that judged the served model, each with 300 new records after the
    old ones: numpy sorts none of the arrays of every labelled record it looks up (it
    sorted them whole on every run), and none is looked up whole at all: the listing's
    ids against those the served model knew take the last run's answer for its records
    (checked: test_listed_known.py, judge34) and search the 300 new alone; the drift
    looks none of its record hashes up and grows no order, its new records being the
    pool's last (``new_records.new_at_end``, drift34)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    write_pool(folder / "data", "zz-1.json", 300, seed=41)  # read after pool.json
    _run(folder)  # the served model's listing and the drift: their orders kept
    write_pool(folder / "data", "zz-2.json", 300, seed=42)
    sorted_arrays: list[np.ndarray] = []
    lookups: list[int] = []
    listed: list[np.ndarray] = []
    argsort, known, listed_known = np.argsort, schema.known, id_lookups.listed_known

    def sorting(a: Any, *args: Any, **kwargs: Any) -> Any:
        sorted_arrays.append(np.array(a, copy=True))
        return argsort(a, *args, **kwargs)

    def looking(ids: np.ndarray, sorted_known: np.ndarray, order: Any = None) -> np.ndarray:
        lookups.append(len(ids))
        return known(ids, sorted_known, order)

    def listing(name: str, ids: np.ndarray, *args: Any) -> np.ndarray:
        listed.append(np.array(ids, copy=True))
        return listed_known(name, ids, *args)

    monkeypatch.setattr(np, "argsort", sorting)
    monkeypatch.setattr(schema, "known", looking)
    monkeypatch.setattr(id_lookups, "listed_known", listing)
    grown, taken = id_lookups.RANKED["grown"], id_lookups.LOOKUPS["grown"]
    at_end = new_records.AT_END["at end"]
    result = _run(folder)
    monkeypatch.undo()
    assert result.gate is not None
    assert id_lookups.RANKED["grown"] == grown  # neither the listing nor the drift grows one
    assert new_records.AT_END["at end"] == at_end + 1  # the drift's new records: the last
    assert id_lookups.LOOKUPS["grown"] == taken + 1 and len(listed) == 1  # the listing's
    assert all(n <= 300 for n in lookups), (lookups, len(listed[0]))
    assert not any(np.array_equal(listed[0], a) for a in sorted_arrays)
