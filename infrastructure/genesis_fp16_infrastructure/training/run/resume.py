"""A run's place in its checkpoints: what a checkpoint holds beyond the trainer's state
(epoch, batch, the task's extra state, the resolved config, the run record), and resuming
from the newest one that fits. ``fit()`` uses it; the format is
:mod:`~genesis_fp16_infrastructure.training.checkpoint_keys`."""

from __future__ import annotations

import copy
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopTracker
from genesis_fp16_infrastructure.training.run.options import FitOptions
from genesis_fp16_infrastructure.training.run.task import TrainingTask
from genesis_fp16_infrastructure.training.step.trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass
class Position:
    epoch: int = 0
    batch: int = 0
    tracker: EarlyStopTracker | None = None  # early stopping's record, when it is on
    saved_run: dict[str, Any] | None = None  # the run record of the checkpoint resumed
    run: dict[str, Any] = field(default_factory=dict)  # this run's, written with each one


def resume_run(
    task: TrainingTask,
    trainer: Trainer,
    manager: CheckpointManager | None,
    position: Position,
    loaded: Loaded | None = None,
) -> Path | None:
    """Load the newest checkpoint that fits into the run (``loaded``: one read already,
    not read again); its path, or None when none fits."""
    if manager is None:
        return None
    pristine: dict[str, Any] = {}

    def accept(state: dict[str, Any], path: Path) -> None:
        """Load ``state`` into the run, or put the run back as it was and refuse the file."""
        if not pristine:
            pristine.update(copy.deepcopy(trainer.state_dict()))
        try:
            trainer.load_state_dict(state)
            loader = getattr(task, "load_extra_state", None)
            if callable(loader):
                loader(state.get(keys.EXTRA, {}))
            if position.tracker is not None and keys.EARLY_STOP in state:
                position.tracker.load_state_dict(state[keys.EARLY_STOP])
        except Exception as error:  # a shape mismatch, a key of the task's missing, ...
            trainer.load_state_dict(pristine)
            first = (str(error).strip().splitlines() or [""])[0][:300]
            raise CheckpointError(
                f"does not fit this run ({type(error).__name__}: {first})"
            ) from error

    found = manager.load_latest(accept, loaded)
    if found is None:
        return None
    state, path = found
    position.saved_run = state.get(keys.RUN)
    position.epoch = int(state.get(keys.EPOCH, 0))
    position.batch = int(state.get(keys.BATCH, 0))
    saved = state[keys.PRECISION].get("used")
    if saved != trainer.policy.name:  # a job changing precision mid-way: said, with why
        logger.warning(
            "checkpoint %s ran in %s; this run trains in %s: %s",
            path,
            saved,
            trainer.policy.name,
            trainer.policy.resolved.reason,
        )
    logger.info(
        "resumed from %s at step %d (epoch %d, batch %d)",
        path,
        trainer.step_count,
        position.epoch,
        position.batch,
    )
    return path


def checkpoint_state(
    task: TrainingTask, trainer: Trainer, options: FitOptions, position: Position
) -> dict[str, Any]:
    state = trainer.state_dict()
    extra = task.extra_state()
    _check_plain(extra, "extra")
    state[keys.EPOCH] = position.epoch
    state[keys.BATCH] = position.batch
    state[keys.EXTRA] = extra
    state[keys.CONFIG] = _resolved_config(trainer, options)
    if position.tracker is not None:
        state[keys.EARLY_STOP] = position.tracker.state_dict()
    state[keys.RUN] = dict(position.run)
    return state


def _resolved_config(trainer: Trainer, options: FitOptions) -> dict[str, Any]:
    resolved = trainer.policy.resolved
    return {
        "precision": {"requested": resolved.requested, "used": resolved.used},
        "device": str(trainer.policy.device),
        "seed": options.seed,
        "steps": options.steps,
        "epochs": options.epochs,
        "keep": options.keep,
        "checkpoint_steps": options.checkpoint_steps,
        "checkpoint_seconds": options.checkpoint_seconds,
        "log_interval": options.log_interval,
        "execution": {"requested": trainer.execution.requested, "used": trainer.execution.used},
        "trainer": asdict(trainer.config),
        "scaler": asdict(trainer.scaler.config),
    }


_PLAIN = (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.device, torch.Size)


def _check_plain(value: Any, where: str) -> None:
    """Fail at save time, not at the next resume, on state ``weights_only`` would refuse."""
    if isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int):
                raise TypeError(f"{where}: key {key!r} must be a str or int")
            _check_plain(item, f"{where}[{key!r}]")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_plain(item, f"{where}[{index}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}: checkpoint extra state must be plain Python "
        "values and tensors (dict, list, tuple, str, int, float, bool, None, Tensor) so that "
        "torch.load(weights_only=True) can read it"
    )
