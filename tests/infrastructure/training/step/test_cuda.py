"""CUDA-only checks: sync-free steady-state steps, step times, fit() on the GPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import (
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
    TrainerConfig,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

Batch = tuple[torch.Tensor, torch.Tensor]


def _setup(precision: str, width: int = 256) -> tuple[Trainer, list[Batch]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, 1)).cuda()
    policy = PrecisionPolicy.create(precision, "cuda", ScalerConfig(init_scale=1024.0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    trainer = Trainer(model, [opt], policy, TrainerConfig(log_interval=10_000))
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = []
    for _ in range(8):
        x = torch.randn(128, 64, device="cuda", generator=g)
        batches.append((x, x[:, :1] * 0.5))
    return trainer, batches


def _mse(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.mse_loss(model(batch[0]).float(), batch[1])


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_steady_state_steps_do_not_sync_the_host(precision: str) -> None:
    """30 steady-state steps with fused AdamW run under set_sync_debug_mode('error')."""
    trainer, batches = _setup(precision)
    assert not trainer.host_sync_per_step
    for b in batches[:3]:  # warm-up: lazy optimizer state, autocast caches
        trainer.step([b], _mse, 128)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(30):
            trainer.step([batches[i % len(batches)]], _mse, 128)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    summary = trainer.summary()
    assert summary.step == 33 and summary.precision == precision


@pytest.mark.slow
def test_fp16_and_bf16_step_times_against_fp32(capsys: pytest.CaptureFixture[str]) -> None:
    """Each precision trains on a 1024-wide MLP; step times are printed, never asserted."""
    times = {}
    for precision in ("fp32", "bf16", "fp16"):
        trainer, batches = _setup(precision, width=1024)
        for b in batches[:5]:
            trainer.step([b], _mse, 128)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(50):
            trainer.step([batches[i % len(batches)]], _mse, 128)
        torch.cuda.synchronize()
        times[precision] = (time.perf_counter() - start) / 50
        assert trainer.summary().optimizer_steps > 0
    with capsys.disabled():
        name = torch.cuda.get_device_name()
        cells = ", ".join(f"{k} {v:.5f}" for k, v in times.items())
        print(f"\n[{name}] seconds per step: {cells}")


def test_fit_trains_in_fp16_on_cuda(tmp_path: Path) -> None:
    """fit() resolves auto to fp16 on CUDA and trains with a checkpoint."""
    from genesis_fp16_infrastructure.training import FitOptions, fit

    class Task:
        def build_model(self) -> nn.Module:
            return nn.Linear(8, 1)

        def build_optimizers(self, model: nn.Module) -> list[torch.optim.Optimizer]:
            return [torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)]

        def build_schedulers(self, optimizers: object) -> tuple[()]:
            return ()

        def train_batches(self, epoch: int, seed: int) -> list[tuple[Batch, int]]:
            g = torch.Generator().manual_seed(seed * 31 + epoch)
            x = torch.randn(4, 16, 8, generator=g).cuda()
            return [((x[i], x[i][:, :1]), 16) for i in range(4)]

        def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
            return _mse(model, batch)

        def evaluate(self, model: nn.Module) -> dict[str, float]:
            return {"loss": 0.0}

        def extra_state(self) -> dict[str, object]:
            return {}

    result = fit(Task(), FitOptions(device="cuda", steps=10, checkpoint_dir=tmp_path))
    assert result.precision.used == "fp16" and result.summary.step == 10
    assert result.checkpoint is not None and result.checkpoint.exists()
