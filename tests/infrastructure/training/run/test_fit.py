"""fit(): steps and epochs, stopping, checkpoints, logging, extra state, precision agreement."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer

from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    FitOptions,
    ScalerConfig,
    StepTuning,
    TrainingSummary,
    TrainingTask,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

Batch = tuple[int, int, torch.Tensor, torch.Tensor]


class RegressionTask:
    """A fixed regression problem: y = tanh(x @ w) + noise, fed in a (seed, epoch) order;
    no ``build_schedulers`` (optional: no LR schedulers)."""

    def __init__(
        self,
        batches: int = 4,
        batch_size: int = 16,
        width: int = 16,
        lr: float = 1e-2,
        fused: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        g = torch.Generator().manual_seed(1234)
        n = batches * batch_size
        w = torch.randn(8, 1, generator=g)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.tanh(self.x @ w) + 0.1 * torch.randn(n, 1, generator=g)
        self.x_eval = torch.randn(256, 8, generator=g)
        self.y_eval = torch.tanh(self.x_eval @ w) + 0.1 * torch.randn(256, 1, generator=g)
        self.batches, self.batch_size, self.width, self.lr, self.fused = (
            batches,
            batch_size,
            width,
            lr,
            fused,
        )
        self.extra = extra if extra is not None else {"encoder": {"mean": torch.zeros(8)}}
        self.loaded_extra: dict[str, Any] | None = None
        self.seen: list[tuple[int, int]] = []

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(8, self.width), nn.Tanh(), nn.Linear(self.width, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=self.lr, fused=self.fused)]

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(len(self.x), generator=g)
        for i in range(self.batches):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield (epoch, i, self.x[idx], self.y[idx]), self.batch_size

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        epoch, index, x, y = batch
        self.seen.append((epoch, index))
        return F.mse_loss(model(x).float(), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": F.mse_loss(model(self.x_eval).float(), self.y_eval).item()}

    def extra_state(self) -> dict[str, Any]:
        return self.extra

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loaded_extra = state


def test_fit_runs_the_requested_steps_and_reports(tmp_path: Path) -> None:
    """steps=6: six steps, a checkpoint at step 6, eval metrics, the resolved precision; a
    task without the optional build_schedulers is a TrainingTask and trains."""
    task = RegressionTask()
    assert isinstance(task, TrainingTask)
    result = fit(task, FitOptions(precision="bf16", steps=6, checkpoint_dir=tmp_path))
    assert result.steps_run == 6 and result.summary.step == 6 and not result.stopped_early
    assert result.precision.used == "bf16" and result.summary.precision == "bf16"
    assert result.checkpoint == tmp_path / "ckpt-0000000006.pt"
    assert set(result.eval) == {"loss"} and result.eval["loss"] > 0
    assert result.demotions == () and result.resumed_from is None
    assert len(task.seen) == 6


def test_epochs_count_passes_and_accumulation_groups_batches(tmp_path: Path) -> None:
    """epochs=2 over 5 batches with grad_accum_steps=2: 3 steps per epoch (2+2+1)."""
    task = RegressionTask(batches=5)
    options = FitOptions(
        precision="fp32", epochs=2, trainer=StepTuning(grad_accum_steps=2), resume=False
    )
    result = fit(task, options)
    assert result.steps_run == 6 and result.checkpoint is None
    assert task.seen == [(e, i) for e in range(2) for i in range(5)]


def test_should_stop_stops_at_a_step_boundary_and_still_checkpoints(tmp_path: Path) -> None:
    """should_stop turning true after 3 steps ends the run there, with a checkpoint."""
    task = RegressionTask()
    result = fit(
        task,
        FitOptions(
            precision="fp32",
            steps=50,
            checkpoint_dir=tmp_path,
            should_stop=lambda: len(task.seen) >= 3,
        ),
    )
    assert result.stopped_early and result.steps_run == 3
    assert result.checkpoint == tmp_path / "ckpt-0000000003.pt"


def test_checkpoint_steps_writes_every_n_steps_and_keeps_the_last(tmp_path: Path) -> None:
    """checkpoint_steps=2, keep=2, steps=7: files at steps 6 and 7 remain."""
    fit(
        RegressionTask(),
        FitOptions(precision="fp32", steps=7, checkpoint_dir=tmp_path, checkpoint_steps=2, keep=2),
    )
    names = [p.name for p in CheckpointManager(tmp_path).checkpoints()]
    assert names == ["ckpt-0000000006.pt", "ckpt-0000000007.pt"]


def test_on_log_and_resolved_config_and_extra_state(tmp_path: Path) -> None:
    """on_log fires per interval and at the end; the checkpoint holds config and extra."""
    logs: list[TrainingSummary] = []
    task = RegressionTask(extra={"encoder": {"scale": torch.ones(3), "name": "enc"}})
    options = FitOptions(
        precision="fp16",
        steps=5,
        checkpoint_dir=tmp_path,
        log_interval=2,
        on_log=logs.append,
        scaler=ScalerConfig(init_scale=256.0),
    )
    result = fit(task, options)
    assert [s.step for s in logs] == [2, 4, 5]
    assert result.checkpoint is not None
    state = torch.load(result.checkpoint, weights_only=True)
    assert state[keys.CONFIG]["precision"] == {"requested": "fp16", "used": "fp16"}
    assert state[keys.CONFIG]["scaler"]["init_scale"] == 256.0
    assert state[keys.EXTRA]["encoder"]["name"] == "enc"
    assert (state[keys.EPOCH], state[keys.BATCH]) == (1, 1)
    again = RegressionTask()
    fit(again, FitOptions(precision="fp16", steps=1, checkpoint_dir=tmp_path))
    assert again.loaded_extra is not None and again.loaded_extra["encoder"]["name"] == "enc"


def test_extra_state_that_weights_only_would_refuse_fails_at_save(tmp_path: Path) -> None:
    """A custom object in extra_state() is a TypeError naming where it sits."""
    task = RegressionTask(extra={"encoder": object()})
    with pytest.raises(TypeError, match=r"extra\['encoder'\] is a object"):
        fit(task, FitOptions(precision="fp32", steps=1, checkpoint_dir=tmp_path))


def test_options_need_steps_or_epochs() -> None:
    """FitOptions without steps and epochs is refused with a clear message."""
    with pytest.raises(ValueError, match="steps=N or epochs=N"):
        FitOptions()


def test_fp16_request_on_this_cpu_logs_the_resolution(caplog: pytest.LogCaptureFixture) -> None:
    """fit logs the resolved precision and its reason once."""
    with caplog.at_level(logging.INFO):
        result = fit(RegressionTask(), FitOptions(precision="fp32", steps=1, resume=False))
    assert any(result.precision.reason in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_fp32_bf16_fp16_reach_the_same_loss_within_two_percent() -> None:
    """A small MLP on a fixed regression reaches final losses within 2% in all precisions."""
    losses = {}
    for precision in ("fp32", "bf16", "fp16"):
        task = RegressionTask(batches=4, batch_size=32, width=16, lr=3e-2)
        options = FitOptions(
            precision=precision, steps=60, resume=False, scaler=ScalerConfig(growth_interval=20)
        )
        result = fit(task, options)
        assert result.precision.used == precision
        if precision == "fp16":  # the dynamic scale really ran: it grew from 65536
            assert result.summary.loss_scale > 65536.0
        losses[precision] = result.eval["loss"]
    ref = losses["fp32"]
    assert all(abs(v - ref) / ref < 0.02 for v in losses.values()), losses


def test_a_tasks_cuda_generators_reach_the_trainer_and_a_task_without_gets_none() -> None:
    """fit() hands what the optional cuda_generators() lists to the Trainer (which registers
    them with its CUDA graphs); a task without the method gives an empty tuple."""
    noise = torch.Generator().manual_seed(3)  # a CPU run: stored, registered only on CUDA

    class Listed(RegressionTask):
        def cuda_generators(self) -> tuple[torch.Generator, ...]:
            return (noise,)

    seen: list[tuple[torch.Generator, ...]] = []
    for task in (Listed(), RegressionTask()):
        hook = [lambda trainer: seen.append(trainer.generators)]
        fit(task, FitOptions(precision="bf16", steps=1, resume=False, step_hooks=hook))
    assert seen == [(noise,), ()]


def test_fit_says_the_precision_it_decided_before_its_first_step() -> None:
    """on_precision is called once, with the precision the run trains in, before the first
    step's loss (the daemon's gauge shows it from then on, issue 92)."""
    task = RegressionTask()
    said: list[tuple[str, int]] = []
    options = FitOptions(
        precision="bf16",
        steps=3,
        on_precision=lambda name: said.append((name, len(task.seen))),
    )
    result = fit(task, options)
    assert said == [("bf16", 0)] and result.precision.used == "bf16"
