"""The AUC's ranks sorted by numpy on the CPU (issue 90: the held-out part's metrics grow
with the pool): the same AUC and interval, bit for bit, as torch's stable sort gave."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure.world_model import metrics


def _stable_ranks(values: torch.Tensor) -> torch.Tensor:
    """The ranks as ``_average_ranks`` computed them before: torch's stable argsort."""
    n = values.numel()
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = sorted_values[1:] != sorted_values[:-1]
    run = torch.cumsum(starts, 0) - 1
    first = torch.nonzero(starts).flatten()
    last = torch.cat([first[1:], torch.tensor([n])]) - 1
    ranks = torch.empty_like(values)
    ranks[order] = ((first + last).double() / 2 + 1)[run].to(values.dtype)
    return ranks


@pytest.mark.parametrize("distinct", [3, 50, 20_000])
def test_ranks_and_auc_equal_the_stable_sorts(
    distinct: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ties, signed zeros and NaNs included: the same ranks and AUC, bit for bit, and on
    the CPU no torch argsort (7 ms on 20,000 scores; numpy's 0.85 ms)."""
    generator = torch.Generator().manual_seed(distinct)
    scores = torch.randint(distinct, (20_000,), generator=generator).double() / distinct
    scores[:5] = torch.tensor([0.0, -0.0, math.nan, -0.0, math.nan], dtype=torch.float64)
    labels = torch.rand(20_000, generator=generator) > 0.4
    expected = _stable_ranks(scores)
    stable_auc = metrics.auc_with_interval(scores, labels)  # before the patch below

    def refused(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("torch.argsort on the CPU: numpy's sort is the one used")

    monkeypatch.setattr(torch, "argsort", refused)
    assert torch.equal(metrics._average_ranks(scores), expected)
    assert metrics.auc_with_interval(scores, labels) == stable_auc
