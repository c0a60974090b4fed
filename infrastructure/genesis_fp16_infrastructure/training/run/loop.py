"""The steps of a run: where it stops (its targets), the loop over epochs and batches with
periodic checkpoints, validation for early stopping, the closing summary and the final
evaluation. ``fit()`` calls :func:`run_steps` (or, for a task with iteration hooks,
:func:`run_iterations`) once, and again after each demotion.

And the run's place in its checkpoints: what a checkpoint holds beyond the trainer's state
(epoch, batch, the task's extra state, the resolved config, the run record:
:func:`checkpoint_state`), and resuming from the newest one that fits (:func:`resume_run`);
the format is :mod:`~genesis_fp16_infrastructure.training.checkpoint_keys`."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import nn

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training import distributed
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.reports import TrainingSummary
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopTracker
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard
from genesis_fp16_infrastructure.training.run.task import (
    FitOptions,
    IterationHooks,
    TrainingTask,
    to_device,
)
from genesis_fp16_infrastructure.training.step.trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass
class Position:
    epoch: int = 0
    batch: int = 0
    tracker: EarlyStopTracker | None = None  # early stopping's record, when it is on
    saved_run: dict[str, Any] | None = None  # the run record of the checkpoint resumed
    run: dict[str, Any] = field(default_factory=dict)  # this run's, written with each one


@dataclass
class Run:
    """What a run's steps, checkpoints and demotions share: the task, its trainer (a
    demotion replaces it), the options, the checkpoint manager (None: no checkpoints), the
    position, the loss the steps call (the guard's watch on the task's) and the guard."""

    task: TrainingTask
    trainer: Trainer
    options: FitOptions
    manager: CheckpointManager | None
    position: Position
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    guard: PrecisionGuard | None


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
        # The optimizers' settings are the task's as built now (an option's learning rate),
        # not the file's, unless a scheduler drives them: the file brings their state.
        built = [dict(g) for o in trainer.optimizers for g in o.param_groups]
        try:
            trainer.load_state_dict(state)
            if not trainer.schedulers:
                loaded = [g for o in trainer.optimizers for g in o.param_groups]
                for group, settings in zip(loaded, built, strict=True):
                    group.update({k: v for k, v in settings.items() if k != "params"})
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


def checkpoint_state(run: Run) -> dict[str, Any]:
    trainer, options, position = run.trainer, run.options, run.position
    state = trainer.state_dict()
    extra = run.task.extra_state()
    _check_plain(extra, "extra")
    state[keys.EPOCH] = position.epoch
    state[keys.BATCH] = position.batch
    state[keys.EXTRA] = extra
    resolved = trainer.policy.resolved
    state[keys.CONFIG] = {  # the resolved config: what the run was asked and what it used
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
    if position.tracker is not None:
        state[keys.EARLY_STOP] = position.tracker.state_dict()
    state[keys.RUN] = dict(position.run)
    return state


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


@dataclass(frozen=True)
class Targets:
    step: int | None
    epoch: int | None

    def reached(self, step: int, epoch: int) -> bool:
        """Whether a run at ``step`` and ``epoch`` has reached either target."""
        return (self.step is not None and step >= self.step) or (
            self.epoch is not None and epoch >= self.epoch
        )


def run_targets(options: FitOptions, first_step: int, position: Position) -> Targets:
    """Where this run stops: its budget counted from here, or, when the checkpoint it
    resumes was written by an interrupted run asked for the same budget (killed, or
    stopped by a signal), that run's own target, so a kill costs nothing but time; or
    here, when this run finishes one that had ended (``options.finishes``)."""
    targets = Targets(
        first_step + options.steps if options.steps is not None else None,
        position.epoch + options.epochs if options.epochs is not None else None,
    )
    folder = None if options.checkpoint_dir is None else Path(options.checkpoint_dir).name
    saved = position.saved_run  # None: nothing resumed
    if options.finishes and ended_here(saved, folder, first_step, position.epoch):
        # Killed after its end-of-run save (or its last periodic one, at its target) and
        # before its verdict: its budget is spent, so it is judged as it is. Trained
        # again, the job would end a whole budget past where an unbroken one ends.
        targets = Targets(first_step, None)
        logger.info("the run continued had ended at step %d: it trains no step more", first_step)
    elif saved is not None and interrupted(saved, options):
        own = Targets(saved.get("target_step"), saved.get("target_epoch"))
        # Reached where it was saved: killed after its last periodic save, before its
        # end-of-run one. It ended in all but its record, so this run trains its own budget
        # instead of "continuing" to a target it reached (0 steps, for ever).
        if not own.reached(first_step, position.epoch):
            targets = own
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
        # The folder it trains in, by name (a candidate's id): a checkpoint copied into
        # another folder (the served model, which a new candidate continues) is not its own.
        "folder": folder,
    }
    return targets


def ended_here(run: object, folder: str | None, step: int, epoch: int) -> bool:
    """Whether ``run``, the run record of a checkpoint resumed at ``step`` and ``epoch``,
    is one of a run that trained in ``folder`` (not a copy from elsewhere) and had ended:
    complete, or at its own target (killed between its last periodic save and its
    end-of-run one)."""
    if not isinstance(run, Mapping) or folder is None or run.get("folder") != folder:
        return False
    own = Targets(run.get("target_step"), run.get("target_epoch"))
    return run.get("complete") is True or own.reached(step, epoch)


def unsaved_end(
    resumed: Path | None, steps_run: int, options: FitOptions, position: Position, stopped: bool
) -> Path | None:
    """The run's end when it trained no step: the checkpoint it resumed (``resumed``), as
    it is; None when the run must save its end (it trained, or it finished one that had
    ended at its own target, killed before its end-of-run save: saved again, complete,
    its record no longer says under way)."""
    if steps_run > 0:
        return None
    saved = position.saved_run
    closes = options.finishes and isinstance(saved, Mapping) and saved.get("complete") is False
    return None if closes and not stopped else resumed


def interrupted(run: object, options: FitOptions) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``run``, a checkpoint's run record, is one of an interrupted run (killed, or
    stopped by a signal) asked for the same budget as ``options``: the same job."""
    return (
        isinstance(run, Mapping)
        and run.get("complete") is False
        and (run.get("steps"), run.get("epochs")) == (options.steps, options.epochs)
    )


def run_steps(run: Run, targets: Targets) -> bool:
    """Run steps until the targets are reached; True if stopped early.

    Also returns (False) when the guard fires; ``fit()`` then demotes and calls again.
    """
    trainer, options, position, guard = run.trainer, run.options, run.position, run.guard
    accum = options.trainer.grad_accum_steps
    cadence = Cadence.of(options)

    while not targets.reached(trainer.step_count, position.epoch):
        yielded = position.batch > 0
        for group in epoch_groups(run.task, position.epoch, position.batch, options.seed, accum):
            yielded = True
            if options.should_stop():
                logger.info("stop requested: stopping at step %d", trainer.step_count)
                return True
            train_step(trainer, options, group, run.loss_fn)
            position.batch += len(group)
            if guard is not None and guard.after_step(trainer, position.epoch, position.batch):
                return False  # fit() rolls back and demotes; the state is not checkpointed
            patience_out = validate(run.task, trainer, position.tracker)
            if run.manager is not None and cadence.due(trainer.step_count):
                run.manager.save(checkpoint_state(run))
                cadence.saved()
            if targets.reached(trainer.step_count, position.epoch) or patience_out:
                return False
        if not yielded:
            unit = "an iteration" if isinstance(run.task, IterationHooks) else "an epoch"
            raise ValueError(
                f"train_batches(epoch={position.epoch}, seed={options.seed}) yielded no "
                f"batches: {unit} needs at least one"
            )
        position.epoch += 1
        position.batch = 0
    return False


def run_iterations(task: IterationHooks, run: Run, targets: Targets) -> bool:
    """Run whole iterations of ``task`` (``run.task``, with its hooks) until the targets
    are reached; True if stopped early (False
    too when the guard fires at a boundary: ``fit()`` then demotes and calls again from
    the snapshot, an iteration's start).

    Each epoch is one iteration, a unit no run stops, checkpoints or rolls back inside.
    PPO is the shape: roll out with the current weights, then take K optimizer steps over
    those rollouts. The rollouts are not kept, so a position inside an iteration cannot be
    resumed or rolled back to. A task says it has this shape by defining the two optional
    hooks of :class:`~genesis_fp16_infrastructure.training.run.task.IterationHooks`, and
    ``fit()`` then runs this instead of the per-step loop (:func:`run_steps`)::

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

    An iteration's steps are :func:`run_steps`' over its epoch, with no stop poll, guard
    or checkpoint of their own; this adds the boundary around them.
    """
    trainer, options, position, guard = run.trainer, run.options, run.position, run.guard
    cadence = Cadence.of(options)
    undivided = replace(options, should_stop=lambda: False)  # polled at boundaries only
    steps = replace(run, options=undivided, manager=None, guard=None)

    while not targets.reached(trainer.step_count, position.epoch):
        if options.should_stop():
            logger.info("stop requested: stopping at step %d", trainer.step_count)
            return True
        epoch, first = position.epoch, trainer.step_count
        task.begin_iteration(trainer, epoch)
        this_one = Targets(targets.step, epoch + 1)  # its end, or a step target inside it
        run_steps(steps, this_one)
        due = cadence.due(trainer.step_count, since=first)
        task.end_iteration(trainer, epoch)
        position.epoch, position.batch = epoch + 1, 0
        if guard is not None and guard.after_step(trainer, position.epoch, 0):
            return False  # fit() rolls back and demotes; the state is not checkpointed
        if run.manager is not None and due:
            run.manager.save(checkpoint_state(run))
            cadence.saved()
        if position.tracker is not None and position.tracker.stopped:
            return False  # patience ran out inside the iteration
    return False


@dataclass
class Cadence:
    """When to write a periodic checkpoint: every N steps, or after S seconds since the last."""

    every_steps: int | None
    every_seconds: float | None
    last: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, options: FitOptions) -> Cadence:
        """The options' cadence. Unless ``checkpoint_steps`` is asked, a run with a clock
        to save by saves on it alone (and at its end): a save costs 15-20 ms with its
        fsyncs, and one at every validation made 11 of a 1,600-step daemon run (issue
        90). Without one (no ``checkpoint_seconds``, or torchrun) it saves every tenth
        of ``steps``, else at each validation of early stopping."""
        # A save is collective under torchrun: ranks must agree on when, and their clocks
        # would not, so only the step bound applies there.
        seconds = None if distributed.is_distributed() else options.checkpoint_seconds
        steps = options.checkpoint_steps
        if steps is None and seconds is None and options.steps is not None:
            steps = max(1, math.ceil(options.steps / 10))
        elif steps is None and seconds is None and options.early_stop is not None:
            steps = options.early_stop.every_steps  # each validation: the record is fresh
        return cls(steps, seconds)

    def due(self, step: int, since: int | None = None) -> bool:
        """Whether a save is due at ``step``, or at any step after ``since`` up to it."""
        since = step - 1 if since is None else since
        if self.every_steps is not None and step // self.every_steps > since // self.every_steps:
            return True
        return self.every_seconds is not None and time.monotonic() - self.last >= self.every_seconds

    def saved(self) -> None:
        self.last = time.monotonic()


def epoch_groups(
    task: TrainingTask, epoch: int, batch: int, seed: int, accum: int
) -> Iterator[list[Any]]:
    """The step groups (``accum`` batches each, the last one shorter) of ``epoch``'s
    batches from ``batch`` on: an exact mid-epoch resume skips exactly the batches the
    checkpointed run consumed. The run's steps and the flight recorder's re-run read this."""
    batches = iter(task.train_batches(epoch, seed))
    for _ in islice(batches, batch):
        pass
    while group := list(islice(batches, accum)):
        yield group


def final_summary(
    trainer: Trainer,
    steps_run: int,
    on_log: Callable[[TrainingSummary], None] | None,
    log_interval: int,
) -> TrainingSummary:
    """The run's closing summary, sent to ``on_log`` when its last log interval was partial.

    Its ``train_loss`` is the run's own final loss, not the last log interval's (the
    interval differs between a terminal's progress bar and a log): what ``train --json``,
    the text and the metrics say. The metrics then end at the run's own totals.
    """
    summary = replace(
        trainer.summary(reset_interval=True), train_loss=trainer.stats.final_train_loss()
    )
    if on_log is not None and steps_run and trainer.step_count % log_interval:
        on_log(summary)
    return summary


def evaluate(
    measure: Callable[[nn.Module], Mapping[str, float]], model: nn.Module, policy: PrecisionPolicy
) -> dict[str, float]:
    model.eval()
    try:
        with torch.no_grad(), policy.autocast():
            metrics = measure(model)
    finally:
        model.train()
    return {name: float(value) for name, value in metrics.items()}


def early_stop_tracker(task: TrainingTask, options: FitOptions) -> EarlyStopTracker | None:
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


def train_step(
    trainer: Trainer, options: FitOptions, group: list[Any], loss_fn: Callable[..., torch.Tensor]
) -> None:
    """One step on ``group``: this rank's share of it, on the run's device; then the hooks."""
    micro, step_loss, samples = distributed.shard_step(group, loss_fn)
    trainer.step(to_device(micro, trainer.policy.device), step_loss, samples)
    for hook in options.step_hooks:
        hook(trainer)


def validate(task: TrainingTask, trainer: Trainer, tracker: EarlyStopTracker | None) -> bool:
    """A validation of the current weights where one is due at this step; True when
    patience has run out."""
    if tracker is None or trainer.step_count % tracker.config.every_steps:
        return False
    measure = task.validate  # type: ignore[attr-defined]  # checked by early_stop_tracker
    metrics = evaluate(measure, trainer.model, trainer.policy)
    return tracker.record(trainer.step_count, metrics, trainer.model)
