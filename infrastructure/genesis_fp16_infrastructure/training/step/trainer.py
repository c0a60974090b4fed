"""One correct mixed-precision optimizer step at a time, with statistics kept on the device.

::

    policy = PrecisionPolicy.create("fp16", "cpu")
    trainer = Trainer(model, [torch.optim.AdamW(model.parameters(), fused=True)], policy,
                      TrainerConfig(max_grad_norm=1.0, log_interval=50))
    def loss_fn(model, batch):  # one function for the whole run (a CUDA graph replays it)
        return F.mse_loss(model(batch[0]), batch[1])

    for batch in batches:
        trainer.step([batch], loss_fn, num_samples=len(batch[0]))
    print(trainer.summary())  # reads the device: a host sync

Host syncs, honestly:

- Every precision skips a step whose gradients are not finite (fp16: an overflow of
  the scaled gradients; fp32 and bf16: the same check with a scale of 1).
- ``fused=True`` Adam/AdamW/SGD and no LR schedulers: none per step, in every
  precision. The overflow flag stays on the device; the fused kernels skip the update
  themselves.
- Any other optimizer, or LR schedulers: one host read of the overflow flag per step,
  because a non-fused optimizer cannot skip on its own and a scheduler must not
  advance on a skipped step (its learning rate is computed on the host).
- Statistics are read only at log intervals, by ``summary()`` and by ``state_dict()``:
  the trainer's ``step_stats.StepStats`` keeps them on the device (a step adds its row with a
  few ops and no host read; only ``StepStats.read_counts`` and
  ``StepStats.final_train_loss`` read the device).

Launches, honestly: each op is a kernel launch on CUDA, and a small model's eager step
is launch-bound. Over a hand-written loop (autocast, backward, clip, step; in fp16 with
``torch.amp.GradScaler``) a step of one micro-batch adds 5 aten ops in fp32 and bf16 (two
make the row of loss statistics, one checks the gradients into the row's zeroed flag,
one adds the row, and the skip: a host read of the flag with a non-fused optimizer, the
fused optimizer's own step-count correction with a fused one) and 4 in fp16, scaler
included (a test counts them). What it keeps lazily instead: the
skipped steps are the scaler's overflow count plus the row's flags, the non-finite
losses are the losses seen less the finite ones.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training import distributed
from genesis_fp16_infrastructure.training.precision.execution_names import (
    COMPILE_MODE,
    COMPILE_REQUESTS,
    CUDA_GRAPH_REQUESTS,
)
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.reports import TrainingSummary
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state
from genesis_fp16_infrastructure.training.step.cuda_graph import (
    CaptureFailed,
    StepGraphs,
    signature,
)
from genesis_fp16_infrastructure.training.step.execution import (
    MeasuredExecution,
    fell_back,
    resolve_execution,
)
from genesis_fp16_infrastructure.training.step.step_stats import StepStats
from genesis_fp16_infrastructure.training.step_spec import StepSpec

logger = logging.getLogger(__name__)
B = TypeVar("B")
LossFn = Callable[[nn.Module, Any], torch.Tensor]
OnLog = Callable[[TrainingSummary], None]


@dataclass(frozen=True, kw_only=True)
class StepTuning(Bounded):
    """The trainer's own settings, beside the step fields every run shares (``StepSpec``):
    ``fit()`` takes these as ``FitOptions.trainer`` and the step fields from the run.

    - ``max_grad_norm``: clip the global norm of the *unscaled* gradients; None: off.
    - ``grad_accum_steps``: micro-batches per optimizer step. ``Trainer.step`` accumulates
      over however many micro-batches it is given (and divides the loss by that count);
      this setting tells ``fit()`` how many consecutive batches to group into one step.
    - ``overflow_window``: the number of recent steps ``overflow_rate_window`` covers.
    - ``measured_execution``: under ``cuda_graph="auto"``, what calibration timed faster
      for this run (set by ``fit()``; None keeps the rule: captured wherever the run can
      be). ``Trainer.execution`` says what ran and why.
    """

    SETTING = "trainer"
    max_grad_norm: float | None = bounded(1.0, gt=0.0)  # None: no clipping
    grad_accum_steps: int = bounded(1, ge=1)
    overflow_window: int = bounded(100, ge=1)
    measured_execution: MeasuredExecution | None = None


@dataclass(frozen=True, kw_only=True)
class TrainerConfig(StepSpec, StepTuning):
    """How each step runs and how often it reports: the step fields
    (:class:`~genesis_fp16_infrastructure.training.step_spec.StepSpec`'s
    ``log_interval``, ``cuda_graph``, ``compile``, shared with the run's ``RunSpec``) and
    the trainer's own (:class:`StepTuning`'s).

    With ``compile="on"`` the model is compiled with
    ``torch.compile(mode="max-autotune-no-cudagraphs")``; the model itself stays
    uncompiled (its state dict keys, its eval): the trainer steps a compiled view of it.
    """

    def __post_init__(self) -> None:
        StepTuning.__post_init__(self)
        for name, choices in (("compile", COMPILE_REQUESTS), ("cuda_graph", CUDA_GRAPH_REQUESTS)):
            if (value := getattr(self, name)) not in choices:
                raise ValueError(f"{name}={value!r}: choose from {', '.join(choices)}")
        if self.log_interval < 1:
            raise ValueError(f"log_interval={self.log_interval!r}: must be >= 1")


class Trainer:
    """Runs optimizer steps in the order AMP needs, for any :class:`PrecisionPolicy`.

    Per ``step()``: for each micro-batch, the forward in ``policy.autocast()``, the loss
    cast to fp32, divided by the number of micro-batches, scaled and back-propagated;
    then ``unscale_`` for every optimizer, clipping of the unscaled gradients, one
    optimizer step each (all skipped when any gradient overflowed), exactly one
    ``scaler.update()``, gradients set to None (after a skipped step too), and the LR
    schedulers advanced only when the step was taken.

    Several optimizers share one skip decision: with a global gradient norm, an
    overflow in one optimizer's gradients would otherwise reach the others through
    clipping (a NaN norm makes every gradient NaN).

    ``generators``: the CUDA ``torch.Generator`` objects of the caller's own that the loss
    draws from; a captured step registers them with its graphs, so that each replay
    draws fresh numbers (:mod:`~genesis_fp16_infrastructure.training.step.cuda_graph`). The
    default generators need nothing; eager steps ignore the list.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizers: Sequence[Optimizer],
        policy: PrecisionPolicy,
        config: TrainerConfig = TrainerConfig(),  # frozen, so sharing the default is safe
        schedulers: Sequence[LRScheduler] = (),
        on_log: OnLog | None = None,
        generators: Sequence[torch.Generator] = (),
    ) -> None:
        if not optimizers:
            raise ValueError("Trainer needs at least one optimizer; got none")
        self.model = model
        self.optimizers = list(optimizers)
        self.policy = policy
        self.config = config
        self.schedulers = list(schedulers)
        self.on_log = on_log
        self.scaler = policy.scaler
        self.step_count = 0
        # True: the next step() runs eagerly, bypassing the graphs (neither warmed up,
        # captured nor replayed), then goes back to False. An instrumented step: Python
        # hooks on the model run, which a replay never does (range statistics' samples).
        self.eager_next = False
        self._params = [p for o in self.optimizers for g in o.param_groups for p in g["params"]]
        # DDP/FSDP: every micro-batch but the last accumulates without a collective.
        self._no_sync = distributed.no_sync(model)
        # Decided once: the optimizers and schedulers do not change during a run. True
        # when step() must read the overflow flag on the host (see the module docstring).
        self.host_sync_per_step = policy.needs_host_read(self.optimizers, self.schedulers)
        self.stats = StepStats(policy.device, config.overflow_window, self.scaler)
        self.execution = resolve_execution(
            config.cuda_graph,
            policy.device,
            self.optimizers,
            self.schedulers,
            host_sync_per_step=self.host_sync_per_step,
            world_size=distributed.rank_and_world()[1],
            measured=config.measured_execution,
            compile=config.compile,
        )
        # A CPU has one way to step (and every calibration trainer said so again): DEBUG.
        said = logger.info if policy.device.type == "cuda" else logger.debug
        said("execution %s (%s)", self.execution.used, self.execution.reason)
        # Warm-up, capture and replay of _device_step; None for eager steps.
        compiled = self.execution.used == "cuda_graph_compiled"
        self.generators = tuple(generators)
        self.graphs = None
        if compiled or self.execution.used == "cuda_graph":
            self.graphs = StepGraphs(
                policy.device, generators=self.generators, fail_on_recompile=compiled
            )
        # What the loss function is given: the model, or a compiled view of it (the same
        # parameters). Its first calls compile (seconds to minutes with autotuning), in the
        # graphs' eager warm-up steps, never inside a capture.
        self.step_model: nn.Module = self.model
        if compiled:
            self.step_model = torch.compile(self.model, mode=COMPILE_MODE)  # type: ignore[assignment]

    # ------------------------------------------------------------------ the step

    def step(self, micro_batches: Sequence[B], loss_fn: LossFn, num_samples: int) -> None:
        """Run one optimizer step over ``micro_batches`` (gradient accumulation).

        ``loss_fn(model, batch)`` runs the forward and returns a scalar loss; it is called
        inside ``policy.autocast()``. ``num_samples`` counts the samples in all
        micro-batches together, for samples/s.

        On the captured path (``execution.used`` is ``cuda_graph*``) the trainer takes one
        ``loss_fn`` for its life: a replay runs the loss that was captured, so a different
        one raises ``ValueError`` (``graphs.reset()`` lifts it, at the cost of a new
        warm-up and capture). Eager steps call whatever they are given.

        The step puts the model in training mode when the model's own flag says it is
        not (``model.eval()`` for an evaluation: one walk of its modules per change of
        mode, not per step). A submodule switched to eval on its own between steps is
        left so.
        """
        if not micro_batches:
            raise ValueError("step() needs at least one micro-batch; got an empty sequence")
        if self.stats.started is None:
            self.stats.started = time.perf_counter()
        if not self.model.training:  # after an evaluation; not a module walk every step
            self.model.train()
        eager, self.eager_next = self.eager_next, False
        if self.graphs is None or eager:
            taken = self._device_step(micro_batches, loss_fn)
        else:  # the same step, replayed (resolve_execution: no schedulers on this path)
            taken = self._graphed_step(self.graphs, micro_batches, loss_fn)
        if taken:
            for scheduler in self.schedulers:
                scheduler.step()
        self.step_count += 1
        self.stats.end_step(self.step_count, len(micro_batches), num_samples)
        if self.on_log is not None and self.step_count % self.config.log_interval == 0:
            self.on_log(self.summary(reset_interval=True))

    def _graphed_step(
        self, graphs: StepGraphs, micro_batches: Sequence[B], loss_fn: LossFn
    ) -> bool:
        """The step through ``graphs``; a capture that fails costs the run its graphs only.

        Before a step that captures, the trainer keeps what a failed capture can change:
        host-side state only (step count, loss statistics, random states, the scaler's
        Python fields), no device read. A capture runs no kernel, so the parameters,
        optimizer state and device counters are as they were. When the capture fails
        (``CaptureFailed``: the graphs healed the stream and generators), the run goes
        eager for good (``execution.fallback`` is ``capture_failed``) and the same step runs
        eagerly, after the ``except`` block, so nothing of the failure is alive during it.
        A replay that raises is not caught: its step may have written part of the state.
        """
        graphs.bind(loss_fn)
        key = signature(micro_batches)  # once a step: a walk of every tensor of the batch
        before = self._before_capture() if graphs.captures(key) else None
        failed = None
        try:
            graphs.run(lambda batches: self._device_step(batches, loss_fn), micro_batches, key)
        except CaptureFailed as exc:
            if before is None:
                raise
            failed = f"the capture at step {self.step_count + 1} raised: {exc}"
        if failed is None or before is None:
            return True
        self.fall_back_to_eager("capture_failed", failed)
        self._restore_before_capture(before)  # the step boundary before the capture
        return self._device_step(micro_batches, loss_fn)

    def _before_capture(self) -> dict[str, Any]:
        """What a failed capture can change, read without touching the device."""
        return {
            "stats": self.stats.snapshot(),  # clones on the device: no read
            "rng": capture_rng_state(),  # host values only
            "generators": [g.get_state() for g in self.generators],
            "scaler": _python_fields(self.scaler),
        }

    def _restore_before_capture(self, before: dict[str, Any]) -> None:
        for optimizer in self.optimizers:  # a capture may have left pool gradients behind
            optimizer.zero_grad(set_to_none=True)
        self.stats.restore(before["stats"])
        restore_rng_state(before["rng"])
        for generator, state in zip(self.generators, before["generators"], strict=True):
            generator.set_state(state)
        vars(self.scaler).clear()
        vars(self.scaler).update(before["scaler"])

    def fall_back_to_eager(self, fallback: str, why: str) -> None:
        """Leave the captured step for eager ones for the rest of this trainer's life;
        ``execution`` then says eager, with ``fallback`` (a ``FALLBACK_REASONS`` label) and
        ``why``. The state is not touched: the caller restores a good one if it must."""
        if self.graphs is None:
            return
        self.execution = fell_back(self.execution, fallback, why)
        self.graphs = None  # its memory pool goes with it
        self.step_model = self.model
        logger.warning("execution: %s", self.execution.reason)

    def _device_step(self, micro_batches: Sequence[B], loss_fn: LossFn) -> bool:
        """Everything a step does on the device; True unless it was skipped on the host.

        It keeps no Python state that changes from step to step, so it can be captured
        into a CUDA graph once and replayed (``cuda_graph.StepGraphs``).
        """
        loss_row = self._accumulate(micro_batches, loss_fn)
        # 0-dim, on the device: no sync. The row's flag is zero here (_loss_row wrote it).
        found_inf = self.policy.unscale(self.optimizers, self.stats.row_flag)
        norm = self._clip()
        taken = self.policy.step(self.optimizers, found_inf, self.host_sync_per_step)
        self.policy.update()
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        overflow = self.policy.overflowed(found_inf)
        captured = self.graphs is not None
        self.stats.record(loss_row, found_inf, overflow, norm, self.step_count, captured)
        return taken

    def _accumulate(self, micro_batches: Sequence[B], loss_fn: LossFn) -> torch.Tensor:
        """Forward and backward every micro-batch; return the step's row of loss stats."""
        count = len(micro_batches)
        losses = []
        for index, batch in enumerate(micro_batches):
            if self._no_sync is not None and index < count - 1:
                with self._no_sync():  # the last micro-batch's backward reduces the sum
                    losses.append(self._forward_backward(batch, loss_fn, count))
            else:
                losses.append(self._forward_backward(batch, loss_fn, count))
        with torch.no_grad():  # no detach() needed: one op fewer
            if count == 1:
                return self.stats.loss_row(losses[0])
            stacked = torch.stack(losses)
            row = self.stats.loss_row(stacked.sum() / count)
            # Not torch.isfinite: that is four ops on the CPU; nan < inf and inf < inf are False.
            self.stats.row_finite.copy_((stacked.abs() < math.inf).sum(dtype=torch.float32))
            return row

    def _forward_backward(self, batch: B, loss_fn: LossFn, count: int) -> torch.Tensor:
        # No cast cache in a graph: cached casts would outlive the capture that made them.
        with self.policy.autocast(cache_enabled=self.graphs is None):
            loss = loss_fn(self.step_model, batch)
        loss = loss.float()
        # x / 1 == x exactly: the division is one tiny op saved on the common path.
        self.policy.backward(loss / count if count > 1 else loss)
        return loss

    def _clip(self) -> torch.Tensor | None:
        if self.config.max_grad_norm is None:
            return None
        # error_if_nonfinite=False: an overflowing step is skipped below, not raised.
        return torch.nn.utils.clip_grad_norm_(
            self._params, self.config.max_grad_norm, error_if_nonfinite=False, foreach=True
        )

    # ------------------------------------------------------------------ reading the device

    def summary(self, reset_interval: bool = False) -> TrainingSummary:
        """The statistics so far. Reads the device: a host sync.

        ``train_loss`` is the mean finite step loss since the last log interval (or the
        previous interval's value when no step has run since). ``reset_interval`` starts
        a new interval; the trainer does that itself when it calls ``on_log``.
        """
        steps = self.step_count
        recent = min(steps, self.config.overflow_window)
        stats = self.stats
        skipped, nonfinite, window_sum, loss_sum, count = stats.read_counts(recent)
        if count:
            stats.last_train_loss = loss_sum / count
        if reset_interval:
            stats.reset_interval()
        window = window_sum / recent if recent else 0.0
        wall = time.perf_counter() - stats.started if stats.started is not None else 0.0
        return TrainingSummary(
            precision=self.policy.name,
            step=steps,
            optimizer_steps=steps - int(skipped),
            skipped_steps=int(skipped),
            overflow_rate=skipped / steps if steps else 0.0,
            overflow_rate_window=window,
            loss_scale=self.scaler.get_scale(),
            grad_norm=float(stats.grad_norm.item()),
            train_loss=stats.last_train_loss,
            nonfinite_losses=int(nonfinite),
            samples=stats.samples,
            samples_per_second=stats.samples / wall if wall > 0 else 0.0,
            wall_seconds=wall,
            unstable=self.scaler.unstable,
        )

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit for bit, as ``weights_only``-safe data.

        Keys are those of :mod:`~genesis_fp16_infrastructure.training.checkpoint_keys`;
        ``fit()`` adds
        the epoch position and the task's extra state. Reads the device: a host sync.
        Under FSDP2 it is collective and returns full CPU tensors (every rank gathers);
        :meth:`load_state_dict` shards them again.
        """
        resolved = self.policy.resolved
        state = {
            keys.SCHEMA: keys.SCHEMA_VERSION,
            keys.MODEL: self.model.state_dict(),
            keys.OPTIMIZER: [o.state_dict() for o in self.optimizers],
            keys.SCHEDULER: [s.state_dict() for s in self.schedulers],
            keys.SCALER: self.scaler.state_dict(),
            keys.PRECISION: {
                "requested": resolved.requested,
                "used": resolved.used,
                "reason": resolved.reason,
            },
            keys.STEP: self.step_count,
            keys.RNG: capture_rng_state(),
            keys.CONFIG: {"trainer": asdict(self.config)},
            keys.STATS: self.stats.state(),
        }
        if distributed.is_sharded(self.model):
            # Collective: every rank gathers the FSDP2 shards into full CPU tensors, so
            # the state is the same plain-tensor format as a single process writes.
            state = distributed.unshard(state)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (model, optimizers, schedulers, scaler, step, RNG)."""
        _check_counts("optimizer", len(state[keys.OPTIMIZER]), len(self.optimizers))
        _check_counts("scheduler", len(state[keys.SCHEDULER]), len(self.schedulers))
        if distributed.is_sharded(self.model):  # collective: every rank shards the state
            distributed.load_sharded_state(
                self.model, self.optimizers, state[keys.MODEL], state[keys.OPTIMIZER]
            )
        else:
            self.model.load_state_dict(state[keys.MODEL])
            for optimizer, saved in zip(self.optimizers, state[keys.OPTIMIZER], strict=True):
                optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, state[keys.SCHEDULER], strict=True):
            scheduler.load_state_dict(saved)
        self.scaler.load_state_dict(state[keys.SCALER])
        self.step_count = int(state[keys.STEP])
        self.stats = StepStats(self.policy.device, self.config.overflow_window, self.scaler)
        self.stats.load_state(state.get(keys.STATS, {}), self.step_count)
        if self.graphs is not None:  # the graphs read tensors this load replaced: capture anew
            self.graphs.reset()
        restore_rng_state(state[keys.RNG])


def _python_fields(obj: object) -> dict[str, Any]:
    """``obj``'s attributes, containers copied one level (the tensors are shared: a capture
    never writes them)."""
    return {k: copy.copy(v) if isinstance(v, dict | list) else v for k, v in vars(obj).items()}


def _check_counts(what: str, saved: int, here: int) -> None:
    if saved != here:
        raise ValueError(
            f"the checkpoint holds {saved} {what} state(s) but this run built {here}: "
            f"the task must build the same {what}s to resume"
        )
