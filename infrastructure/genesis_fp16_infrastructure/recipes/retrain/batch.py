"""The SE-Darwin task's data on the device: a part of the pool as one batch of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.data.schema import OUTCOMES, Example


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


class Labels(NamedTuple):
    """The records' labels as arrays: success, score (0.0 where unknown), whether the
    score is known, and the outcome's index in ``schema.OUTCOMES``."""

    success: np.ndarray  # bool
    score: np.ndarray  # float64
    score_known: np.ndarray  # bool
    outcome: np.ndarray  # int64

    @classmethod
    def of(cls, examples: Sequence[Example]) -> Labels:
        labels = [e.label for e in examples]
        n = len(labels)
        scores = [x.score for x in labels]
        return cls(
            np.array([x.success for x in labels], dtype=np.bool_).reshape(n),
            np.array([0.0 if v is None else v for v in scores], dtype=np.float64).reshape(n),
            np.array([v is not None for v in scores], dtype=np.bool_).reshape(n),
            np.array([_OUTCOME[x.outcome] for x in labels], dtype=np.int64).reshape(n),
        )

    @classmethod
    def of_rows(cls, columns: PoolColumns, rows: np.ndarray) -> Labels:
        """The labels of the read's examples ``rows`` (positions in ``columns.labelled``)."""
        known = columns.label_scored[rows]
        return cls(
            columns.success[rows],
            np.where(known, columns.label_score[rows], 0.0),
            known,
            columns.outcome[rows],
        )


def batch_of(x: torch.Tensor, labels: Labels, folds: Sequence[int] | None = None) -> Batch:
    """Encoded features ``x``, the same records' labels and folds, as one batch (a score
    rounds to float32 from float64 as a Python float does)."""
    n = len(labels.success)
    return Batch(
        x=x,
        success=torch.from_numpy(labels.success.astype(np.float32)),
        score=torch.from_numpy(labels.score.astype(np.float32)),
        score_known=torch.from_numpy(labels.score_known.copy()),
        outcome=torch.from_numpy(labels.outcome.astype(np.int64)),
        fold=torch.tensor(folds if folds is not None else [0] * n, dtype=torch.long).reshape(n),
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
