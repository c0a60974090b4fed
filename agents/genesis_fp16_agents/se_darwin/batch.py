"""The SE-Darwin task's data on the device: a part of the pool as one batch of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
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


class Labels(NamedTuple):
    """The records' labels as columns: success, score (None: unknown), outcome index."""

    success: Sequence[bool]
    score: Sequence[float | None]
    outcome: Sequence[int]

    @classmethod
    def of(cls, examples: Sequence[Example]) -> Labels:
        labels = [e.label for e in examples]
        return cls(
            [x.success for x in labels],
            [x.score for x in labels],
            [_OUTCOME[x.outcome] for x in labels],
        )

    @classmethod
    def of_rows(cls, columns: PoolColumns, rows: np.ndarray) -> Labels:
        """The labels of the read's examples ``rows`` (positions in ``columns.labelled``)."""
        picks = rows.tolist()
        return cls(
            columns.success[rows].tolist(),
            list(map(columns.label_score.__getitem__, picks)),
            columns.outcome[rows].tolist(),
        )


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
    return batch_of(x, Labels.of(examples), folds)


def batch_of(x: torch.Tensor, labels: Labels, folds: Sequence[int] | None = None) -> Batch:
    """Encoded features ``x``, the same records' labels and folds, as one batch."""
    n = len(labels.success)
    return Batch(
        x=x,
        success=torch.tensor(labels.success, dtype=torch.float32).reshape(n),
        score=torch.tensor(
            [0.0 if v is None else v for v in labels.score], dtype=torch.float32
        ).reshape(n),
        score_known=torch.tensor([v is not None for v in labels.score], dtype=torch.bool).reshape(
            n
        ),
        outcome=torch.tensor(labels.outcome, dtype=torch.long).reshape(n),
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
