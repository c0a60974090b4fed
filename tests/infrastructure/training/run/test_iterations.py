"""fit() with a task that has iterations: stops, checkpoints and rollbacks fall on the
boundaries, and a step target inside an iteration ends it (real fp16/bf16 on the CPU)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    FitOptions,
    GuardConfig,
    Trainer,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.flight.bundle import load_bundle
from genesis_fp16_infrastructure.training.flight.bundle_files import FlightConfig
from genesis_fp16_infrastructure.training.run.task import IterationHooks

PER_ITERATION = 3  # optimizer steps over each iteration's "rollouts"
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class ProximalTask:
    """A regression whose batches carry the model's own predictions at the iteration's
    start (PPO's old log-probs): the loss pulls toward y and stays near them."""

    def __init__(self, nan_from: int | None = None) -> None:
        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(PER_ITERATION * 8, 4, generator=g)
        self.y = torch.tanh(self.x.sum(dim=1, keepdim=True))
        self.nan_from = nan_from  # fp16 losses are NaN from this step on
        self.calls: list[tuple[str, int, int]] = []  # (hook, epoch, step)
        self.trainer: Trainer | None = None

    def build_model(self) -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.SGD(model.parameters(), lr=0.05)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return ()

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        self.trainer = trainer
        self.calls.append(("begin", epoch, trainer.step_count))

    def end_iteration(self, trainer: Trainer, epoch: int) -> None:
        self.calls.append(("end", epoch, trainer.step_count))

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        model = self.trainer.model if self.trainer is not None else self.build_model()
        with torch.no_grad():
            old = model(self.x).float()  # "rolled out" with the weights of this start
        order = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(seed + epoch))
        for part in order.chunk(PER_ITERATION):
            yield (self.x[part], self.y[part], old[part]), len(part)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y, old = batch
        out = model(x).float()
        loss = F.mse_loss(out, y) + 0.1 * F.mse_loss(out, old)
        trainer = self.trainer
        if (
            self.nan_from is not None
            and trainer is not None
            and trainer.policy.name == "fp16"
            and trainer.step_count >= self.nan_from
        ):
            return loss * float("nan")
        return loss

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": F.mse_loss(model(self.x).float(), self.y).item()}

    def extra_state(self) -> dict[str, Any]:
        return {}


def _saved_positions(folder: Path) -> list[tuple[int, int, int]]:
    """(step, epoch, batch) of every checkpoint kept in ``folder``."""
    states = [torch.load(p, weights_only=True) for p in CheckpointManager(folder).checkpoints()]
    return [(s[keys.STEP], s[keys.EPOCH], s[keys.BATCH]) for s in states]


def test_a_step_target_inside_an_iteration_ends_it_and_saves_on_boundaries(tmp_path: Path) -> None:
    """7 steps of 3-step iterations, a checkpoint due every step: the third iteration
    ends after its first step, every checkpoint sits at an iteration's start, and the next
    run begins with the next iteration."""
    task = ProximalTask()
    assert isinstance(task, IterationHooks)
    options = FitOptions(precision="bf16", steps=7, checkpoint_dir=tmp_path, checkpoint_steps=1)
    result = fit(task, options)
    assert result.steps_run == 7 and not result.stopped_early
    assert task.calls == [
        ("begin", 0, 0), ("end", 0, 3), ("begin", 1, 3), ("end", 1, 6),
        ("begin", 2, 6), ("end", 2, 7),
    ]  # fmt: skip
    assert _saved_positions(tmp_path) == [(3, 1, 0), (6, 2, 0), (7, 3, 0)]
    task.calls.clear()
    fit(task, FitOptions(precision="bf16", steps=3, checkpoint_dir=tmp_path))
    assert task.calls == [("begin", 3, 7), ("end", 3, 10)]


def test_a_checkpoint_due_inside_an_iteration_is_written_at_its_end(tmp_path: Path) -> None:
    """A checkpoint every 2 steps, 3-step iterations: steps 2, 4 and 8 fall inside one,
    so each iteration's end is saved (3 and 9 are no multiple of 2), none inside."""
    options = FitOptions(precision="bf16", steps=9, checkpoint_dir=tmp_path, checkpoint_steps=2)
    fit(ProximalTask(), options)
    assert _saved_positions(tmp_path) == [(3, 1, 0), (6, 2, 0), (9, 3, 0)]


def test_a_stop_is_honoured_at_the_next_boundary(tmp_path: Path) -> None:
    """should_stop turning True after step 4 stops the run at step 6, the iteration's end."""
    task = ProximalTask()

    def stop() -> bool:
        return task.trainer is not None and task.trainer.step_count >= 4

    result = fit(
        task, FitOptions(precision="fp32", steps=30, checkpoint_dir=tmp_path, should_stop=stop)
    )
    assert result.stopped_early and result.steps_run == 6
    assert _saved_positions(tmp_path)[-1] == (6, 2, 0)


def test_the_guard_checks_and_rolls_back_at_iteration_boundaries(tmp_path: Path) -> None:
    """NaN fp16 losses from step 7 with a check every 2 steps: the guard checks at the
    iteration ends only, rolls back to the start of the iteration that went bad (step 6),
    and the bf16 run goes on from there to its target; the flight recorder bundles step 7,
    which replays."""
    task = ProximalTask(nan_from=7)
    guard = GuardConfig(check_interval=2, nonfinite_limit=1, bf16_needs_native=False)
    flight = FlightConfig(folder=tmp_path / "bundles")
    options = FitOptions(
        precision="fp16", steps=12, checkpoint_dir=tmp_path / "ckpt", guard=guard, flight=flight
    )
    result = fit(task, options)
    (record,) = result.demotions
    assert (record.from_, record.to, record.step, record.rollback_step) == (
        "fp16", "bf16", 9, 6,
    )  # fmt: skip
    assert result.precision.used == "bf16" and result.summary.step == 12
    begins = [(epoch, step) for hook, epoch, step in task.calls if hook == "begin"]
    # The third (2, 6) is the flight recorder's: its re-run begins the iteration again.
    assert begins == [(0, 0), (1, 3), (2, 6), (2, 6), (2, 6), (3, 9)]
    # The demotion's bundle: step 8, the first taken at step_count 7, rolled out again
    # from the snapshot at step 6 (the recorder's begin, above).
    (bundle,) = result.fault_bundles
    assert (bundle.reason, bundle.step, bundle.precision) == ("demotion", 8, "fp16")
    saved = load_bundle(Path(bundle.path))
    assert saved["recorded"]["loss_finite"] == [False] and saved["state"]["step"] == 7
