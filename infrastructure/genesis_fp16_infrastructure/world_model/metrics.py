"""Held-out metrics of the world model: AUC and Brier for success, MAE, class accuracy.

>>> auc(torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0]))
1.0
"""

from __future__ import annotations

import math

import numpy as np
import torch


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count half); NaN with one class only."""
    return auc_with_interval(scores, labels)[0]


def auc_with_interval(scores: torch.Tensor, labels: torch.Tensor) -> tuple[float, float, float]:
    """The AUC and its 95% interval (Hanley and McNeil's standard error, clipped to [0, 1]).

    It says how much of an AUC is the held-out split's luck: with ~500 records and an AUC
    near 0.75 it is about +-0.045; two runs whose intervals overlap widely did not differ.

    >>> value, low, high = auc_with_interval(torch.rand(1000), torch.rand(1000) > 0.5)
    >>> 0.0 <= low < value < high <= 1.0
    True
    """
    scores = scores.detach().double().flatten()
    labels = labels.detach().flatten() > 0.5
    n_pos = int(labels.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan, math.nan, math.nan
    rank_sum = float(_average_ranks(scores)[labels].sum())
    value = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    q1, q2 = value / (2 - value), 2 * value * value / (1 + value)
    var = (value * (1 - value) + (n_pos - 1) * (q1 - value**2) + (n_neg - 1) * (q2 - value**2)) / (
        n_pos * n_neg
    )
    half = 1.96 * math.sqrt(max(var, 0.0))  # 95%: the normal quantile
    return value, max(0.0, value - half), min(1.0, value + half)


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks, a run of equal values sharing the mean of its ranks: (first + last)
    / 2 of the run, found with tensor ops (a Python step per distinct value cost 85 ms on
    20,000 validation records, at every validation)."""
    n = values.numel()
    order = _order(values)
    sorted_values = values[order]
    starts = torch.ones(n, dtype=torch.bool, device=values.device)
    starts[1:] = sorted_values[1:] != sorted_values[:-1]
    run = torch.cumsum(starts, 0) - 1  # each sorted position's run
    first = torch.nonzero(starts).flatten()  # each run's first position (0-based)
    last = torch.cat([first[1:], torch.tensor([n], device=values.device)]) - 1
    mean_rank = (first + last).double() / 2 + 1
    ranks = torch.empty_like(values)
    ranks[order] = mean_rank[run].to(values.dtype)
    return ranks


def _order(values: torch.Tensor) -> torch.Tensor:
    """An order that sorts ``values`` and ranks them as a stable sort does. Of equal values
    any order does (they share their run's mean rank), so on the CPU numpy's vectorised
    sort is taken, 0.85 ms for 20,000 held-out scores where ``torch.argsort(stable=True)``
    took 7 ms, at every evaluation (issue 90: the held-out part grows with the pool);
    only NaNs, each a run of its own, sorted last, are put back in a stable sort's order."""
    if values.device.type != "cpu":
        return torch.argsort(values, stable=True)
    array = values.numpy()
    order = np.argsort(array)
    nans = int(np.isnan(array).sum())
    if nans:
        order[-nans:].sort()
    return torch.from_numpy(order)


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
