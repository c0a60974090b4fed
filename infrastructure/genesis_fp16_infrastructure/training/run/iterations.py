"""The steps of a task with iterations: each epoch is one iteration, a unit no run stops,
checkpoints or rolls back inside.

PPO is the shape: roll out with the current weights, then take K optimizer steps over
those rollouts. The rollouts are not kept, so a position inside an iteration cannot be
resumed or rolled back to. A task says it has this shape by defining the two optional
hooks of :class:`~genesis_fp16_infrastructure.training.run.task.IterationHooks`, and
``fit()`` then runs :func:`run_iterations` instead of the per-step loop
(:func:`~genesis_fp16_infrastructure.training.run.loop.run_steps`)::

    begin_iteration(trainer, epoch)      # the task's cue: the weights it rolls out with
    for batch in train_batches(epoch, seed):
        trainer.step(...)                # the run's steps, hooks, early stopping
    end_iteration(trainer, epoch)        # the task's cue: its diagnostics
    # then, at the boundary: the guard's check, a checkpoint when one is due

What moves to the boundary, and why:

- ``should_stop`` is polled before each iteration, not before each step;
- the precision guard checks at the first boundary after each ``check_interval`` steps
  (and snapshots there), so a rollback lands on an iteration's start;
- a periodic checkpoint due inside an iteration is written at its end;
- a step target (or early stopping) reached inside an iteration ends it there: its
  remaining batches are dropped, ``end_iteration`` runs, and the next run starts at the
  next iteration.

The flight recorder runs after each boundary check that was not spotless: the guard's
snapshot is an iteration's start, and the recorder's re-run calls ``begin_iteration``
on its scratch trainer before each iteration's batches, so that they are rolled out
again with the same weights (a task whose rollouts draw from ``(seed, iteration)``, as
a PPO task's may, then gives the same batches).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training import distributed
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.flight.recorder import FlightRecorder
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard
from genesis_fp16_infrastructure.training.run.loop import Cadence, Targets, grouped, validate
from genesis_fp16_infrastructure.training.run.options import FitOptions
from genesis_fp16_infrastructure.training.run.resume import Position, checkpoint_state
from genesis_fp16_infrastructure.training.run.task import IterationHooks, to_device
from genesis_fp16_infrastructure.training.step.trainer import Trainer

logger = logging.getLogger(__name__)


def run_iterations(
    task: IterationHooks,
    trainer: Trainer,
    options: FitOptions,
    manager: CheckpointManager | None,
    position: Position,
    targets: Targets,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    guard: PrecisionGuard | None,
    recorder: FlightRecorder | None = None,
) -> bool:
    """Run whole iterations until the targets are reached; True if stopped early.

    Also returns (False) when the guard fires at a boundary; ``fit()`` then demotes and
    calls again from the snapshot, an iteration's start.
    """
    accum = options.trainer.grad_accum_steps
    cadence = Cadence.of(options)
    tracker = position.tracker

    while not targets.reached(trainer.step_count, position.epoch):
        if options.should_stop():
            logger.info("stop requested: stopping at step %d", trainer.step_count)
            return True
        epoch = position.epoch
        task.begin_iteration(trainer, epoch)
        due = patience_out = stepped = False
        for group in grouped(iter(task.train_batches(epoch, options.seed)), accum):
            stepped = True
            micro, step_loss, samples = distributed.shard_step(group, loss_fn)
            trainer.step(to_device(micro, trainer.policy.device), step_loss, samples)
            for hook in options.step_hooks:
                hook(trainer)
            due = cadence.due(trainer.step_count) or due
            patience_out = (
                tracker is not None
                and trainer.step_count % tracker.config.every_steps == 0
                and validate(task, trainer, tracker)
            )
            if patience_out or targets.reached(trainer.step_count, position.epoch):
                break  # the rest of this iteration's batches are dropped
        if not stepped:
            raise ValueError(
                f"train_batches(epoch={epoch}, seed={options.seed}) yielded no batches: "
                "an iteration needs at least one"
            )
        task.end_iteration(trainer, epoch)
        position.epoch, position.batch = epoch + 1, 0
        if guard is not None and guard.boundary_check(trainer, position.epoch, 0):
            return False  # fit() rolls back and demotes; the state is not checkpointed
        if recorder is not None and guard is not None and guard.dirty is not None:
            recorder.after_check(guard, trainer)  # an interval that was not spotless
        if manager is not None and due:
            manager.save(checkpoint_state(task, trainer, options, position))
            cadence.saved()
        if patience_out:
            return False
    return False
