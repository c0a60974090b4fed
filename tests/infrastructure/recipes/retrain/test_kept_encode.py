"""A record is encoded once (issue 90, item 2): a task whose numeric rows come from the
kept ones (world_model.kept_numeric) is the task that works every record out, tensor for
tensor and, trained, weight for weight; and its encode works out only what is new."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain import run as retrain_run
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.run.fit import fit
from genesis_fp16_infrastructure.training.run.task import FitOptions
from genesis_fp16_infrastructure.world_model import features
from genesis_fp16_infrastructure.world_model.kept_numeric import KeptNumeric
from genesis_fp16_infrastructure.world_model.lineage_columns import PoolIndex

SEED = 5


def _write(folder: Path, name: str, pool: dict[str, Any], records: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    trajectories = {r["trajectory_id"]: r for r in records}
    (folder / name).write_text(json.dumps({**pool, "trajectories": trajectories}))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    return torch.equal(a, b)


@pytest.mark.parametrize("cross_validation", [False, True])
def test_a_task_from_kept_rows_trains_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cross_validation: bool
) -> None:
    """A pool's first run keeps its rows; the next run, 60 records later, takes the kept
    ones: the same encoded parts, encoder and numeric rows bit for bit as a task that
    works every record out, the same weights after 12 steps, and the per-record work
    (features.numeric_rows) asked for the new records and their siblings alone."""
    pool = generate_pool(3400 if not cross_validation else 700, seed=SEED)
    records = list(pool["trajectories"].values())
    data_folder = tmp_path / "data"
    _write(data_folder, "a.json", pool, records[:-60])
    options = TaskOptions.from_mapping({"cross_validation": cross_validation, "batch_size": 64})
    first = read_trajectories(data_folder, keep_text=False)
    WorldModelTask(first, options, SEED, kept=KeptNumeric(tmp_path / "cache", data_folder))
    _write(data_folder, "b.json", pool, records[-60:])
    data = read_trajectories(data_folder, keep_text=False)
    asked: list[int] = []
    real = features.numeric_rows

    def counted(
        columns: PoolColumns, rows: np.ndarray, index: PoolIndex | None = None
    ) -> torch.Tensor:
        asked.append(len(rows))
        return real(columns, rows, index)

    monkeypatch.setattr(features, "numeric_rows", counted)
    kept = KeptNumeric(tmp_path / "cache", data_folder)
    cached = WorldModelTask(data, options, SEED, kept=kept)
    # The 60 new records and those sharing a parent with them, of 700 or 3,400.
    assert kept.computed == sum(asked) and 0 < kept.computed < 3 * 60
    monkeypatch.setattr(features, "numeric_rows", real)
    plain = WorldModelTask(data, options, SEED)
    assert cached.encoder == plain.encoder
    for part in ("train_data", "validation_data", "eval_data"):
        for a, b in zip(getattr(cached, part), getattr(plain, part), strict=True):
            assert _same(a, b), part
    rows_a, rows_b = cached.take_numeric_rows(), plain.take_numeric_rows()
    assert rows_a is not None and rows_b is not None and _same(rows_a, rows_b)
    folders = [tmp_path / "ck-kept", tmp_path / "ck-plain"]
    trained = [
        fit(task, FitOptions(steps=12, seed=SEED, checkpoint_dir=folder))
        for task, folder in zip((cached, plain), folders, strict=True)
    ]
    saved = [torch.load(r.checkpoint, weights_only=True) for r in trained if r.checkpoint]
    assert len(saved) == 2 and saved[0][keys.EXTRA]["encoder"] == saved[1][keys.EXTRA]["encoder"]
    for a, b in ((saved[0][keys.MODEL], saved[1][keys.MODEL]),):
        assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


@pytest.mark.parametrize("budget", [64 * 2**20, 0])
def test_a_later_run_in_one_process_appends_its_new_rows(tmp_path: Path, budget: int) -> None:
    """Two runs in one process, as a resident run process serves them: the later run, 40
    records on (a file sorting last), works out only the new records and those beside
    them and appends to the kept file (its inode kept, not written whole); with a memory
    budget it takes the kept pool from memory, with a budget of 0 from the file."""
    pool = generate_pool(600, seed=SEED)
    records = list(pool["trajectories"].values())
    data = tmp_path / "data"
    _write(data, "a.json", pool, records[:-40])

    def run(name: str) -> dict[str, Any]:
        request = TrainRequest(
            agent="se_darwin", precision=PrecisionRequest("fp32"), precision_reason="test",
            state_dir=tmp_path / "state", checkpoint_dir=tmp_path / "state" / name,
            data_path=data, seed=SEED, steps=4, keep_in_memory_bytes=budget,
            options={"hidden": 8, "cross_validation": False},
        )  # fmt: skip
        result = retrain_run.train(request)
        return dict(result.extra["record_cache"])

    first = run("first")
    assert first["numeric_computed"] > 500
    kept_file = next((tmp_path / "state").rglob("numeric-*.gfnum"))
    before = kept_file.stat()
    _write(data, "b.json", pool, records[-40:])
    later = run("later")
    after = kept_file.stat()
    assert after.st_ino == before.st_ino, "the kept file was written whole again"
    assert before.st_size < after.st_size
    assert 0 < later["numeric_computed"] < 3 * 40 and later["numeric_appended"] == 1
    assert later["numeric_from_memory"] == (1 if budget else 0)
