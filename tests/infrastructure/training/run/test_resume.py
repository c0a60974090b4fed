"""Exact resume: 2N steps in one go equal N + stop + resume + N, bit for bit, on CPU."""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    FitOptions,
    FitResult,
    ScalerConfig,
    StepTuning,
    fit,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint

Batch = tuple[int, int, torch.Tensor, torch.Tensor]


class DropoutTask:
    """A small regression with dropout (draws from torch's RNG) and an optional scheduler."""

    def __init__(self, fused: bool, scheduler: bool) -> None:
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(40, 6, generator=g)
        self.y = self.x[:, :1] * 2.0 - self.x[:, 1:2]
        self.fused, self.scheduler = fused, scheduler
        self.seen: list[tuple[int, int]] = []

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.2), nn.Linear(12, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-2, fused=self.fused)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        if not self.scheduler:
            return ()
        return [torch.optim.lr_scheduler.StepLR(optimizers[0], step_size=2, gamma=0.8)]

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        order = torch.randperm(40, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        for i in range(5):
            idx = order[i * 8 : (i + 1) * 8]
            yield (epoch, i, self.x[idx], self.y[idx]), 8

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        epoch, index, x, y = batch
        self.seen.append((epoch, index))
        return F.mse_loss(model(x).float(), y)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": F.mse_loss(model(self.x).float(), self.y).item()}

    def extra_state(self) -> dict[str, Any]:
        return {}


def _options(precision: str, steps: int, directory: Path, **kw: Any) -> FitOptions:
    # init_scale at the ceiling makes the first fp16 steps overflow: skips happen and
    # the scaler's state matters for the resume.
    scaler = ScalerConfig(init_scale=2.0**24, growth_interval=3)
    trainer = StepTuning(grad_accum_steps=2, max_grad_norm=0.5)
    return FitOptions(
        precision=precision,
        steps=steps,
        seed=3,
        checkpoint_dir=directory,
        scaler=scaler,
        trainer=trainer,
        **kw,
    )


def _scramble_global_rng() -> None:
    torch.manual_seed(987654)
    random.seed(42)


def _assert_identical(a: FitResult, b: FitResult) -> None:
    assert a.checkpoint is not None and b.checkpoint is not None
    sa = torch.load(a.checkpoint, weights_only=True)
    sb = torch.load(b.checkpoint, weights_only=True)
    for name, tensor in sa[keys.MODEL].items():
        assert torch.equal(tensor, sb[keys.MODEL][name]), name
    for (pa, sta), (pb, stb) in zip(
        sa[keys.OPTIMIZER][0]["state"].items(), sb[keys.OPTIMIZER][0]["state"].items(), strict=True
    ):
        assert pa == pb and all(torch.equal(sta[k], stb[k]) for k in sta), pa
    assert sa[keys.SCALER] == sb[keys.SCALER]
    assert sa[keys.SCHEDULER] == sb[keys.SCHEDULER]
    assert (sa[keys.STEP], sa[keys.EPOCH], sa[keys.BATCH]) == (
        sb[keys.STEP],
        sb[keys.EPOCH],
        sb[keys.BATCH],
    )


# Each precision on a different optimizer path: fp32 non-fused with a scheduler, bf16 fused,
# fp16 fused (sync-free) and fp16 fused with a scheduler (one read per step).
CASES = [("fp32", False, True), ("bf16", True, False), ("fp16", True, False), ("fp16", True, True)]


@pytest.mark.parametrize(("precision", "fused", "scheduler"), CASES)
def test_stop_and_resume_is_bitwise_identical(
    tmp_path: Path, precision: str, fused: bool, scheduler: bool
) -> None:
    """7 + 7 steps (resumed mid-epoch, fresh objects, scrambled RNG) equal 14 in one go."""
    straight_task = DropoutTask(fused, scheduler)
    straight = fit(straight_task, _options(precision, 14, tmp_path / "a"))

    first_task = DropoutTask(fused, scheduler)
    first = fit(first_task, _options(precision, 7, tmp_path / "b"))
    assert first.checkpoint is not None and first.summary.step == 7
    _scramble_global_rng()
    second_task = DropoutTask(fused, scheduler)
    second = fit(second_task, _options(precision, 7, tmp_path / "b"))

    assert second.resumed_from == first.checkpoint and second.steps_run == 7
    assert first_task.seen + second_task.seen == straight_task.seen
    _assert_identical(straight, second)
    assert second.summary.skipped_steps == straight.summary.skipped_steps
    if precision == "fp16":
        assert straight.summary.skipped_steps > 0


class _RateTask(DropoutTask):
    """DropoutTask whose optimizer trains at ``lr`` (an agent's option), kept to look at."""

    def __init__(self, lr: float, scheduler: bool) -> None:
        super().__init__(fused=False, scheduler=scheduler)
        self.lr, self.optimizers = lr, list[Optimizer]()

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        self.optimizers = [torch.optim.AdamW(model.parameters(), lr=self.lr)]
        return self.optimizers


@pytest.mark.parametrize("scheduler", [False, True])
def test_a_resumed_run_trains_at_the_learning_rate_its_task_asks_now(
    tmp_path: Path, scheduler: bool
) -> None:
    """The checkpoint brings the optimizer's state, not its settings: a run resumed with a
    new learning rate trains at it (rlhf_ppo's ``lr`` option was ignored by every run that
    continued its served policy). A scheduler's rate continues from the checkpoint, as a
    run of all the steps in one go would have it."""
    fit(_RateTask(1e-2, scheduler), _options("fp32", 4, tmp_path / "a"))
    task = _RateTask(1e-3, scheduler)
    resumed = fit(task, _options("fp32", 4, tmp_path / "a"))
    assert resumed.resumed_from is not None and resumed.steps_run == 4
    (group,) = task.optimizers[0].param_groups
    if not scheduler:
        assert group["lr"] == 1e-3
        return
    straight = _RateTask(1e-2, scheduler)
    fit(straight, _options("fp32", 8, tmp_path / "b"))
    assert group["lr"] == straight.optimizers[0].param_groups[0]["lr"] < 1e-2


def test_resume_falls_back_past_a_torn_newest_checkpoint_and_stays_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn step-6 file: resume from step 3 with a warning, and 3 more steps still match."""
    straight = fit(DropoutTask(True, False), _options("fp16", 6, tmp_path / "a"))
    interrupted = fit(
        DropoutTask(True, False), _options("fp16", 6, tmp_path / "b", checkpoint_steps=3)
    )
    assert interrupted.checkpoint is not None
    interrupted.checkpoint.write_bytes(interrupted.checkpoint.read_bytes()[:100])
    with caplog.at_level(logging.WARNING):
        resumed = fit(DropoutTask(True, False), _options("fp16", 3, tmp_path / "b"))
    assert resumed.resumed_from == tmp_path / "b" / "ckpt-0000000003.pt"
    assert any(interrupted.checkpoint.name in r.getMessage() for r in caplog.records)
    _assert_identical(straight, resumed)


def _ended_at_its_target_unsaved(checkpoint: Path) -> None:
    """``checkpoint`` as a kill between its run's last periodic save (at the target) and
    its end-of-run save leaves it: its run record still under way."""
    state = load_checkpoint(checkpoint)
    state[keys.RUN] = {**state[keys.RUN], "complete": False}
    CheckpointManager(checkpoint.parent).save(state)


@pytest.mark.parametrize("saved", ["complete", "at its target"])
def test_a_run_that_finishes_one_that_had_ended_trains_no_step(tmp_path: Path, saved: str) -> None:
    """Issue 93: a job killed after its last save and before its verdict has ended; the
    run that finishes it (``finishes``: the judged run's unfinished candidate) trains no
    step, whatever its budget, and ends where an unbroken job does, its record complete
    (before: it trained a whole budget more, and a killed 6,000-step job ended past it).
    Without ``finishes`` the steps go on top, as a forced run's; and a checkpoint copied
    from another folder (the served model in a new candidate) is not one that ended there."""
    straight = fit(DropoutTask(False, True), _options("fp32", 6, tmp_path / "a"))
    job = fit(DropoutTask(False, True), _options("fp32", 6, tmp_path / "b", checkpoint_steps=3))
    assert job.checkpoint is not None
    if saved == "at its target":
        _ended_at_its_target_unsaved(job.checkpoint)
    copy = tmp_path / "c"
    shutil.copytree(tmp_path / "b", copy)

    finished = fit(DropoutTask(False, True), _options("fp32", 4, tmp_path / "b", finishes=True))
    assert finished.steps_run == 0 and finished.checkpoint == job.checkpoint
    assert load_checkpoint(job.checkpoint)[keys.RUN]["complete"] is True
    _assert_identical(straight, finished)

    on_top = fit(DropoutTask(False, True), _options("fp32", 4, copy, finishes=True))
    assert on_top.steps_run == 4 and on_top.summary.step == 10
    more = fit(DropoutTask(False, True), _options("fp32", 6, tmp_path / "b"))
    assert more.steps_run == 6 and more.summary.step == 12
