"""The fp16 loss-scale search, on models whose gradient size is set by construction."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from genesis_fp16_infrastructure.contract.plugin_api import ProbeSetup
from genesis_fp16_infrastructure.probe import run_probe, search_loss_scale


def _scaled_grads_of_loss_times(constant: float) -> Callable[[float], list[torch.Tensor | None]]:
    """A 1x1 fp16-autocast linear model whose weight gradient is exactly constant * scale."""
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    x = torch.ones(1, 1)

    def scaled_grads(scale: float) -> list[torch.Tensor | None]:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        (constant * out.float().sum() * scale).backward()
        return [model.weight.grad]

    return scaled_grads


@pytest.mark.parametrize("k", [0, 4, 10, 15])
def test_search_finds_the_largest_finite_scale_for_gradients_of_two_to_the_k(k: int) -> None:
    """A gradient of 2**k * scale is finite in fp16 up to 2**15: k + 1 halvings from 2**16."""
    found = search_loss_scale(_scaled_grads_of_loss_times(2.0**k))
    assert found.finite
    assert found.halvings == k + 1
    assert found.scale == 2.0 ** (15 - k)
    assert found.grads[0] is not None and float(found.grads[0]) == 2.0**15


def test_search_stops_at_the_floor_when_even_scale_one_overflows() -> None:
    """A gradient of 2**17 overflows fp16 at any scale >= 1: reported as not finite."""
    found = search_loss_scale(_scaled_grads_of_loss_times(2.0**17))
    assert not found.finite
    assert found.scale == 1.0
    assert found.halvings == 16


def test_probe_reports_the_halvings_of_its_fp16_variant() -> None:
    """Through run_probe: two rows of ones double the gradient, so k + 2 halvings."""
    k = 6
    x = torch.ones(2, 1)
    setup = ProbeSetup(
        build_model=_ones_linear,
        loss=lambda model, batch: 2.0**k * model(batch).float().sum(),
        batches=[x],
        split_batch=lambda batch: (batch[:1], batch[1:]),
        learning_rate=1e-6,
    )
    report = run_probe(setup, steps=1, only=["fp16_autocast", "bf16_autocast"])
    fp16 = report.variant("fp16_autocast").measures
    assert fp16.scale_halvings == k + 2
    assert fp16.loss_scale == 2.0 ** (14 - k)
    assert report.variant("bf16_autocast").measures.scale_halvings is None


def _ones_linear() -> nn.Module:
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    return model
