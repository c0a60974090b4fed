"""A resident process's later run lists a pool grown at its end (or among its files) by
growing the listing it made of the old pool (issue 90): only the new records' ids and
segments are checked,
and the listing is the one a run with nothing kept makes, id for id; any other pool (a
relabel among the old records) is listed and checked whole."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.contract import record_losses
from genesis_fp16_infrastructure.contract.agent_snapshot import AgentSnapshot, DataCheck
from genesis_fp16_infrastructure.contract.record_losses import RecordIds
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.manifest import scan_files
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import scoring
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions

BUDGET = 64 * 2**20


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    """Each test starts with nothing kept, and leaves nothing."""
    kept_in_memory._PROCESS.clear()
    scoring._RUN_POOL.clear()
    yield
    kept_in_memory._PROCESS.clear()
    scoring._RUN_POOL.clear()


def _write(file: Path, pool: dict[str, Any]) -> None:
    file.write_text(json.dumps(pool))
    past = time.time_ns() - 60 * 10**9  # older than the record cache's RACY_NS: kept
    os.utime(file, ns=(past, past))


def _listing(work: Path, budget: int) -> RecordIds:
    """A run's listing of its records (a fresh plan: the pool read again)."""
    scan, _ = scan_files(work / "data", None)
    request = TrainRequest(
        agent="se_darwin",
        precision_reason="test",
        state_dir=work / "state",
        checkpoint_dir=work / "ck",
        data_path=work / "data",
        keep_in_memory_bytes=budget,
        snapshot=AgentSnapshot(data=DataCheck(scan=scan)),
    )
    listed = scoring.record_ids(request)
    assert listed is not None
    return listed


def _same(got: RecordIds, whole: RecordIds) -> None:
    assert got.ids == whole.ids and got.segments == whole.segments
    assert np.array_equal(got.id_hashes, whole.id_hashes)


def _walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the columns the checks walk (``record_losses._all_of``), from now on."""
    walked: list[int] = []
    real = record_losses._all_of
    monkeypatch.setattr(
        record_losses, "_all_of", lambda v, kind: walked.append(len(v)) or real(v, kind)
    )
    return walked


def test_a_grown_pool_is_listed_checking_its_new_records_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two later runs, each after a file of new records: each listing walks the new
    records alone, and is the listing a run with nothing kept makes."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "a.json", generate_pool(600, seed=99))
    first = _listing(tmp_path, BUDGET)
    for k, seed in enumerate((3099, 3100)):
        _write(tmp_path / "data" / f"z{k}.json", generate_pool(80, seed=seed))
        walked = _walks(monkeypatch)
        grown = _listing(tmp_path, BUDGET)
        monkeypatch.undo()
        added = len(grown.ids) - len(first.ids)
        assert walked and 0 < max(walked) == added <= 80, walked
        _same(grown, _listing(tmp_path, 0))
        first = grown


def test_a_pool_spliced_among_its_files_is_listed_checking_its_new_records_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Later runs after a file of new records that sorts before the old ones, then one
    between them: the record cache lays the new records among the old rows, and each
    listing walks the new records alone and is the listing a run with nothing kept
    makes (the new ids at their places among the old)."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "m.json", generate_pool(600, seed=99))
    first = _listing(tmp_path, BUDGET)
    for name, seed in (("a.json", 3099), ("b.json", 3100)):  # before m, then between a and m
        _write(tmp_path / "data" / name, generate_pool(80, seed=seed))
        walked = _walks(monkeypatch)
        spliced = _listing(tmp_path, BUDGET)
        monkeypatch.undo()
        added = len(spliced.ids) - len(first.ids)
        assert walked and 0 < max(walked) == added <= 80, walked
        old = set(first.ids)
        assert tuple(i for i in spliced.ids if i in old) == first.ids  # in their order
        assert spliced.ids != first.ids + spliced.ids[len(first.ids) :]  # not at the end
        _same(spliced, _listing(tmp_path, 0))
        first = spliced


def test_a_first_runs_scoring_keeps_the_listing_the_next_run_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run lists nothing (no model served before it) but its gate's scoring
    names its records: in a resident process they are named as a listing, checked and
    kept, so the next run's listing walks its new records alone."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "a.json", generate_pool(600, seed=99))
    scan, _ = scan_files(tmp_path / "data", None)
    request = TrainRequest(
        agent="se_darwin",
        precision_reason="test",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "ck",
        data_path=tmp_path / "data",
        keep_in_memory_bytes=BUDGET,
        snapshot=AgentSnapshot(data=DataCheck(scan=scan)),
    )
    named = scoring._run_pool(request, TaskOptions()).ids  # what score_records names
    _write(tmp_path / "data" / "z.json", generate_pool(80, seed=3099))
    walked = _walks(monkeypatch)
    grown = _listing(tmp_path, BUDGET)
    monkeypatch.undo()
    assert grown.ids[: len(named)] == named
    assert walked and max(walked) == len(grown.ids) - len(named) <= 80, walked
    _same(grown, _listing(tmp_path, 0))


def test_a_relabelled_pool_is_listed_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record among the old ones relabelled, and a file added: the pool is not the
    last one grown, and its listing is checked whole, the listing made from nothing."""
    (tmp_path / "data").mkdir()
    pool = generate_pool(600, seed=99)
    _write(tmp_path / "data" / "a.json", pool)
    _listing(tmp_path, BUDGET)
    record = next(r for r in pool["trajectories"].values() if "success_score" in r)
    record["success_score"] = 1.0 - record["success_score"]
    _write(tmp_path / "data" / "a.json", pool)
    _write(tmp_path / "data" / "z.json", generate_pool(80, seed=3099))
    walked = _walks(monkeypatch)
    listed = _listing(tmp_path, BUDGET)
    monkeypatch.undo()
    assert max(walked) == len(listed.ids)
    _same(listed, _listing(tmp_path, 0))
