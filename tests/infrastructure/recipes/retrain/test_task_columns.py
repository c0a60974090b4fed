"""The task built from a read's columns equals the one built record by record (issue 36):
the same encoder, the same feature bits, the same labels and data key, and no object
per record built on the way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from genesis_fp16_infrastructure.data.readers import ReadResult, read_trajectories
from genesis_fp16_infrastructure.data.schema import OUTCOMES
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask, batch_of
from genesis_fp16_infrastructure.world_model.features import (
    FeatureEncoder,
    numeric_columns,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.model import Labels


def _read(tmp_path: Path, pool: dict[str, object], keep_text: bool = False) -> ReadResult:
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    return read_trajectories(path, keep_text=keep_text)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(
        a.view(torch.int32 if a.dtype == torch.float32 else a.dtype),
        b.view(torch.int32 if b.dtype == torch.float32 else b.dtype),
    )


@pytest.mark.parametrize("cross_validation", [False, True])
def test_the_task_from_columns_is_the_task_from_objects(
    tmp_path: Path, cross_validation: bool
) -> None:
    pool = generate_pool(4000 if not cross_validation else 600, seed=11)
    options = TaskOptions.from_mapping({"cross_validation": cross_validation})
    data = _read(tmp_path, pool)
    task = WorldModelTask(data, options, seed=2)
    # The hot path built no object per record.
    assert "examples" not in vars(data) and "pool" not in vars(data)
    # The same task from the objects, as before the columns.
    split = task.split
    train, validation, held_out = ([data.examples[r] for r in rows] for rows in split[:3])
    encoder = FeatureEncoder.fit(
        [e.attempt for e in train], data.pool, [e.label.success for e in train]
    )
    assert encoder == task.encoder
    folds = split.folds if split.fold_count else None
    for part, batch, part_folds in (
        (train, task.train_data.batch(), folds),
        (validation, task.validation_data, None),
        (held_out, task.eval_data, None),
    ):
        if cross_validation and part is not train:
            part_folds = folds  # one list: the parts are the same batch
        x = encoder.encode([e.attempt for e in part], data.pool)
        # The labels as the examples hold them (Labels.of_rows reads their columns).
        labels = [e.label for e in part]
        scores = [0.0 if y.score is None else y.score for y in labels]
        expected = batch_of(
            x,
            Labels(
                torch.tensor([float(y.success) for y in labels], dtype=torch.float32),
                torch.tensor(scores, dtype=torch.float32),
                torch.tensor([y.score is not None for y in labels], dtype=torch.bool),
                torch.tensor([OUTCOMES.index(y.outcome) for y in labels], dtype=torch.int64),
            ),
            part_folds,
        )
        for got, want in zip(batch, expected, strict=True):
            _same_bits(got, want)


def test_numbers_from_columns_equal_the_record_at_a_time_numbers(tmp_path: Path) -> None:
    data = _read(tmp_path, generate_pool(1500, seed=4), keep_text=True)
    from_columns = numeric_rows(data.columns, data.columns.labelled)
    by_objects = numeric_columns([e.attempt for e in data.examples], data.pool)
    _same_bits(from_columns, by_objects)


def test_a_pool_whose_parents_loop_gets_the_same_numbers_from_columns(tmp_path: Path) -> None:
    """A looping lineage: the task's numbers from the columns equal the record-at-a-time
    numbers from its objects, one candidate at a time against a fresh pool included."""
    pool = generate_pool(400, seed=5)
    records = list(pool["trajectories"].values())  # type: ignore[union-attr]
    a, b = records[10], records[11]
    a["parent_trajectories"] = [b["trajectory_id"]]
    b["parent_trajectories"] = [a["trajectory_id"]]
    data = _read(tmp_path, pool)
    task = WorldModelTask(data, TaskOptions.from_mapping({"cross_validation": False}), seed=1)
    numeric = task.take_numeric_rows()
    assert numeric is not None
    # One candidate at a time against a fresh pool, as the prediction API asks.
    fresh = _read(tmp_path, pool)
    walked = np.stack([numeric_columns([e.attempt], fresh.pool).numpy()[0] for e in fresh.examples])
    assert np.array_equal(numeric.numpy(), walked)
