"""The SE-Darwin world model as a ``TrainingTask`` for ``infrastructure.training.fit``.

The data is read once, split into train and held-out parts by a hash of (seed,
trajectory_id) so that the split does not depend on file order, encoded with a feature
encoder fitted on the train part (or the one saved in the checkpoint being resumed), and
kept as tensors on the training device.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from infrastructure.data.readers import ReadResult, read_trajectories
from infrastructure.data.schema import SCHEMA_VERSION, Example
from infrastructure.plugin_api import TrainRequestError
from infrastructure.world_model.features import FeatureEncoder
from infrastructure.world_model.metrics import accuracy, auc, brier, mae
from infrastructure.world_model.model import ModelConfig, WorldModel, world_model_losses
from infrastructure.world_model.predict import world_model_state

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskOptions:
    """Knobs of one SE-Darwin run; ``TrainRequest.options`` may set any of them."""

    preset: str = "default"
    hidden: int | None = None
    depth: int | None = None
    batch_size: int = 256
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    eval_fraction: float = 0.1

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> TaskOptions:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TrainRequestError(
                f"unknown se_darwin option(s) {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(known))}"
            )
        out = cls(**options)
        if not 0.0 < out.eval_fraction < 1.0:
            raise TrainRequestError(f"eval_fraction={out.eval_fraction!r}: must be between 0 and 1")
        if out.batch_size < 1:
            raise TrainRequestError(f"batch_size={out.batch_size!r}: must be at least 1")
        return out


class Batch(NamedTuple):
    x: torch.Tensor
    success: torch.Tensor
    score: torch.Tensor
    score_known: torch.Tensor
    outcome: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in self))

    def take(self, index: torch.Tensor) -> Batch:
        return Batch(*(t[index] for t in self))

    def __len__(self) -> int:
        return int(self.x.shape[0])


def is_held_out(trajectory_id: str, seed: int, fraction: float) -> bool:
    """The deterministic split: a stable hash of (seed, id), independent of file order."""
    digest = hashlib.blake2b(f"{seed}:{trajectory_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def to_batch(
    encoder: FeatureEncoder, examples: Sequence[Example], scores: Mapping[str, float]
) -> Batch:
    """Encode examples and their labels into one batch of tensors."""
    x = encoder.encode([e.attempt for e in examples], scores)
    return Batch(
        x=x,
        success=torch.tensor([float(e.label.success) for e in examples]),
        score=torch.tensor([e.label.score if e.label.score is not None else 0.0 for e in examples]),
        score_known=torch.tensor([e.label.score is not None for e in examples]),
        outcome=torch.tensor([e.label.outcome_index for e in examples], dtype=torch.long),
    )


def split_examples(
    data: ReadResult, seed: int, eval_fraction: float
) -> tuple[list[Example], list[Example]]:
    train = [e for e in data.examples if not is_held_out(e.trajectory_id, seed, eval_fraction)]
    held = [e for e in data.examples if is_held_out(e.trajectory_id, seed, eval_fraction)]
    if not train or not held:
        raise TrainRequestError(
            f"{len(data.examples)} labelled example(s) cannot be split into train and "
            f"held-out parts (eval_fraction={eval_fraction}); add data"
        )
    return train, held


class SEDarwinTask:
    """Everything ``fit()`` needs to train the SE-Darwin world model on one dataset."""

    def __init__(
        self,
        data: ReadResult,
        options: TaskOptions,
        seed: int,
        device: str = "cpu",
        saved: Mapping[str, Any] | None = None,
    ) -> None:
        self.options = options
        self.seed = seed
        train, held = split_examples(data, seed, options.eval_fraction)
        if saved is not None:  # resuming: encode exactly as the checkpointed run did
            self.encoder = FeatureEncoder.from_state(saved["encoder"])
            self.config = ModelConfig.from_dict(saved["model"])
        else:
            self.encoder = FeatureEncoder.fit([e.attempt for e in train], data.scores)
            overrides = {k: v for k in ("hidden", "depth") if (v := getattr(options, k))}
            self.config = ModelConfig.preset(options.preset, self.encoder.n_features, **overrides)
        self.train_data = to_batch(self.encoder, train, data.scores).to(device)
        self.eval_data = to_batch(self.encoder, held, data.scores).to(device)
        logger.info(
            "se_darwin task: %d train, %d held-out examples, %d features, model %s",
            len(train),
            len(held),
            self.encoder.n_features,
            self.config,
        )

    @classmethod
    def from_path(
        cls,
        path: Path,
        options: TaskOptions,
        seed: int,
        device: str = "cpu",
        quarantine: Path | None = None,
        saved: Mapping[str, Any] | None = None,
    ) -> tuple[SEDarwinTask, ReadResult]:
        data = read_trajectories(path, quarantine=quarantine)
        return cls(data, options, seed, device, saved), data

    def build_model(self) -> nn.Module:
        return WorldModel(self.config)

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        device = next(model.parameters()).device.type
        return [
            torch.optim.AdamW(
                model.parameters(),
                lr=self.options.learning_rate,
                weight_decay=self.options.weight_decay,
                fused=device in ("cpu", "cuda"),
                # Step counters on the device, so the whole step can be a CUDA graph
                # (cuda_graph); the same arithmetic as without. CPU steps cannot be captured.
                capturable=device == "cuda",
            )
        ]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.train_data), generator=generator)
        size = self.options.batch_size
        for start in range(0, len(order), size):
            index = order[start : start + size].to(self.train_data.x.device)
            yield self.train_data.take(index), len(index)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return world_model_losses(model(batch.x), *batch[1:]).total

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        data = self.eval_data
        out = model(data.x)
        parts = world_model_losses(out, *data[1:])
        success_p = torch.sigmoid(out.success_logit.float())
        expected = torch.sigmoid(out.score_logit.float())
        return {
            "loss": float(parts.total),
            "success_bce": float(parts.success),
            "score_mse": float(parts.score),
            "outcome_ce": float(parts.outcome),
            "auc": auc(success_p, data.success),
            "brier": brier(success_p, data.success),
            "score_mae": mae(expected, data.score, data.score_known),
            "outcome_accuracy": accuracy(out.outcome_logits.float(), data.outcome),
            "examples": float(len(data)),
        }

    def extra_state(self) -> dict[str, Any]:
        return world_model_state(
            self.encoder,
            self.config,
            agent="se_darwin",
            data_schema_version=SCHEMA_VERSION,
            split={"seed": self.seed, "eval_fraction": self.options.eval_fraction},
        )

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if state.get("encoder") != self.encoder.state_dict():
            raise TrainRequestError(
                "the checkpoint's feature encoder differs from this run's; resume with the "
                "checkpoint's encoder (SEDarwinTask(saved=...)) or start a fresh checkpoint folder"
            )
