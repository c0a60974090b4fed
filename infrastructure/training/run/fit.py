"""``fit()``: a whole training run from a task: resume, loop, checkpoint, stop, evaluate.

An agent describes its model and data as a :class:`TrainingTask`; ``fit`` does the rest::

    result = fit(task, FitOptions(precision="auto", steps=1000,
                                  checkpoint_dir=Path("state/ckpt"), log_interval=50))
    print(result.precision.used, result.summary.train_loss, result.eval["loss"])

Run it again with the same options and it continues from the newest valid checkpoint:
the parameters after 2 runs of N steps equal, bit for bit, those after one run of 2N,
provided ``train_batches(epoch, seed)`` yields the same batches in the same order for the
same ``(epoch, seed)`` (draw from a generator seeded by both, not the global RNG).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training import distributed
from genesis_fp16_infrastructure.training.checkpoint import CheckpointError, CheckpointManager
from genesis_fp16_infrastructure.training.precision.loss_scaler import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import (
    PrecisionPolicy,
    ResolvedPrecision,
)
from genesis_fp16_infrastructure.training.rng import seed_everything
from genesis_fp16_infrastructure.training.run.batches import to_device
from genesis_fp16_infrastructure.training.run.calibration import (
    AutoPrecision,
    Calibration,
    policy_for_run,
)
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping, EarlyStopTracker
from genesis_fp16_infrastructure.training.run.guard import (
    GuardConfig,
    PrecisionGuard,
    checkpoints_after,
)
from genesis_fp16_infrastructure.training.run.task import TrainingTask
from genesis_fp16_infrastructure.training.step.cuda_graph import cuda_generators
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution
from genesis_fp16_infrastructure.training.step.summary import TrainingSummary
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig

__all__ = ["FitOptions", "FitResult", "TrainingTask", "fit"]

logger = logging.getLogger(__name__)

StepHook = Callable[[Trainer], None]


def _never_stop() -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """How ``fit()`` runs. Give ``steps``, ``epochs`` or both (whichever ends first).

    - ``steps``: optimizer steps of *this* invocation, skipped ones included.
    - ``epochs``: epoch ends of this invocation; a run resumed mid-epoch finishes that
      epoch as its first. Except: resuming a checkpoint of an *interrupted* run (killed,
      or stopped by ``should_stop``) asked for the same ``steps``/``epochs`` continues
      toward that run's own target, so the interruption costs only time.
    - ``resume``: continue from the newest valid checkpoint in ``checkpoint_dir``.
    - ``checkpoint_dir``: None writes no checkpoints. ``keep`` files are kept; one is
      written every ``checkpoint_interval`` steps (None: a tenth of ``steps`` when given,
      else each validation of ``early_stop``), whenever ``checkpoint_seconds`` have
      passed since the last one (None: no time bound; single-process runs only, since a
      save is collective under torchrun), and at the end, so a killed run loses at most
      one interval. Resuming tries the newest valid file first and falls back past one
      that does not fit the model.
    - ``log_interval`` replaces ``trainer.log_interval``; ``on_log`` receives a
      :class:`TrainingSummary` every interval and once more at the end.
    - ``should_stop``: polled before every step; when it returns True the run stops
      there, checkpoints and evaluates, and ``FitResult.stopped_early`` is True.
    - ``step_hooks``: called with the trainer after every step (before checkpointing).
    - ``guard``: a :class:`GuardConfig` turns on the precision guard: when a trigger
      fires, the run rolls back to its last good state, continues in the next precision
      of the ladder to the same target step, and ``FitResult.demotions`` says so.
    - ``fsdp``: under an initialised multi-rank process group, shard the model with
      FSDP2 instead of DDP (see :mod:`genesis_fp16_infrastructure.training.distributed`).
    - ``cuda_graph`` replaces ``trainer.cuda_graph``: ``auto``, ``on`` or ``off``; what ran
      and why is ``FitResult.execution`` (see
      :mod:`genesis_fp16_infrastructure.training.step.execution`).
    - ``compile`` replaces ``trainer.compile``: ``off`` or ``on`` (the model compiled inside
      the captured step, execution ``cuda_graph_compiled``; an error where the step
      cannot be captured).
    - ``auto_precision``: how ``precision="auto"`` resolves: by the device rule (``rule``,
      the default here) or by timing the task's own steps in each native precision
      (``measure``, the daemon's default; cached in ``auto_precision.cache``). See
      :mod:`genesis_fp16_infrastructure.training.run.calibration`; ``FitResult.calibration``
      holds it.
    - ``early_stop``: validate with the task's ``validate(model)`` every
      ``early_stop.every_steps`` steps, keep the best weights, stop after ``patience``
      validations without improvement (see
      :mod:`genesis_fp16_infrastructure.training.run.early_stop`);
      ``FitResult.early_stop`` reports the best step and why the run stopped.
    """

    precision: str = "auto"
    device: str = "cpu"
    steps: int | None = None
    epochs: int | None = None
    seed: int = 0
    resume: bool = True
    checkpoint_dir: Path | None = None
    keep: int = 3
    checkpoint_interval: int | None = None
    checkpoint_seconds: float | None = 60.0
    log_interval: int = 50
    on_log: Callable[[TrainingSummary], None] | None = None
    should_stop: Callable[[], bool] = _never_stop
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    step_hooks: Sequence[StepHook] = ()
    guard: GuardConfig | None = None
    fsdp: bool = False
    cuda_graph: str = "auto"
    compile: str = "off"
    auto_precision: AutoPrecision = field(default_factory=AutoPrecision)
    early_stop: EarlyStopping | None = None

    def __post_init__(self) -> None:
        if self.steps is None and self.epochs is None:
            raise ValueError("FitOptions needs steps=N or epochs=N (or both); got neither")
        for name in ("steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}={value!r}: must be >= 0")
        if self.checkpoint_interval is not None and self.checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval={self.checkpoint_interval!r}: must be >= 1")
        if self.checkpoint_seconds is not None and not self.checkpoint_seconds > 0:
            raise ValueError(
                f"checkpoint_seconds={self.checkpoint_seconds!r}: must be > 0 (None: no time bound)"
            )


@dataclass(frozen=True)
class FitResult:
    """The outcome of ``fit()``.

    ``summary`` covers the whole run's counters (``step`` continues across resumes);
    ``steps_run`` counts this invocation's steps. ``checkpoint`` is the file written at
    the end (None without ``checkpoint_dir``), ``resumed_from`` the one started from.
    ``demotions`` lists the precision guard's demotions, oldest first, as plain dicts
    (``from``, ``to``, ``reason``, ``step``, ``rollback_step``, ``detail``);
    ``precision`` is then the resolution of the precision the run ended in, and
    ``execution`` says whether its steps ran eagerly or from a captured CUDA graph, and why;
    ``calibration`` is what a measured ``auto`` timed and chose (None otherwise);
    ``early_stop`` is the validation record (best step, stop reason) when early stopping
    was on, and ``eval`` then measures the best weights.
    """

    summary: TrainingSummary
    eval: Mapping[str, float]
    checkpoint: Path | None
    precision: ResolvedPrecision
    steps_run: int
    stopped_early: bool
    execution: ResolvedExecution
    resumed_from: Path | None = None
    demotions: tuple[Mapping[str, Any], ...] = ()
    calibration: Calibration | None = None
    early_stop: Mapping[str, Any] | None = None


@dataclass
class _Position:
    epoch: int = 0
    batch: int = 0
    tracker: EarlyStopTracker | None = None  # early stopping's record, when it is on
    saved_run: dict[str, Any] | None = None  # the run record of the checkpoint resumed
    run: dict[str, Any] = field(default_factory=dict)  # this run's, written with each one


@dataclass(frozen=True)
class _Targets:
    step: int | None
    epoch: int | None


def fit(task: TrainingTask, options: FitOptions) -> FitResult:
    """Train ``task`` as ``options`` say and return what happened; see the module docstring."""
    policy, calibration = policy_for_run(
        task,
        options.precision,
        options.device,
        options.scaler,
        options.seed,
        _trainer_config(options),
        options.auto_precision,
        expected_steps=_expected_steps(task, options),
    )
    seed_everything(options.seed)  # after the calibration: it leaves no trace in the run
    options = replace(options, should_stop=distributed.agreed_stop(options.should_stop))
    if calibration is not None and options.cuda_graph == "auto":  # run what was timed faster
        measured = calibration.measured_execution()
        options = replace(options, trainer=replace(options.trainer, measured_execution=measured))
    trainer = _build_trainer(task, policy, options)
    manager = None
    if options.checkpoint_dir is not None:
        manager = distributed.checkpoint_manager(options.checkpoint_dir, options.keep)
        manager.remove_stale_temps()

    position = _Position(tracker=_tracker(task, options))
    resumed_from = _resume(task, trainer, manager, position) if options.resume else None
    first_step = trainer.step_count
    targets = _targets(options, first_step, position)
    guard = PrecisionGuard(options.guard, task.extra_state) if options.guard else None
    loss_fn = guard.watch_loss(task.loss) if guard is not None else task.loss
    if guard is not None:
        guard.start(trainer, position.epoch, position.batch)
    demotions: list[dict[str, Any]] = []
    tracker = position.tracker
    stopped = False
    if tracker is not None and tracker.stopped:
        logger.info("early stopping: this run had already stopped (%s)", tracker.stop_reason)
    while tracker is None or not tracker.stopped:
        stopped = _run_loop(task, trainer, options, manager, position, targets, loss_fn, guard)
        if guard is None or guard.final_check(trainer, position.epoch, position.batch) is None:
            break
        trainer = _demote(task, trainer, options, manager, position, guard, demotions)
        if tracker is not None:
            tracker.forget_after(trainer.step_count)
    model, policy = trainer.model, trainer.policy
    steps_run = trainer.step_count - first_step

    checkpoint = resumed_from if steps_run == 0 else None
    position.run["complete"] = not stopped  # reached its target, or early stopping ended it
    if manager is not None and checkpoint is None:
        checkpoint = manager.save(_checkpoint_state(task, trainer, options, position))
    if tracker is not None:
        tracker.restore_best(model)  # after the checkpoint: it keeps the last weights
    # The run's own final loss, not the last log interval's (the interval differs between a
    # terminal's progress bar and a log): what train --json, the text and the metrics say.
    summary = replace(trainer.summary(reset_interval=True), train_loss=trainer.final_train_loss())
    if options.on_log is not None and steps_run and trainer.step_count % options.log_interval:
        options.on_log(summary)
    metrics = _evaluate(task.evaluate, model, policy)
    # The eval metrics are the caller's to report (train prints them, the daemon logs them
    # with the run): here they would be the same block a second time.
    logger.info(
        "fit: %d step(s) in %s (%s), train loss %.6g%s",
        steps_run,
        policy.name,
        trainer.execution.used,
        summary.train_loss,
        " (stopped early)" if stopped else "",
    )
    return FitResult(
        summary=summary,
        eval=metrics,
        checkpoint=checkpoint,
        precision=policy.resolved,
        steps_run=steps_run,
        stopped_early=stopped,
        resumed_from=resumed_from,
        demotions=tuple(demotions),
        execution=trainer.execution,
        calibration=calibration,
        early_stop=None if tracker is None else tracker.report(not stopped),
    )


def _build_trainer(task: TrainingTask, policy: PrecisionPolicy, options: FitOptions) -> Trainer:
    model = task.build_model().to(policy.device)
    policy.check_model(model)
    model = distributed.wrap_model(model, policy, fsdp=options.fsdp)  # no-op in one process
    optimizers = task.build_optimizers(model)
    schedulers = task.build_schedulers(optimizers)
    config = _trainer_config(options)
    generators = cuda_generators(task)
    return Trainer(model, optimizers, policy, config, schedulers, options.on_log, generators)


def _expected_steps(task: TrainingTask, options: FitOptions) -> int | None:
    """The steps this run asks for, when known: what bounds a measured ``auto``'s cost.
    An epoch budget counts when the task says how long an epoch is (``steps_per_epoch``)."""
    if options.steps is not None:
        return options.steps
    per_epoch = getattr(task, "steps_per_epoch", None)
    if options.epochs is not None and isinstance(per_epoch, int):
        return options.epochs * per_epoch
    return None


def _trainer_config(options: FitOptions) -> TrainerConfig:
    return replace(
        options.trainer,
        log_interval=options.log_interval,
        cuda_graph=options.cuda_graph,
        compile=options.compile,
    )


def _demote(
    task: TrainingTask,
    trainer: Trainer,
    options: FitOptions,
    manager: CheckpointManager | None,
    position: _Position,
    guard: PrecisionGuard,
    demotions: list[dict[str, Any]],
) -> Trainer:
    """Roll back to the guard's last good state in a trainer of the next precision."""
    policy, record = guard.demote(
        trainer.policy, lambda name: PrecisionPolicy.create(name, options.device, options.scaler)
    )
    snapshot = guard.restore()
    demoted = _build_trainer(task, policy, options)
    demoted.load_state_dict(snapshot.trainer)  # model, optimizers, schedulers, scaler, RNG
    position.epoch, position.batch = snapshot.epoch, snapshot.batch
    loader = getattr(task, "load_extra_state", None)
    if callable(loader):
        loader(snapshot.extra)
    if manager is not None:
        # Checkpoints written after the rollback step hold the troubled trajectory.
        for stale in checkpoints_after(manager.checkpoints(), manager.path_for(snapshot.step)):
            logger.warning("precision guard: removing %s (after the rollback step)", stale)
            manager.remove(stale)
    guard.start(demoted, position.epoch, position.batch, snapshot=False)
    demotions.append(record)
    return demoted


def _resume(
    task: TrainingTask, trainer: Trainer, manager: CheckpointManager | None, position: _Position
) -> Path | None:
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

    found = manager.load_latest(accept)
    if found is None:
        return None
    state, path = found
    position.saved_run = state.get(keys.RUN)
    position.epoch = int(state.get(keys.EPOCH, 0))
    position.batch = int(state.get(keys.BATCH, 0))
    saved = state[keys.PRECISION].get("used")
    if saved != trainer.policy.name:
        logger.info("checkpoint %s ran in %s; continuing in %s", path, saved, trainer.policy.name)
    logger.info(
        "resumed from %s at step %d (epoch %d, batch %d)",
        path,
        trainer.step_count,
        position.epoch,
        position.batch,
    )
    return path


def _run_loop(
    task: TrainingTask,
    trainer: Trainer,
    options: FitOptions,
    manager: CheckpointManager | None,
    position: _Position,
    targets: _Targets,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    guard: PrecisionGuard | None,
) -> bool:
    """Run steps until the targets are reached; True if stopped early.

    Also returns (False) when the guard fires; ``fit()`` then demotes and calls again.
    """
    step_target, epoch_target = targets.step, targets.epoch
    accum = options.trainer.grad_accum_steps
    cadence = _Cadence.of(options)

    def done() -> bool:
        return (step_target is not None and trainer.step_count >= step_target) or (
            epoch_target is not None and position.epoch >= epoch_target
        )

    while not done():
        batches = iter(task.train_batches(position.epoch, options.seed))
        # Exact mid-epoch resume: skip exactly the batches the checkpointed run consumed.
        for _ in islice(batches, position.batch):
            pass
        yielded = position.batch > 0
        for group in _grouped(batches, accum):
            yielded = True
            if options.should_stop():
                logger.info("stop requested: stopping at step %d", trainer.step_count)
                return True
            micro, step_loss, samples = distributed.shard_step(group, loss_fn)  # this rank's
            trainer.step(to_device(micro, trainer.policy.device), step_loss, samples)
            position.batch += len(group)
            for hook in options.step_hooks:
                hook(trainer)
            if guard is not None and guard.after_step(trainer, position.epoch, position.batch):
                return False  # fit() rolls back and demotes; the state is not checkpointed
            tracker = position.tracker
            patience_out = (
                tracker is not None
                and trainer.step_count % tracker.config.every_steps == 0
                and _validate(task, trainer, tracker)
            )
            if manager is not None and cadence.due(trainer.step_count):
                manager.save(_checkpoint_state(task, trainer, options, position))
                cadence.saved()
            if done() or patience_out:
                return False
        if not yielded:
            raise ValueError(
                f"train_batches(epoch={position.epoch}, seed={options.seed}) yielded no "
                "batches: an epoch needs at least one"
            )
        position.epoch += 1
        position.batch = 0
    return False


@dataclass
class _Cadence:
    """When to write a periodic checkpoint: every N steps, or after S seconds since the last."""

    every_steps: int | None
    every_seconds: float | None
    last: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, options: FitOptions) -> _Cadence:
        steps = options.checkpoint_interval
        if steps is None and options.steps is not None:
            steps = max(1, math.ceil(options.steps / 10))
        elif steps is None and options.early_stop is not None:
            steps = options.early_stop.every_steps  # each validation: the record is fresh
        # A save is collective under torchrun: ranks must agree on when, and their clocks
        # would not, so only the step bound applies there.
        seconds = None if distributed.is_distributed() else options.checkpoint_seconds
        return cls(steps, seconds)

    def due(self, step: int) -> bool:
        if self.every_steps is not None and step % self.every_steps == 0:
            return True
        return self.every_seconds is not None and time.monotonic() - self.last >= self.every_seconds

    def saved(self) -> None:
        self.last = time.monotonic()


def _grouped(batches: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while group := list(islice(batches, size)):
        yield group


def _targets(options: FitOptions, first_step: int, position: _Position) -> _Targets:
    """Where this run stops: its budget counted from here, or, when the checkpoint it
    resumes was written by an interrupted run asked for the same budget (killed, or
    stopped by a signal), that run's own target, so a kill costs nothing but time."""
    targets = _Targets(
        first_step + options.steps if options.steps is not None else None,
        position.epoch + options.epochs if options.epochs is not None else None,
    )
    saved = position.saved_run
    if (
        isinstance(saved, dict)
        and saved.get("complete") is False
        and (saved.get("steps"), saved.get("epochs")) == (options.steps, options.epochs)
    ):
        targets = _Targets(saved.get("target_step"), saved.get("target_epoch"))
        logger.info(
            "continuing an interrupted run toward its own target (step %s, epoch %s)",
            targets.step,
            targets.epoch,
        )
    position.run = {
        "steps": options.steps,
        "epochs": options.epochs,
        "target_step": targets.step,
        "target_epoch": targets.epoch,
        "complete": False,
    }
    return targets


def _checkpoint_state(
    task: TrainingTask, trainer: Trainer, options: FitOptions, position: _Position
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
        "checkpoint_interval": options.checkpoint_interval,
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


def _evaluate(
    measure: Callable[[nn.Module], Mapping[str, float]], model: nn.Module, policy: PrecisionPolicy
) -> dict[str, float]:
    model.eval()
    try:
        with torch.no_grad(), policy.autocast():
            metrics = measure(model)
    finally:
        model.train()
    return {name: float(value) for name, value in metrics.items()}


def _tracker(task: TrainingTask, options: FitOptions) -> EarlyStopTracker | None:
    if options.early_stop is None:
        return None
    if not callable(getattr(task, "validate", None)):
        raise ValueError(
            f"FitOptions.early_stop needs a validate(model) method on {type(task).__name__} "
            "(metrics on a validation split carved out of the training data)"
        )
    if options.fsdp and distributed.rank_and_world()[1] > 1:
        raise ValueError("FitOptions.early_stop with fsdp=True: not supported (sharded weights)")
    return EarlyStopTracker(options.early_stop)


def _validate(task: TrainingTask, trainer: Trainer, tracker: EarlyStopTracker) -> bool:
    """One validation of the current weights; True when patience has run out."""
    measure = task.validate  # type: ignore[attr-defined]  # checked by _tracker
    metrics = _evaluate(measure, trainer.model, trainer.policy)
    return tracker.record(trainer.step_count, metrics, trainer.model)
