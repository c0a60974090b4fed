"""The SE-Darwin task's data on the device: a part of the pool as one batch of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.schema import OUTCOMES, Example
from genesis_fp16_infrastructure.world_model.features import FeatureEncoder, PoolLike


class Batch(NamedTuple):
    x: torch.Tensor
    success: torch.Tensor
    score: torch.Tensor
    score_known: torch.Tensor
    outcome: torch.Tensor
    fold: torch.Tensor  # each record's fold when cross-validated, else 0

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in self))

    def take(self, index: torch.Tensor) -> Batch:
        return Batch(*(t[index] for t in self))

    def __len__(self) -> int:
        return int(self.x.shape[0])


def to_batch(
    encoder: FeatureEncoder,
    examples: Sequence[Example],
    pool: PoolLike,
    folds: Sequence[int] | None = None,
    numeric: torch.Tensor | None = None,
) -> Batch:
    """Encode examples, their labels and their folds into one batch of tensors
    (``numeric``: the examples' ``numeric_columns``, when the caller has them)."""
    x = encoder.encode([e.attempt for e in examples], pool, numeric)
    labels = [e.label for e in examples]
    scores = [label.score for label in labels]
    return Batch(
        x=x,
        success=torch.tensor([label.success for label in labels], dtype=torch.float32),
        score=torch.tensor([0.0 if v is None else v for v in scores], dtype=torch.float32),
        score_known=torch.tensor([v is not None for v in scores], dtype=torch.bool),
        outcome=torch.tensor([_OUTCOME[label.outcome] for label in labels], dtype=torch.long),
        fold=torch.tensor(folds if folds is not None else [0] * len(examples), dtype=torch.long),
    )


_OUTCOME = {name: i for i, name in enumerate(OUTCOMES)}  # Label.outcome_index, looked up


def rows_in(part: Sequence[Example], examples: Sequence[Example]) -> np.ndarray | None:
    """Where ``part``'s records are in ``examples`` (the same objects); None when one is
    not there."""
    position = {id(e): i for i, e in enumerate(examples)}
    rows = [position.get(id(e)) for e in part]
    if any(i is None for i in rows):
        return None
    return np.array(rows, dtype=np.int64).reshape(len(rows))
