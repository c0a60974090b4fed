"""A resident process's later judged run looks its pool's ids up in the order the run
before kept (judging/stores.py:ranked, issue 90): the listed records' ids and the drift's
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
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.judging import stores
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
    old ones: each of its lookups of every labelled record (the listing's ids against
    the ids the served model knew, the drift's record hashes against those it trained
    on) comes with an order, and numpy sorts none of those arrays (it sorted them whole
    on every run). Since drift31 the drift looks none of its hashes up whole: only the
    listing's lookup is of every labelled record; since drift34 it looks none up at all
    when the new records are at the pool's end (``new_records.new_at_end``)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])
    folder = tmp_path / "f"
    shutil.copytree(first / "first", folder)
    write_pool(folder / "data", "zz-1.json", 300, seed=41)  # read after pool.json
    _run(folder)  # the served model's listing and the drift: their orders kept
    write_pool(folder / "data", "zz-2.json", 300, seed=42)
    sorted_arrays: list[np.ndarray] = []
    lookups: list[tuple[np.ndarray, bool]] = []
    argsort, known = np.argsort, stores.known

    def sorting(a: Any, *args: Any, **kwargs: Any) -> Any:
        sorted_arrays.append(np.array(a, copy=True))
        return argsort(a, *args, **kwargs)

    def looking(ids: np.ndarray, sorted_known: np.ndarray, order: Any = None) -> np.ndarray:
        lookups.append((np.array(ids, copy=True), order is not None))
        return known(ids, sorted_known, order)

    monkeypatch.setattr(np, "argsort", sorting)
    monkeypatch.setattr(stores, "known", looking)
    grown, at_end = stores.RANKED["grown"], new_records.AT_END["at end"]
    result = _run(folder)
    monkeypatch.undo()
    assert result.gate is not None
    assert stores.RANKED["grown"] == grown + 1  # the listing's; the drift needs none
    assert new_records.AT_END["at end"] == at_end + 1
    largest = max(len(ids) for ids, _ in lookups)
    whole = [(ids, ordered) for ids, ordered in lookups if len(ids) == largest]
    # The listing's lookup alone: the drift's record hashes are no longer looked up whole
    # (recipes/retrain/new_records.py takes each record's kept place, checked, and searches
    # the new ones: test_drift_kept_checked.py); its order still grew, by RANKED above.
    assert len(whole) == 1 and all(ordered for _, ordered in whole), [len(i) for i, _ in lookups]
    for ids, _ in whole:
        assert not any(np.array_equal(ids, a) for a in sorted_arrays)
