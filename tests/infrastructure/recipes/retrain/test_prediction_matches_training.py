"""The prediction API scores a held-out record exactly as the training run encoded it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from se_darwin_runs import train

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.world_model.predict import (
    WorldModelPredictor,
    read_world_model_state,
)

OPTIONS = {"max_epochs": 1, "hidden": 8, "cross_validation": False}


def test_predictions_equal_the_training_runs_features_and_outputs(tmp_path: Path) -> None:
    """Features of the held-out part from the predictor's encoder (column-wise) are the
    task's bits, and its success probabilities are the model's on the task's batch."""
    data_path = tmp_path / "pool.json"
    data_path.write_text(json.dumps(generate_pool(600, seed=6)))
    result = train(data_path, tmp_path / "ck", steps=None, options=OPTIONS)
    found = CheckpointManager(Path(str(result.checkpoint)).parent).load_latest()
    assert found is not None and result.checkpoint is not None
    saved = read_world_model_state(found[0])
    data = read_trajectories(data_path)
    task = WorldModelTask(data, TaskOptions.from_mapping(OPTIONS), 3, saved=saved)
    predictor = WorldModelPredictor.load(result.checkpoint)
    held = [data.examples[r] for r in task.split.held_out]
    x = predictor.encoder.encode([e.attempt for e in held], data.pool)
    assert torch.equal(x.view(torch.int32), task.eval_data.x.view(torch.int32))
    scored = predictor.predict([e.attempt for e in held], data.pool)
    with torch.no_grad():
        expected = torch.sigmoid(predictor.model(task.eval_data.x).success_logit.float())
    assert [p.success_probability for p in scored] == expected.tolist()
