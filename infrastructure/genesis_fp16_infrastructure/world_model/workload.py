"""The model, data and loss every runner of ``genesis-fp16 bench`` trains: identical
across runners for one seed (the daemon's bench reaches it through the library's door,
as one object: ``from genesis_fp16_infrastructure.api import Workload``, whose
``write_data``, ``load_data`` and ``build`` are this module's functions).

The world model at a named preset, trained on the synthetic trajectory pool
that `genesis-fp16 data generate` writes, read back through the real reader and feature
encoder, encoded as the plugin and the prediction API encode: with the pool around each
attempt (its lineage) and the training part's per-agent base rates. 80% of the labelled
examples train, the last 20% are held out. :meth:`Workload.agents_trainer` builds this project's
``Trainer`` on a workload as the agents' ``fit`` builds it, ``auto`` measured as the
daemon measures it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.precision_names import RequestedName
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest
from genesis_fp16_infrastructure.training.reports import Calibration
from genesis_fp16_infrastructure.training.run.calibration import policy_for_run
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig
from genesis_fp16_infrastructure.world_model.features import (
    Categorical,
    FeatureEncoder,
    numeric_rows,
)
from genesis_fp16_infrastructure.world_model.model import (
    Labels,
    ModelConfig,
    WorldModel,
    world_model_losses,
)

# x, success, score, score_known, outcome
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]

POOL_RECORDS = 2048
TINY_POOL_RECORDS = 256
# Distinct batches when a batch is larger than the training split and is drawn from it.
RESAMPLED_BATCHES = 4
# --tiny: each preset scaled down (trains in milliseconds), its order kept: large has
# more parameters than default (24,069 against 917 on the bench pool's 49 features), as
# the full presets do (12,718,085 against 7,941; docs/benchmarks.md).
TINY_MODELS: dict[str, dict[str, int]] = {
    "default": {"hidden": 16, "depth": 1},
    "large": {"hidden": 128, "depth": 2},
}
_EVAL_CHUNK = 512


def write_data(folder: Path, tiny: bool, seed: int) -> Path:
    """Write the synthetic trajectory pool once; every configuration reads the same file."""
    return write_pool(folder, TINY_POOL_RECORDS if tiny else POOL_RECORDS, seed)


def world_model_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The world model's training loss (fp32 whatever dtype the forward ran in)."""
    x, success, score, known, outcome = batch
    return world_model_losses(model(x), success, score, known, outcome).total


@dataclass(frozen=True)
class Data:
    """Train batches and the held-out set, already on the device."""

    train_batches: list[Batch]
    eval_set: Batch

    @property
    def in_features(self) -> int:
        return int(self.eval_set[0].shape[1])


@dataclass(frozen=True)
class Workload(Data):
    """A freshly initialised model plus its train and held-out batches, on one device."""

    model: nn.Module
    loss_fn: LossFn = world_model_loss

    @staticmethod
    def write_data(folder: Path, tiny: bool, seed: int) -> Path:
        """The pool every configuration reads, written once in ``folder`` (:func:`write_data`)."""
        return write_data(folder, tiny, seed)

    @staticmethod
    def load_data(data_path: Path, batch_size: int, device: torch.device) -> Data:
        """The pool at ``data_path`` as fixed batches on ``device`` (:func:`load_data`)."""
        return load_data(data_path, batch_size, device)

    @classmethod
    def build(cls, size: str, data: Data, seed: int, tiny: bool, device: torch.device) -> Workload:
        """A fresh, seeded model at preset ``size`` with ``data`` (:func:`build_workload`)."""
        return build_workload(size, data, seed, tiny, device)

    def agents_trainer(
        self,
        optimizers: Optimizers,
        requested: RequestedName,
        device: torch.device,
        seed: int,
        batch_size: int,
        **trainer: Any,
    ) -> tuple[Trainer, PrecisionPolicy, Calibration | None]:
        """This project's ``Trainer`` on this workload, its policy and its calibration (None
        but for ``auto``): ``requested`` decided as the daemon decides it (``auto`` measured
        on copies of the workload's model, outside any timed step), then the trainer built
        on the workload's own model and ``optimizers(model)``; ``trainer``: the
        ``TrainerConfig`` fields (``max_grad_norm``, ``cuda_graph``, ``compile``)."""
        config = TrainerConfig(**trainer)
        request = PrecisionRequest(requested, mode="measure")
        task = _WorkloadTask(self, optimizers, batch_size)
        policy, calibration = policy_for_run(
            task, request, str(device), ScalerConfig(), seed, config
        )
        return Trainer(self.model, optimizers(self.model), policy, config), policy, calibration

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def batch(self, step: int) -> Batch:
        return self.train_batches[step % len(self.train_batches)]

    @torch.no_grad()
    def eval_loss(self, model: nn.Module) -> float:
        """Held-out loss in strict fp32 (no autocast): the quality of the trained weights."""
        was_training = model.training
        model.eval()
        n = self.eval_set[0].shape[0]
        total = 0.0
        for start in range(0, n, _EVAL_CHUNK):
            chunk = tuple(t[start : start + _EVAL_CHUNK] for t in self.eval_set)
            total += float(self.loss_fn(model, chunk)) * chunk[0].shape[0]  # type: ignore[arg-type]
        model.train(was_training)
        return total / n


def _tensors(data_path: Path) -> tuple[Batch, int]:
    """All labelled examples as tensors (features fitted on the training split only),
    encoded from the read's columns as the retrain recipe's task encodes them."""
    columns = read_trajectories(data_path).columns
    examples = np.arange(len(columns.labelled))
    n_train = int(len(examples) * 0.8)
    train = columns.labelled[:n_train]
    # The whole pool, not only its scores: the lineage columns (depth, grandparents,
    # parents' operators, siblings) then vary as they do when the plugin trains; with
    # the scores alone nine of them were constant, so the eval loss measured a model that
    # never saw them. Encoding 2,048 records this way costs a fraction of a second.
    numeric = numeric_rows(columns, columns.labelled)
    encoder = FeatureEncoder.fit_parts(
        Categorical.of_rows(columns, train), numeric[:n_train], columns.success[:n_train].tolist()
    )
    x = encoder.encode_parts(Categorical.of_rows(columns, columns.labelled), numeric)
    return (x, *Labels.of_rows(columns, examples)), n_train


def load_data(data_path: Path, batch_size: int, device: torch.device) -> Data:
    """Read and encode the pool at `data_path` into fixed batches of `batch_size`."""
    tensors, n_train = _tensors(data_path)
    tensors = tuple(t.to(device) for t in tensors)  # type: ignore[assignment]
    if n_train >= batch_size:
        rows = [
            torch.arange(i * batch_size, (i + 1) * batch_size) for i in range(n_train // batch_size)
        ]
    else:  # a batch larger than the training split (8192 on CUDA): rows drawn with replacement
        g = torch.Generator().manual_seed(0)
        rows = [
            torch.randint(n_train, (batch_size,), generator=g) for _ in range(RESAMPLED_BATCHES)
        ]
    train = [tuple(t[r.to(device)] for t in tensors) for r in rows]
    return Data(train, tuple(t[n_train:] for t in tensors))  # type: ignore[arg-type]


def build_workload(size: str, data: Data, seed: int, tiny: bool, device: torch.device) -> Workload:
    """A freshly initialised world model at preset `size` (seeded), with `data`."""
    overrides = TINY_MODELS[size] if tiny else {}
    torch.manual_seed(seed)
    model = WorldModel(ModelConfig.preset(size, data.in_features, **overrides)).to(device)
    return Workload(data.train_batches, data.eval_set, model)


Optimizers = Callable[[nn.Module], list[torch.optim.Optimizer]]


class _WorkloadTask:
    """The workload as a ``StepTask``, for the ``auto`` calibration: copies of its model,
    their optimizers, its batches in order."""

    def __init__(self, workload: Workload, optimizers: Optimizers, batch_size: int) -> None:
        self.workload, self.optimizers, self.batch_size = workload, optimizers, batch_size

    def build_model(self) -> nn.Module:
        return copy.deepcopy(self.workload.model)

    def build_optimizers(self, model: nn.Module) -> list[torch.optim.Optimizer]:
        return self.optimizers(model)

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        for batch in self.workload.train_batches:
            yield batch, self.batch_size

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return self.workload.loss_fn(model, batch)
