"""Later judged runs that encode with the served model's encoder (issue 90, item 2): in a
resident run process the second of them takes its encoded rows from the first's and
encodes only what is new, and trains and evaluates bit for bit as a fresh process given
the same data and the same served model."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from first_served import write_pool
from se_darwin_runs import train

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

BUDGET = 256 * 2**20


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept (another test's store is not its)."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


def _run(folder: Path, budget: int) -> TrainResult:
    """A daemon's judged run on ``folder``'s data: its plan scanned the data, and the
    served model's copy is handed to the plugin (``resume``, unforced: as the daemon asks)."""
    snapshot = AgentSnapshot(
        pointer=read_pointer(folder / "ck"), data=DataCheck(scan_files(folder / "data")[0])
    )
    return train(
        folder / "data", folder / "ck", snapshot=snapshot, steps=30, resume=True,
        keep_in_memory_bytes=budget,
    )  # fmt: skip


def _weights(result: TrainResult) -> dict[str, Any]:
    assert result.checkpoint is not None
    return dict(torch.load(result.checkpoint, weights_only=True)[keys.MODEL])


def test_a_resident_later_run_trains_as_a_fresh_process(first: Path, tmp_path: Path) -> None:
    """Two later runs in one process, 200 then 100 records on: both encode with the served
    encoder; the second takes the rows kept by the first and encodes about the 100 new
    ones; its weights and eval are those of a fresh process's run on a copy of the same
    folder, bit for bit."""
    folder = tmp_path / "resident"
    shutil.copytree(first / "first", folder)
    write_pool(folder / "data", "zz-more-1.json", 200, seed=51)
    one = _run(folder, BUDGET)
    assert one.extra["encoder"] == "served", one.extra["encoder_reason"]
    assert one.extra["record_cache"]["encoded_reused"] == 0
    write_pool(folder / "data", "zz-more-2.json", 100, seed=52)
    shutil.copytree(folder, tmp_path / "fresh")  # the same folder, for a fresh process
    two = _run(folder, BUDGET)
    assert two.extra["encoder"] == "served", two.extra["encoder_reason"]
    counts = two.extra["record_cache"]
    assert 0 < counts["encoded_computed"] < 2 * 100 and counts["encoded_reused"] > 3000
    kept_in_memory._PROCESS[:] = []  # a fresh process: nothing kept
    fresh = _run(tmp_path / "fresh", 0)
    assert fresh.extra["encoder"] == "served" and "encoded_reused" not in fresh.extra.get(
        "record_cache", {}
    )
    assert two.eval == fresh.eval
    mine, theirs = _weights(two), _weights(fresh)
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.equal(mine[name].view(torch.uint8), theirs[name].view(torch.uint8)), name
