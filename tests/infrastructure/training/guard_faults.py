"""Fault set-ups for the precision guard: real fp16 runs through ``fit()`` that demote.

Shared by the guard's own tests (tests/infrastructure/training/run/test_guard.py) and the
daemon's recording tests (tests/genesis_fp16/jobs/test_guard_record.py), which put this folder
on ``sys.path``. Each entry of ``CASES`` makes one trigger fire at step ``DEMOTED_AT``
and roll back to ``ROLLBACK_TO``; the next rung is bf16 on every CPU (see ``BASE``)::

    fault, guard, scaler = CASES["divergence"]
    result = guarded_run(FaultTask(fault), tmp_path, guard, scaler)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, StepLR

from genesis_fp16_infrastructure.training import (
    FitOptions,
    FitResult,
    GuardConfig,
    ScalerConfig,
    fit,
)

Batch = tuple[int, torch.Tensor, torch.Tensor]
BATCHES_PER_EPOCH = 8
STEPS = 40
FAULT_STEP = 17  # inside the check interval 16..20: the last spotless check is step 15
CHECK = 5
DEMOTED_AT = 20  # the first check after the fault
ROLLBACK_TO = 15  # the last spotless check
DEFAULT_SCALER = ScalerConfig()


class FaultTask:
    """A tiny regression whose loss goes bad from ``fault_step`` in the ``fault_in`` dtypes.

    Faults: ``overflow`` keeps the loss value but multiplies its gradient by 1e9, so fp16
    gradients overflow at any loss scale; ``nan`` makes the loss NaN; ``divergence``
    multiplies the loss value by 1000 and leaves its gradient alone; ``nan_grad`` keeps the
    loss value and makes every gradient NaN. ``until`` ends it.
    """

    def __init__(
        self,
        fault: str | None,
        fault_step: int = FAULT_STEP,
        until: int | None = None,
        fault_in: tuple[torch.dtype, ...] = (torch.float16,),
    ) -> None:
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(BATCHES_PER_EPOCH * 16, 4, generator=g)
        self.y = torch.tanh(self.x.sum(dim=1, keepdim=True)) + 0.1
        self.fault, self.fault_step, self.until, self.fault_in = fault, fault_step, until, fault_in

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-2)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return [StepLR(optimizers[0], step_size=7, gamma=0.9)]

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(seed + epoch))
        for i in range(BATCHES_PER_EPOCH):
            idx = order[i * 16 : (i + 1) * 16]
            yield (epoch * BATCHES_PER_EPOCH + i, self.x[idx], self.y[idx]), 16

    def _faulty(self, step: int) -> bool:
        if self.fault is None or step < self.fault_step:
            return False
        if self.until is not None and step >= self.until:
            return False
        if not torch.is_autocast_enabled("cpu"):  # fp32 runs without autocast
            return torch.float32 in self.fault_in
        return torch.get_autocast_dtype("cpu") in self.fault_in

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        step, x, y = batch
        loss = F.mse_loss(model(x).float(), y)
        if not self._faulty(step):
            return loss
        if self.fault == "overflow":
            return loss + (1e9 * loss - (1e9 * loss).detach())
        if self.fault == "nan":
            return loss * float("nan")
        if self.fault == "nan_grad":  # a finite loss whose gradients are all NaN
            return _NanGradient.apply(loss)
        return loss + (999.0 * loss).detach()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": float(F.mse_loss(model(self.x).float(), self.y))}

    def extra_state(self) -> dict[str, object]:
        return {}


class _NanGradient(torch.autograd.Function):
    """The identity forward; a NaN gradient backward (a finite loss that cannot train)."""

    @staticmethod
    def forward(ctx: object, loss: torch.Tensor) -> torch.Tensor:
        return loss.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("nan")


def guarded_run(
    task: FaultTask, folder: Path, guard: GuardConfig, scaler: ScalerConfig = DEFAULT_SCALER
) -> FitResult:
    """``STEPS`` guarded steps of ``task`` in fp16, checkpointed in ``folder``."""
    options = FitOptions(
        precision="fp16",
        steps=STEPS,
        checkpoint_dir=folder,
        log_interval=10,
        guard=guard,
        scaler=scaler,
    )
    return fit(task, options)


# bf16_needs_native=False: the ladder is fp16 -> bf16 -> fp32 on every CPU, so these set-ups
# test the same demotions on a CPU without native bf16 (bf16 then runs emulated: real bf16
# arithmetic, slower). test_guard.py checks the hardware rule itself.
BASE = GuardConfig(
    check_interval=CHECK,
    overflow_window=CHECK,
    overflow_warmup=0,
    divergence_warmup=2,
    bf16_needs_native=False,
)
# The reason each set-up demotes for -> (fault, guard, scaler). scaler_unstable turns the
# overflow-rate trigger off, so only the scaler sitting at its floor can fire.
CASES = {
    "overflow_rate": ("overflow", BASE, ScalerConfig()),
    "nonfinite_loss": ("nan", BASE, ScalerConfig()),
    "divergence": ("divergence", BASE, ScalerConfig()),
    "scaler_unstable": (
        "overflow",
        GuardConfig(check_interval=CHECK, overflow_rate_limit=None, bf16_needs_native=False),
        ScalerConfig(init_scale=4.0, unstable_after=1),
    ),
}
