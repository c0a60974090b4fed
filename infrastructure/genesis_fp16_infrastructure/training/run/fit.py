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

import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import checkpoint_keys, distributed
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded, read_checkpoint
from genesis_fp16_infrastructure.training.flight.range_stats import REPORTED_MODULES, RangeStats
from genesis_fp16_infrastructure.training.flight.recorder import FlightRecorder
from genesis_fp16_infrastructure.training.precision.decide import decide_continued
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import clamp_scale
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.reports import Calibration, Demotion
from genesis_fp16_infrastructure.training.rng import seed_everything
from genesis_fp16_infrastructure.training.run.calibration import measured_execution, policy_for_run
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard
from genesis_fp16_infrastructure.training.run.loop import (
    Position,
    Run,
    checkpoint_state,
    early_stop_tracker,
    evaluate,
    final_summary,
    interrupted,
    resume_run,
    run_iterations,
    run_steps,
    run_targets,
    unsaved_end,
)
from genesis_fp16_infrastructure.training.run.task import (
    FitOptions,
    FitResult,
    IterationHooks,
    TrainingTask,
    task_trainer,
)
from genesis_fp16_infrastructure.training.run.verify_capture import verify_run
from genesis_fp16_infrastructure.training.step.trainer import StepTuning, Trainer, TrainerConfig
from genesis_fp16_infrastructure.training.step_spec import StepSpec

logger = logging.getLogger(__name__)


def fit(task: TrainingTask, options: FitOptions) -> FitResult:
    """Train ``task`` as ``options`` say and return what happened; see the module docstring."""
    started = time.perf_counter()  # FitResult.seconds: the whole call
    continued, options = continued_job(options)
    config = _trainer_config(options)
    calibration: Calibration | None = None
    if continued is not None:  # auto is decided once per job: no second measurement
        policy = continued
    else:  # times the candidates for a measured auto only
        policy, calibration = policy_for_run(
            task,
            options.precision,
            options.device,
            options.scaler,
            options.seed,
            config,
            expected_steps=_expected_steps(task, options),
        )
    seed_everything(options.seed)  # after the calibration: it leaves no trace in the run
    if options.on_precision is not None:  # decided: said now, not at the first report
        options.on_precision(policy.name)
    if options.initial_loss_scale is not None:  # a resumed checkpoint's scale replaces it
        start_scale_at(policy, options.initial_loss_scale)
    options = replace(options, should_stop=distributed.agreed_stop(options.should_stop))
    if calibration is not None and options.cuda_graph == "auto":  # run what was timed faster
        config = replace(config, measured_execution=measured_execution(calibration))
    trainer = _build_trainer(task, policy, config, options)
    if options.checkpoint_dir is None:
        result = _fit(task, options, trainer, None, calibration)
        return replace(result, seconds=time.perf_counter() - started)
    manager = distributed.checkpoint_manager(options.checkpoint_dir, options.keep)
    # One writer per checkpoint folder (rank 0 under torchrun): a second is refused here,
    # in one line naming the first. Held until the run ends, kill -9 included.
    manager.claim(f"{Path(sys.argv[0]).name} {' '.join(sys.argv[1:3])}".strip())
    try:
        removed = manager.remove_stale_temps()  # every temp: no other writer can exist
        if removed:
            logger.warning(
                "removed %d temp file(s) of killed saves from %s: %s",
                len(removed),
                manager.directory,
                ", ".join(p.name for p in removed),
            )
        result = _fit(task, options, trainer, manager, calibration)
        return replace(result, temps_removed=len(removed), seconds=time.perf_counter() - started)
    finally:
        manager.release()


def _fit(
    task: TrainingTask,
    options: FitOptions,
    trainer: Trainer,
    manager: CheckpointManager | None,
    calibration: Calibration | None,
) -> FitResult:
    position = Position(tracker=early_stop_tracker(task, options))
    resumed_from = None
    if options.resume:
        resumed_from = resume_run(task, trainer, manager, position, options.loaded_checkpoint)
    # A captured step is checked against eager steps of this state before it is trusted
    # (once per device, torch, shapes and precision; eager with the reason when it differs).
    verify_run(task, trainer, options.seed, options.precision.cache)
    first_step = trainer.step_count
    # The chain's counts where this run begins (one host read): the run's own skipped
    # steps and non-finite losses are the end's less these.
    before = trainer.summary()
    targets = run_targets(options, first_step, position)
    guard, recorder = None, None
    if options.guard:
        guard = PrecisionGuard(options.guard, task.extra_state)
        guard.start(trainer, position.epoch, position.batch)
        # The flight recorder re-runs one rank's steps: one process only. The guard tells
        # it after each check that was not spotless. Batches must depend on (epoch, seed)
        # and, for a task with iterations, on the weights of the iteration's start (it
        # rolls each iteration out again from the guard's snapshot).
        if options.flight is not None and distributed.rank_and_world()[1] == 1:
            recorder = guard.recorder = FlightRecorder(options.flight, task, options.seed)
    loss_fn = guard.watch_loss(task.loss) if guard is not None else task.loss
    stats = None
    if options.range_stats is not None:
        stats = RangeStats(options.range_stats, options.on_range_stats)
        stats.follow(trainer)  # each demoted trainer is followed from its first step
        options = replace(options, step_hooks=(*options.step_hooks, stats.after_step))
    demotions: list[Demotion] = []
    failure: Mapping[str, str] | None = None
    tracker = position.tracker
    stopped = False
    if tracker is not None and tracker.stopped:
        logger.info("early stopping: this run had already stopped (%s)", tracker.stop_reason)
    run = Run(task, trainer, options, manager, position, loss_fn, guard)
    while tracker is None or not tracker.stopped:
        if isinstance(task, IterationHooks):  # checks and saves at iteration boundaries
            stopped = run_iterations(task, run, targets)
        else:
            stopped = run_steps(run, targets)
        trainer = run.trainer
        if guard is None or guard.final_check(trainer, position.epoch, position.batch) is None:
            break
        failure = guard.failure()
        if failure is not None:  # nowhere to demote to: the run cannot learn, and ends failed
            break
        demotions.append(_demote(run, guard))
        trainer = run.trainer  # the demoted one, even if the loop ends here
        if tracker is not None:
            tracker.forget_after(trainer.step_count)
    if stats is not None:
        stats.detach()  # no hooks left on the model the caller gets back
    model, policy = trainer.model, trainer.policy
    steps_run = trainer.step_count - first_step

    checkpoint = unsaved_end(resumed_from, steps_run, options, position, stopped)
    position.run["complete"] = not stopped  # reached its target, or early stopping ended it
    # A failed run writes no end-of-run checkpoint: its state is the last one that learned.
    if manager is not None and checkpoint is None and failure is None:
        checkpoint = manager.save(checkpoint_state(run))
    if tracker is not None:
        tracker.restore_best(model)  # after the checkpoint: it keeps the last weights
    summary = final_summary(trainer, steps_run, options.on_log, options.log_interval)
    metrics = evaluate(task.evaluate, model, policy)
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
        failure=failure,
        skipped_run=summary.skipped_steps - before.skipped_steps,
        nonfinite_run=summary.nonfinite_losses - before.nonfinite_losses,
        execution=trainer.execution,
        calibration=calibration,
        early_stop=None if tracker is None else tracker.report(not stopped),
        fault_bundles=tuple(recorder.bundles) if recorder is not None else (),
        ranges=stats.summary(REPORTED_MODULES) if stats is not None else None,
    )


def continued_job(options: FitOptions) -> tuple[PrecisionPolicy | None, FitOptions]:
    """For a run that continues an interrupted job (its newest checkpoint was written by
    a run asked for the same budget that did not finish: killed, or stopped by a signal):
    the policy :func:`decide_continued` answers (an ``auto`` job keeps the precision it
    was decided in), and ``options`` with that checkpoint read, so that the resume does
    not read it again; a run of 0 steps (an eval) takes its checkpoint's precision too.
    None: decided afresh (nothing to resume, a finished run's checkpoint: the next run is
    a new job, or a precision this run may not use; the resume then says at WARNING what
    changed and why).

    Measuring again at each resume could pick another precision mid-job, on a host whose
    load changed: a killed and resumed job would then end nowhere near the unbroken one.
    """
    if not options.resume or options.checkpoint_dir is None or not options.precision.measures:
        return None, options
    loaded = options.loaded_checkpoint or _newest_checkpoint(options.checkpoint_dir)
    if loaded is None:
        return None, options
    options = replace(options, loaded_checkpoint=loaded)
    record = loaded.state.get(checkpoint_keys.PRECISION)
    saved = record.get("used") if isinstance(record, Mapping) else None
    # A run that trains nothing (the served model's eval) evaluates in the precision it ran.
    same_job = interrupted(loaded.state.get(checkpoint_keys.RUN), options) or options.steps == 0
    decision = decide_continued(options.precision, options.device, saved) if same_job else None
    if decision is None:
        return None, options
    return PrecisionPolicy.from_decision(decision, options.device, options.scaler), options


def _newest_checkpoint(folder: Path) -> Loaded | None:
    """The newest checkpoint in ``folder`` that reads, read once (the resume takes it)."""
    for path in reversed(CheckpointManager(folder).checkpoints()):
        try:
            return read_checkpoint(path)
        except CheckpointError:
            continue  # the resume skips it too, with a warning
    return None


def start_scale_at(policy: PrecisionPolicy, scale: float) -> None:
    """Start ``policy``'s loss scale at ``scale``, clamped to its floor and ceiling; its
    settings stay as they are (the calibration cache and the verification are keyed by
    them). Nothing happens where the scaler is disabled (fp32, bf16)."""
    scaler = policy.scaler
    if not scaler.is_enabled():
        return
    start = clamp_scale(scale, scaler.config)
    scaler.update(new_scale=start)  # the scale only: no counter moves, no host read
    logger.info("loss scale starts at %g (carried from the previous run)", start)


def _build_trainer(
    task: TrainingTask, policy: PrecisionPolicy, config: TrainerConfig, options: FitOptions
) -> Trainer:
    model = task.build_model().to(policy.device)
    policy.check_model(model)
    model = distributed.wrap_model(model, policy, fsdp=options.fsdp)  # no-op in one process
    return task_trainer(task, model, policy, config, options.on_log)


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
    """The trainer's config: the run's step fields (``StepSpec``'s) and its own tuning."""
    shared = {item.name: getattr(options, item.name) for item in fields(StepSpec)}
    own = {item.name: getattr(options.trainer, item.name) for item in fields(StepTuning)}
    return TrainerConfig(**shared, **own)


def _demote(run: Run, guard: PrecisionGuard) -> Demotion:
    """Roll back to the guard's last good state in a trainer of the next precision (the
    run's from then on), and the demotion's record.

    Needs a fired trigger (``guard.pending``) below the ladder's last rung. The policy
    takes the run's loss-scaler config, not the troubled trainer's (a rebuilt trainer's
    own may be a default). The guard then watches the new trainer from the rolled-back
    state, keeping its snapshot: the state rolled back to is the last good one.
    """
    task, trainer, options, manager = run.task, run.trainer, run.options, run.manager
    policy, record = guard.demote(trainer, options.scaler)
    snapshot = guard.restore()
    demoted = _build_trainer(task, policy, trainer.config, options)  # measured execution kept
    demoted.load_state_dict(snapshot.trainer)  # model, optimizers, schedulers, scaler, RNG
    run.position.epoch, run.position.batch = snapshot.epoch, snapshot.batch
    loader = getattr(task, "load_extra_state", None)
    if callable(loader):
        loader(snapshot.extra)
    if manager is not None:
        # Checkpoints after the rollback step (names sort by step) hold the troubled trajectory.
        rollback = manager.path_for(snapshot.step).name
        for stale in manager.checkpoints():
            if stale.name > rollback:
                logger.warning("precision guard: removing %s (after the rollback step)", stale)
                manager.remove(stale)
    verify_run(task, demoted, options.seed, options.precision.cache)
    guard.start(demoted, snapshot.epoch, snapshot.batch, snapshot=False)
    run.trainer = demoted
    return record
