"""What the precision probe gets of the retrain recipe: its world model, loss and a few
real batches (``ProbeSetup``), for the same network a run trains."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from genesis_fp16_infrastructure.contract.plugin_api import ProbeSetup
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.world_model.model import HEAD_MODULES, TRUNK_MODULES

_PROBE_BATCHES = 9
_PROBE_SAMPLE_COUNT = 3000


def probe_setup(data_path: Path | None, seed: int, agent: str) -> ProbeSetup:
    """The world model, its loss and a few real batches, for the precision probe.

    It probes one network (never a cross-validated ensemble: its members are the
    same network, and its FP32 islands are named by the single model's modules)."""
    options = TaskOptions(cross_validation=False)
    if data_path is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_pool(Path(tmp), _PROBE_SAMPLE_COUNT, seed, agent=agent)
            data = read_trajectories(path)
    else:
        data = read_trajectories(Path(data_path))
    task = WorldModelTask(data, options, seed, agent=agent)
    batches = [b for b, _ in task.train_batches(0, seed)][:_PROBE_BATCHES]

    def build_model() -> torch.nn.Module:
        torch.manual_seed(seed)
        return task.build_model()  # one WorldModel: cross_validation=False

    return ProbeSetup(
        build_model=build_model,
        loss=task.loss,
        batches=batches,
        components={"heads": list(HEAD_MODULES), "trunk": list(TRUNK_MODULES)},
        learning_rate=options.learning_rate,
    )
