"""The flight recorder's fault path: find the first non-finite step and save it as a bundle.

A healthy step pays nothing: the recorder adds no op and no host read to a step. It
acts only where the precision guard's periodic check (its one host read every
``check_interval`` steps) has already found an interval that was not spotless, or
when the guard demotes. Then it re-runs the interval from the guard's snapshot (the
copy the guard restores from) in a scratch trainer of the same precision, eager, one
step at a time with a host read after each, and saves the state before the first step
whose loss or gradients were not finite, with its batches::

    recorder = FlightRecorder(FlightConfig(folder=state_dir / "fault_bundles"), task, seed)
    recorder.after_check(guard, trainer)      # the guard calls it when it set guard.dirty
    recorder.before_demotion(guard, trainer)  # and guard.demote(trainer, ...) first
    recorder.bundles                          # [FaultBundle(path, reason, step, ...)]

The live trainer, its RNG and its captured graphs are not touched: the run goes on
exactly as it would with recording off (every generator is put back after the re-run).

Expected skips: an fp16 run starts its loss scale high (``init_scale``, or the scale
carried from the previous run) and lets its first steps overflow until the scale fits,
which may take a few overflows spread over its first intervals. Those are told apart
by the guard's own notion of a good state: a step skipped for gradients that overflowed
(its loss finite) *before the run's first spotless check interval* (while the guard's
snapshot is still the one taken at the start) is calibration, and is not bundled.
A non-finite loss is always a fault, and an overflow after that first spotless
interval is one. A fault that hides inside the calibration and persists makes the guard
demote, and every demotion is bundled.
"""

from __future__ import annotations

import copy
import logging
import platform
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from genesis_fp16_infrastructure.training.flight.bundle import data_signature, save_bundle
from genesis_fp16_infrastructure.training.flight.bundle_files import FlightConfig
from genesis_fp16_infrastructure.training.flight.recorded_step import (
    plain_batch,
    run_recorded_step,
    type_name,
)
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.reports import FaultBundle
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard
from genesis_fp16_infrastructure.training.run.loop import epoch_groups
from genesis_fp16_infrastructure.training.run.task import (
    IterationHooks,
    TrainingTask,
    task_trainer,
)
from genesis_fp16_infrastructure.training.step.trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass
class _Fault:
    state: dict[str, Any]
    batches: list[Any]
    samples: int
    recorded: dict[str, Any]
    step: int  # the step's number (1-based, as step_count after it)


class FlightRecorder:
    """Writes the run's fault bundles; see the module docstring."""

    def __init__(self, config: FlightConfig, task: TrainingTask, seed: int) -> None:
        self.config = config
        self.task = task
        self.seed = seed
        self.bundles: list[FaultBundle] = []  # any: the run's first is written

    def after_check(self, guard: PrecisionGuard, trainer: Trainer) -> None:
        """After a check that was not spotless: bundle the run's first non-finite step."""
        dirty, guard.dirty = guard.dirty, None
        if self.bundles or dirty is None or guard.snapshot is None:
            return
        if dirty["nonfinite"] == 0 and _calibrating(trainer, guard):  # no re-run
            logger.info("flight recorder: fp16 scale calibration skips at the start, not a fault")
            return
        self._record(guard, trainer, demotion=False)

    def before_demotion(self, guard: PrecisionGuard, trainer: Trainer) -> None:
        """Before a demotion changes anything: bundle the step that brought it (the first
        non-finite one since the snapshot, else the first step after it)."""
        guard.dirty = None
        if guard.snapshot is None or guard.pending is None:
            return
        self._record(guard, trainer, demotion=True)

    # ------------------------------------------------------------------ the re-run

    def _record(self, guard: PrecisionGuard, trainer: Trainer, demotion: bool) -> None:
        rng = capture_rng_state()  # the scratch trainer's loads and steps move every generator
        try:
            fault = self._rerun(guard, trainer, demotion)
        except Exception as error:  # a bundle is evidence, never a reason to stop the run
            logger.warning("flight recorder: no bundle (%s: %s)", type(error).__name__, error)
            return
        finally:
            restore_rng_state(rng)
        if fault is not None:
            self._save(fault, "demotion" if demotion else "first_nonfinite", trainer)

    def _rerun(self, guard: PrecisionGuard, trainer: Trainer, demotion: bool) -> _Fault | None:
        snapshot = guard.restore()
        scratch = scratch_trainer(self.task, trainer)
        scratch.load_state_dict(snapshot.trainer)
        calibrating = _calibrating(trainer, guard)
        first: _Fault | None = None
        groups = _groups_from(self.task, scratch, snapshot.epoch, snapshot.batch, self.seed)
        for group in groups:
            if scratch.step_count >= trainer.step_count:  # the live trainer's: it stands still
                break
            before = copy.deepcopy(scratch.state_dict())  # a host sync: the fault path only
            micro, samples = [b for b, _ in group], sum(n for _, n in group)
            fault = run_recorded_step(scratch, self.task.loss, micro, samples)
            fault_state = _Fault(before, micro, samples, fault, scratch.step_count)
            if first is None:
                first = fault_state
            nonfinite = fault["skipped"] or not all(fault["loss_finite"])
            if not nonfinite:
                continue
            if calibrating and all(fault["loss_finite"]):
                continue  # the scale still coming down from its start: expected
            return fault_state
        return first if demotion else None

    def _save(self, fault: _Fault, reason: str, trainer: Trainer) -> None:
        context = self.config.context_data()
        bundle = {
            "reason": reason,
            "step": fault.step,
            "precision": trainer.policy.name,
            "precision_reason": trainer.policy.resolved.reason,
            "execution": trainer.execution.used,
            "device": str(trainer.policy.device),
            "device_name": _device_name(trainer.policy.device),
            "torch": str(torch.__version__),
            "python": platform.python_version(),
            "config": _plain(asdict(trainer.config)),
            "optimizers": [type_name(type(o)) for o in trainer.optimizers],
            "state": fault.state,
            "batches": [plain_batch(b) for b in fault.batches],
            "samples": fault.samples,
            # The records' ids, where the task says them (an optional record_ids(batch)).
            "record_ids": _optional(
                self.task, "record_ids", lambda ids: [list(ids(b)) for b in fault.batches]
            ),
            "recorded": fault.recorded,
            "context": _plain(dict(context)),
            # What rebuilds the step without the run's data (the task's optional
            # replay_spec(): plain data, e.g. the model's construction arguments, for its
            # plugin's replay_task; None: the plugin rebuilds the step from the request),
            # and what tells later whether that data changed.
            "rebuild": _optional(self.task, "replay_spec", lambda spec: _plain(spec())),
            "data": data_signature(_data_path(context)),
        }
        try:
            path = save_bundle(self.config.folder, bundle, self.config.limits)
        except OSError as error:
            logger.warning(
                "flight recorder: cannot write a bundle in %s: %s", self.config.folder, error
            )
            return
        record = FaultBundle(
            str(path), reason, fault.step, trainer.policy.name, path.stat().st_size
        )
        self.bundles.append(record)
        logger.warning("flight recorder: %s at step %d saved to %s", reason, fault.step, path)


def scratch_trainer(task: TrainingTask, trainer: Trainer) -> Trainer:
    """A fresh eager trainer of the task's model in ``trainer``'s precision."""
    live = trainer.policy
    policy = PrecisionPolicy.from_decision(
        live.resolved, live.device, live.scaler.config, announce=False
    )
    model = task.build_model().to(policy.device)
    config = replace(trainer.config, cuda_graph="off", compile="off", measured_execution=None)
    return task_trainer(task, model, policy, config)


def _groups_from(
    task: TrainingTask, scratch: Trainer, epoch: int, batch: int, seed: int
) -> Iterator[list[Any]]:
    """The run's step groups from ``(epoch, batch)`` on, across epoch ends (as run_steps).

    A task with iterations (training.run.loop.run_iterations) begins each on the scratch
    trainer before its batches are drawn, so that they are rolled out again with the
    scratch weights, which are the run's at that iteration's start (the guard snapshots
    at iteration boundaries only). The task's per-iteration state then points at the
    scratch trainer until its next ``begin_iteration``, which the run always calls before
    it steps again."""
    accum = scratch.config.grad_accum_steps  # the live trainer's
    while True:
        if isinstance(task, IterationHooks):
            task.begin_iteration(scratch, epoch)
        yielded = False
        for group in epoch_groups(task, epoch, batch, seed, accum):
            yielded = True
            yield group
        if not yielded and batch == 0:
            return
        epoch, batch = epoch + 1, 0


def _calibrating(trainer: Trainer, guard: PrecisionGuard) -> bool:
    """True while an overflow may be fp16's start-up calibration (module docstring): fp16,
    and no spotless interval since the start (the guard's snapshot is still its first)."""
    first = guard.snapshot is not None and guard.snapshot.step == guard.start_step
    return trainer.policy.name == "fp16" and first


def _optional(task: TrainingTask, method: str, use: Callable[[Callable[..., Any]], Any]) -> Any:
    """``use`` of the task's optional ``method``; None where the task has none, or where
    it raises (logged: the bundle is still evidence without it, never a reason to fail)."""
    say = getattr(task, method, None)
    if not callable(say):
        return None
    try:
        return use(say)
    except Exception as error:
        logger.warning("flight recorder: %s failed: %s", method, error)
        return None


def _data_path(context: Mapping[str, Any]) -> str | None:
    request = context.get("request")
    path = request.get("data_path") if isinstance(request, Mapping) else None
    return str(path) if path else None


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def _plain(value: Any) -> Any:
    """Plain Python data only (``weights_only``): other objects as their text."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
