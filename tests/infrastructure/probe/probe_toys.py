"""Small models with known precision behaviour, and ProbeSetups around them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from genesis_fp16_infrastructure.contract.plugin_api import ProbeSetup

Batch = tuple[torch.Tensor, torch.Tensor]


class Amplifier(nn.Module):
    """Multiplies its input by a constant: 1e5 pushes any |x| > 0.66 past fp16's 65504."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def regression_batches(features: int, count: int = 3, rows: int = 32, seed: int = 0) -> list[Batch]:
    """Noisy linear-regression batches: the two halves of a batch disagree, as real data do."""
    gen = torch.Generator().manual_seed(seed)
    true = torch.randn(features, 1, generator=gen)
    out = []
    for _ in range(count):
        x = torch.randn(rows, features, generator=gen)
        out.append((x, x @ true + 0.5 * torch.randn(rows, 1, generator=gen)))
    return out


def mse(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def halves(batch: Batch) -> tuple[Batch, Batch]:
    x, y = batch
    n = x.shape[0] // 2
    return (x[:n], y[:n]), (x[n:], y[n:])


def setup_for(
    build: Callable[[], nn.Module],
    features: int,
    components: dict[str, list[str]] | None = None,
    learning_rate: float = 1e-2,
) -> ProbeSetup:
    return ProbeSetup(
        build_model=build,
        loss=mse,
        batches=regression_batches(features),
        split_batch=halves,
        components=components or {},
        learning_rate=learning_rate,
    )


def overflowing_model() -> nn.Module:
    """Linear -> Amplifier(1e5) -> Linear: only the amplifier's output passes 65504 first."""
    return nn.Sequential(
        OrderedDict(
            encoder=nn.Linear(4, 8),
            amplifier=Amplifier(1e5),
            head=nn.Linear(8, 1),
        )
    )


def small_init_model() -> nn.Module:
    """Two linear layers with weights of scale 0.02 (GPT-2's init), biases zero."""
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    for module in model:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
    return model
