"""Held-out metrics of the world model: AUC and Brier for success, MAE, class accuracy.

>>> auc(torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0]))
1.0
"""

from __future__ import annotations

import math

import torch


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count half); NaN with one class only."""
    scores = scores.detach().double().flatten()
    labels = labels.detach().flatten() > 0.5
    positives = int(labels.sum())
    negatives = labels.numel() - positives
    if positives == 0 or negatives == 0:
        return math.nan
    ranks = _average_ranks(scores)
    rank_sum = float(ranks[labels].sum())
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    ranks = torch.empty_like(values)
    n = values.numel()
    start = 0
    # Runs of equal values share the mean of their ranks (1-based).
    boundaries = torch.nonzero(sorted_values[1:] != sorted_values[:-1]).flatten().tolist()
    for end in [*(b + 1 for b in boundaries), n]:
        ranks[order[start:end]] = (start + end + 1) / 2
        start = end
    return ranks


def brier(probabilities: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean squared error of predicted probabilities against 0/1 labels."""
    return float((probabilities.double() - labels.double()).pow(2).mean())


def mae(predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean absolute error over the entries where ``mask`` is true; NaN when none are."""
    error = (predicted.double() - target.double()).abs()
    if mask is not None:
        error = error[mask.bool()]
    return float(error.mean()) if error.numel() else math.nan


def accuracy(logits: torch.Tensor, target: torch.Tensor) -> float:
    """Share of rows whose arg-max class equals the target class."""
    return float((logits.argmax(dim=-1) == target).double().mean())
