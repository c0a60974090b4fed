"""Fault set-ups for the precision guard: real fp16 runs through ``fit()`` that demote.

Shared by the guard's own tests (tests/infrastructure/training/run/test_guard.py) and the
daemon's recording tests (tests/genesis_fp16/jobs/test_guard_record.py), which put this folder
on ``sys.path``. Each entry of ``CASES`` makes one trigger fire at step ``DEMOTED_AT``
and roll back to ``ROLLBACK_TO``; the next rung is bf16 on every CPU (see ``BASE``)::

    fault, guard, scaler = CASES["divergence"]
    result = guarded_run(FaultTask(fault), tmp_path, guard, scaler)

``CudaFaultTask`` is the same regression made capturable, for the captured CUDA step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
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
    Trainer,
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


class CudaFaultTask(FaultTask):
    """``FaultTask`` (no fault, or ``overflow``) in a form a CUDA graph can capture and
    replay: its data on the device, a fused, capturable AdamW and no LR scheduler, and
    the fault carried by the batch as a device tensor (1.0 on a fault step, else 0.0),
    so every batch has one signature and the captured step switches the fault on by
    value, as ``verify_capture._run``'s boosted loss does, where ``FaultTask``'s Python step number
    would give each batch a graph of its own. ``_faulty`` reads CUDA's autocast dtype.
    The batch's number is ``(boost, x, y)``'s position in the run, as in ``FaultTask``.
    """

    def __init__(
        self,
        fault: str | None,
        fault_step: int = FAULT_STEP,
        until: int | None = None,
        fault_in: tuple[torch.dtype, ...] = (torch.float16,),
        device: str = "cuda",
    ) -> None:
        if fault not in (None, "overflow"):
            raise ValueError(f"CudaFaultTask: fault {fault!r}: None or 'overflow'")
        super().__init__(fault, fault_step, until, fault_in)
        self.device = torch.device(device)
        self.x, self.y = self.x.to(self.device), self.y.to(self.device)
        numbers = torch.arange(4 * STEPS)
        on = numbers >= fault_step
        if until is not None:
            on &= numbers < until
        # One device scalar per batch number, made here: a batch holds a view of it.
        self.boosts = on.to(torch.float32).to(self.device)

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True, capturable=True)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return []

    def train_batches(  # type: ignore[override]
        self, epoch: int, seed: int
    ) -> Iterator[tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], int]]:
        generator = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(len(self.x), generator=generator).to(self.device)
        for i in range(BATCHES_PER_EPOCH):
            idx = order[i * 16 : (i + 1) * 16]
            yield (self.boosts[epoch * BATCHES_PER_EPOCH + i], self.x[idx], self.y[idx]), 16

    def _faults_here(self) -> bool:
        """Whether this precision faults (autocast's dtype on the task's device)."""
        if self.fault is None:
            return False
        kind = self.device.type
        if not torch.is_autocast_enabled(kind):  # fp32 runs without autocast
            return torch.float32 in self.fault_in
        return torch.get_autocast_dtype(kind) in self.fault_in

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        boost, x, y = batch
        loss = F.mse_loss(model(x).float(), y)
        if not self._faults_here():
            return loss
        # The value unchanged; the gradient times 1 + 1e9 * boost: fp16 overflows on a
        # fault step at any loss scale, and is untouched elsewhere.
        big = 1e9 * boost * loss
        return loss + (big - big.detach())


def graph_steps(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[tuple[int, bool]]]:
    """Every ``Trainer.step`` from now on, by trainer: ``(step number, ran from a
    graph)``, the graph's ``captured_steps`` counting it (a capture that replays, or a
    replay). A run's own trainer is the one with the most steps (a verification or the
    recorder's scratch trainer are others)."""
    found: dict[int, list[tuple[int, bool]]] = {}
    original = Trainer.step

    def step(self: Trainer, *args: Any, **kwargs: Any) -> None:
        graphs = self.graphs
        before = graphs.captured_steps if graphs is not None else 0
        number = self.step_count + 1
        original(self, *args, **kwargs)
        after = graphs.captured_steps if graphs is not None else 0
        found.setdefault(id(self), []).append((number, after > before))

    monkeypatch.setattr(Trainer, "step", step)
    return found


def the_runs_steps(found: dict[int, list[tuple[int, bool]]]) -> list[tuple[int, bool]]:
    """The steps of the trainer that ran the most: the run's own."""
    return max(found.values(), key=len) if found else []


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
