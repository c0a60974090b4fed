"""The SE-Darwin agent plugin: generates data, trains the world model through ``fit()``."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from agents.se_darwin.task import Batch, SEDarwinTask, TaskOptions
from infrastructure.data.readers import read_trajectories
from infrastructure.data.synthetic import write_pool
from infrastructure.plugin_api import (
    API_VERSION,
    AgentOption,
    ProbeSetup,
    TrainRequest,
    TrainRequestError,
    TrainResult,
)
from infrastructure.training import CheckpointManager, fit
from infrastructure.training.distributed import rank_and_world
from infrastructure.world_model.model import HEAD_MODULES, PRESETS, TRUNK_MODULES, WorldModel
from infrastructure.world_model.predict import read_world_model_state

logger = logging.getLogger(__name__)

_PROBE_BATCHES = 9
# One line each for `genesis-fp16 agents --json`; a TaskOptions field missing here is
# still declared, pointing at docs/se-darwin.md.
_OPTION_HELP = {
    "preset": "world-model size preset (hidden and depth; hidden/depth override it)",
    "hidden": "hidden width of the world model (default: the preset's)",
    "depth": "hidden layers of the world model (default: the preset's)",
    "batch_size": "examples per step (default 256, fewer on small pools: 8+ steps an epoch)",
    "learning_rate": "AdamW learning rate",
    "weight_decay": "AdamW weight decay",
    "eval_fraction": "held-out share of the pool (default: sized by the pool)",
    "early_stopping": "validate and stop when validation stops improving",
    "patience": "validations without improvement before stopping",
    "validate_every": "validate every N steps when an epoch is longer",
    "max_epochs": "epoch cap of a run with no steps/epochs budget",
}


def _declared_options() -> tuple[AgentOption, ...]:
    """TaskOptions' fields as declared options (its defaults and types, one source)."""
    hints = typing.get_type_hints(TaskOptions)
    declared = []
    for f in dataclasses.fields(TaskOptions):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        kind = next(a for a in args if a in (str, int, float, bool))  # X | None: X
        choices = tuple(PRESETS) if f.name == "preset" else None
        text = _OPTION_HELP.get(f.name, "see docs/se-darwin.md")
        default = getattr(TaskOptions(), f.name)
        declared.append(AgentOption(f.name, kind.__name__, default, text, choices))
    return tuple(declared)


_PROBE_SAMPLE_COUNT = 3000


class SEDarwinPlugin:
    """Genesis's SE-Darwin agent: a world model that forecasts how an attempt will end."""

    api_version = API_VERSION
    name = "se_darwin"
    options = _declared_options()
    description = "SE-Darwin world model: success, score and outcome of a code-evolution attempt"

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        """Write ``<out>/trajectory_pools/se_darwin/trajectory_pool.json``; return its path."""
        return write_pool(Path(out), count, seed, agent=self.name)

    def train(self, request: TrainRequest) -> TrainResult:
        """Read the data, build the task (resuming its encoder), run ``fit`` and report."""
        if request.data_path is None:
            raise TrainRequestError(
                "se_darwin needs a data path: generate one with generate_sample_data"
            )
        options = TaskOptions.from_mapping(request.options)
        saved = _saved_state(request.checkpoint_dir) if request.resume else None
        quarantine = _quarantine_path(request)
        task, data = SEDarwinTask.from_path(
            Path(request.data_path), options, request.seed, request.device, quarantine, saved
        )
        steps, epochs = request.steps, request.epochs
        # No budget given: train until validation stops improving, within max_epochs. An
        # explicit steps/epochs budget runs in full (what the operator asked for), and the
        # best validated weights are still the ones served.
        own_budget = steps is None and epochs is None
        if own_budget:
            epochs = options.max_epochs
        early_stop = None
        if options.early_stopping and not request.fsdp:
            early_stop = task.early_stopping(stop=own_budget)
        result = fit(task, request.fit_options(steps=steps, epochs=epochs, early_stop=early_stop))
        summary = result.summary
        extra: dict[str, Any] = {
            "total_steps": summary.step,
            "examples": len(data.examples),
            "duplicates": data.duplicates,
            "unlabelled": data.unlabelled,
            "precision_warning": result.precision.warning,
            "resumed_from": str(result.resumed_from) if result.resumed_from else None,
            "split": {
                "train": len(task.train_data),
                "validation": len(task.validation_data),
                "held_out": len(task.eval_data),
            },
            "early_stop": dict(result.early_stop) if result.early_stop is not None else None,
        }
        if torch.cuda.is_available() and request.device.startswith("cuda"):
            extra["device_memory_peak_bytes"] = torch.cuda.max_memory_allocated(request.device)
        return TrainResult.from_fit(request, result, quarantined=data.quarantined, extra=extra)

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """The world model, its loss and a few real batches, for the precision probe."""
        options = TaskOptions()
        if data_path is None:
            with tempfile.TemporaryDirectory() as tmp:
                path = write_pool(Path(tmp), _PROBE_SAMPLE_COUNT, seed, agent=self.name)
                data = read_trajectories(path)
        else:
            data = read_trajectories(Path(data_path))
        task = SEDarwinTask(data, options, seed)
        batches = [b for b, _ in task.train_batches(0, seed)][:_PROBE_BATCHES]
        config = task.config

        def build_model() -> torch.nn.Module:
            torch.manual_seed(seed)
            return WorldModel(config)

        return ProbeSetup(
            build_model=build_model,
            loss=task.loss,
            batches=batches,
            split_batch=_split_batch,
            components={"heads": list(HEAD_MODULES), "trunk": list(TRUNK_MODULES)},
            learning_rate=options.learning_rate,
        )


def _split_batch(batch: Batch) -> tuple[Batch, Batch]:
    half = len(batch) // 2
    index = torch.arange(len(batch))
    return batch.take(index[:half]), batch.take(index[half:])


def _quarantine_path(request: TrainRequest) -> Path | None:
    """Where this process writes quarantined records: rank 0's path, None on other ranks.

    Under torchrun every rank reads the whole data file and counts and skips the same
    records; only rank 0 writes them down, so the file holds each record once.
    """
    if rank_and_world()[0] != 0:
        return None
    return request.quarantine_path or Path(request.checkpoint_dir) / "quarantine.jsonl"


def _saved_state(checkpoint_dir: Path) -> Mapping[str, Any] | None:
    """The encoder and model shape of the checkpoint a resumed run will start from."""
    found = CheckpointManager(Path(checkpoint_dir)).load_latest()
    if found is None:
        return None
    state, path = found
    saved = read_world_model_state(state)
    logger.info("resuming with the feature encoder saved in %s", path)
    return saved
