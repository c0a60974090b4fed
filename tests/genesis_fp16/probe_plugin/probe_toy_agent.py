"""A test-only agent whose only real method is probe_setup: a small regression MLP.

``--data`` may name a ``torch.save``d dict with ``x`` and ``y``; otherwise the batches
are synthetic, from the seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16.plugin_api import API_VERSION, ProbeSetup, TrainRequest, TrainResult

Batch = tuple[torch.Tensor, torch.Tensor]


def _build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def _split(batch: Batch) -> tuple[Batch, Batch]:
    x, y = batch
    n = x.shape[0] // 2
    return (x[:n], y[:n]), (x[n:], y[n:])


class ProbeToyAgent:
    api_version = API_VERSION
    name = "probe_toy"
    description = "test fixture: a small MLP for the probe CLI"

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(count, 8, generator=gen)
        path = out / "toy.pt"
        torch.save(
            {"x": x, "y": x.sum(1, keepdim=True) + torch.randn(count, 1, generator=gen)}, path
        )
        return path

    def train(self, request: TrainRequest) -> TrainResult:
        raise NotImplementedError("the probe fixture does not train")

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        if data_path is None:
            gen = torch.Generator().manual_seed(seed)
            x = torch.randn(96, 8, generator=gen)
            y = x.sum(1, keepdim=True) + torch.randn(96, 1, generator=gen)
        else:
            data: dict[str, Any] = torch.load(data_path, weights_only=True)
            x, y = data["x"], data["y"]
        batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, x.shape[0] - 31, 32)]
        return ProbeSetup(_build, _loss, batches, _split, {"head": ["2"]}, 1e-2)


plugin = ProbeToyAgent()
