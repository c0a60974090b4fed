"""What :func:`~genesis_fp16_infrastructure.training.run.fit.fit` is given and gives back:
the agent's :class:`TrainingTask`, the run's :class:`FitOptions` and its :class:`FitResult`;
and :func:`to_device`, which moves the batches a task yields to the run's device.

Their own module, below all that takes them (``fit``, its loop, calibration, the flight
recorder), which import them from here rather than from each other.

A task yields batches wherever it keeps its data (usually the CPU); ``fit()`` resolves
the device (``auto`` is cuda on a GPU host) and moves each batch there before the step::

    batch = to_device((x, y), torch.device("cuda"))   # (x on cuda, y on cuda)

A batch is a tensor, or a (named) tuple, list or dict of them, nested to any depth;
other leaves (ints, strings, None) pass through, and an object with its own ``.to`` is
asked to move itself. A tensor already on the device is returned as it is (no copy), so
a task that keeps its data on the device pays nothing. A CPU tensor in pinned memory
is copied with ``non_blocking=True``: the copy overlaps the previous step's kernels
instead of waiting for them (pageable memory cannot be copied asynchronously).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch.optim import Optimizer

from genesis_fp16_infrastructure.config_bounds import Bounded
from genesis_fp16_infrastructure.training.checkpoint_load import Loaded
from genesis_fp16_infrastructure.training.flight.bundle_files import FlightConfig
from genesis_fp16_infrastructure.training.flight.range_stats import RangeReport, RangeStatsConfig
from genesis_fp16_infrastructure.training.precision.decide import ResolvedPrecision, same_device
from genesis_fp16_infrastructure.training.precision.loss_scaler import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.reports import (
    Calibration,
    Demotion,
    EarlyStopReport,
    FaultBundle,
    RangeSummary,
    TrainingSummary,
)
from genesis_fp16_infrastructure.training.run.early_stop import EarlyStopping
from genesis_fp16_infrastructure.training.run.spec import RunCallbacks, RunSpec
from genesis_fp16_infrastructure.training.step.cuda_graph import signature
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution
from genesis_fp16_infrastructure.training.step.trainer import StepTuning, Trainer, TrainerConfig


class StepTask(Protocol):
    """What a training step is built from, and its batches: all that the ``auto``
    calibration reads of a task. Every :class:`TrainingTask` is one (the bench's workload
    is one without held-out metrics or state to checkpoint)."""

    def build_model(self) -> nn.Module:
        """A fresh fp32 model (``fit`` moves it to the device)."""
        ...

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        """The optimizers over ``model``'s parameters (``fused=True`` avoids host syncs)."""
        ...

    def train_batches(self, epoch: int, seed: int) -> Iterable[tuple[Any, int]]:
        """One epoch of ``(batch, num_samples)``, in an order fixed by ``(epoch, seed)``."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The forward on one batch, already on the run's device, under the policy's autocast."""
        ...


@runtime_checkable
class TrainingTask(StepTask, Protocol):
    """What ``fit()`` needs from an agent.

    ``train_batches(epoch, seed)`` yields ``(batch, num_samples)`` pairs and must yield
    the same sequence for the same arguments: that is what makes resume exact. A task
    may also define ``build_schedulers(optimizers)``, the LR schedulers for those
    optimizers (none without it), and ``load_extra_state(state)``; on resume it receives
    what ``extra_state()`` returned when the checkpoint was written (plain Python values
    and tensors only, so that the checkpoint stays ``weights_only``-loadable).

    Devices: ``fit()`` resolves the run's device (``auto`` is cuda on a GPU host), moves
    the model there, and moves every tensor of each training batch there before
    ``loss`` sees it (:func:`to_device`: a
    no-op for a tensor already there, non-blocking from pinned memory). A task may yield its
    batches on the CPU and needs no device of its own. ``evaluate(model)`` gets the
    model on the run's device; it reads its own held-out data, so it moves that data
    to the model's device (``to_device(data, next(model.parameters()).device)``).

    Random numbers in ``loss``: on CUDA the step may be captured into a CUDA graph and
    replayed (:mod:`~genesis_fp16_infrastructure.training.step.cuda_graph`), which repeats
    whatever the host computed at capture. Draw on the device: the default CUDA
    generator (dropout, ``torch.rand(..., device=...)``) moves on at every replay by
    itself. A ``torch.Generator`` of the task's own, on CUDA, must be returned by an
    optional ``cuda_generators()`` method (a sequence of them), which ``fit()`` registers
    with every graph; one used but not listed fails the capture with an error saying so
    (a torch that registers generators lazily, pytorch#176753, does it by itself), and so
    does drawing from torch's default CPU generator inside ``loss``. A task's own
    CPU generator, ``random`` and numpy cannot be detected: never draw from them in
    ``loss`` (drawing in ``train_batches`` is fine: batches are inputs, copied in).
    """

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics, including ``"loss"``; run under ``torch.no_grad()``.

        ``model`` is on the run's device: move the held-out data to it first.
        """
        ...

    def extra_state(self) -> dict[str, Any]:
        """Task state saved into every checkpoint under ``extra`` (e.g. a feature encoder)."""
        ...


@runtime_checkable
class IterationHooks(TrainingTask, Protocol):
    """A task whose epochs are iterations: optional hooks around each group of steps.

    A task that defines both methods is run by
    :func:`~genesis_fp16_infrastructure.training.run.loop.run_iterations`: each
    epoch of ``train_batches`` is one iteration, which no stop, checkpoint or rollback
    divides (PPO: roll out with the current weights, then K steps over the rollouts).
    Every other task runs as before; ``isinstance(task, IterationHooks)`` tells which.
    """

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        """Before ``train_batches(epoch, seed)`` is read: the trainer that will step it
        (after a demotion, a new one in the next precision)."""
        ...

    def end_iteration(self, trainer: Trainer, epoch: int) -> None:
        """After the iteration's last step (or the run's last, when its target falls
        inside), before the guard's check and any checkpoint."""
        ...


def to_device(batch: Any, device: torch.device | str) -> Any:
    """``batch`` with every tensor in it on ``device``; see the module docstring.

    >>> to_device({"x": torch.ones(2)}, "cpu")["x"].device.type
    'cpu'
    """
    dev = torch.device(device)
    if isinstance(batch, torch.Tensor):
        if same_device(batch.device, dev):
            # .to() of a tensor already there returns it, no copy; called anyway so that the
            # device audit (genesis_fp16.testing.device_audit) sees the move on a CPU run.
            return batch.to(dev)
        # is_pinned() is only meaningful (and cheap) for a CPU tensor bound for an accelerator.
        pinned = batch.device.type == "cpu" and dev.type != "cpu" and batch.is_pinned()
        return batch.to(dev, non_blocking=pinned)
    if isinstance(batch, list | tuple):
        moved = [to_device(item, dev) for item in batch]
        # A NamedTuple keeps its type: its fields are arguments.
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, Mapping):
        return {key: to_device(value, dev) for key, value in batch.items()}
    move = getattr(batch, "to", None)
    return move(dev) if callable(move) else batch


def index_to(index: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host-made index (an epoch's permutation) on ``device`` in one copy that does not
    wait for the device: pinned, then copied with ``non_blocking=True``. A task slices
    the result per batch, on the device, and no batch reads the host.

    Slicing the CPU index per batch instead and moving each slice costs a host sync a
    step: a pageable copy to the GPU waits for the step before it.

    >>> index_to(torch.arange(3), "cpu").tolist()
    [0, 1, 2]
    """
    dev = torch.device(device)
    if dev.type == "cuda" and index.device.type == "cpu":
        index = index.pin_memory()  # on the host only: no sync
    return to_device(index, dev)


def first_batches(task: StepTask, seed: int, read: int, what: str) -> list[Any]:
    """Of the first ``read`` batches of the first epoch, those of the first batch's signature
    (:func:`~.cuda_graph.signature`): the same (epoch, seed) the run starts with (the protocol
    yields the same batches each time, so reading them changes nothing for the run). An
    epoch's partial last batch is another signature: another graph, with its own warm-ups."""
    batches = [batch for batch, _ in islice(iter(task.train_batches(0, seed)), read)]
    if not batches:
        raise ValueError(f"{what}: the task yielded no training batch")
    first = signature([batches[0]])
    return [batch for batch in batches if signature([batch]) == first]


def batch_shapes(value: Any, *, bucketed: bool = False) -> str:
    """A batch's dtypes and shapes as text (tensors inside mappings, lists and tuples):
    the part of a cache key that says which step a measurement or a verdict is for.
    ``bucketed`` rounds each tensor's first (batch) dimension up to a power of two, so a
    pool grown by a few records keeps its key.

    >>> batch_shapes((torch.zeros(244, 8), torch.zeros(244, dtype=torch.long)), bucketed=True)
    '(float32[256, 8],int64[256])'
    """
    if isinstance(value, torch.Tensor):
        shape = list(value.shape)
        if bucketed and shape:
            shape[0] = 1 << max(shape[0] - 1, 0).bit_length()
        return f"{str(value.dtype).removeprefix('torch.')}{shape}"
    if isinstance(value, Mapping):
        items = sorted(value.items())
        return "{" + ",".join(f"{k}:{batch_shapes(v, bucketed=bucketed)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "(" + ",".join(batch_shapes(v, bucketed=bucketed) for v in value) + ")"
    return type(value).__name__


def task_trainer(
    task: StepTask,
    model: nn.Module,
    policy: PrecisionPolicy,
    config: TrainerConfig,
    on_log: Callable[[TrainingSummary], None] | None = None,
) -> Trainer:
    """A trainer of ``model`` (on ``policy``'s device) with the task's optimizers over it,
    its LR schedulers (the optional ``build_schedulers``: none without) and its own CUDA
    generators (the optional ``cuda_generators()``: none without)."""
    optimizers = task.build_optimizers(model)
    build = getattr(task, "build_schedulers", None)
    schedulers = build(optimizers) if callable(build) else ()
    listed = getattr(task, "cuda_generators", None)
    generators = tuple(listed()) if callable(listed) else ()
    return Trainer(model, optimizers, policy, config, schedulers, on_log, generators)


StepHook = Callable[[Trainer], None]


@dataclass(frozen=True, kw_only=True)
class FitOptions(RunSpec, RunCallbacks, Bounded):
    """How ``fit()`` runs. Give ``steps``, ``epochs`` or both (whichever ends first).

    The run's fields and the callbacks ``on_log`` and ``should_stop`` are
    :class:`~genesis_fp16_infrastructure.training.run.spec.RunSpec`'s and ``RunCallbacks``',
    shared with the plugin API's ``TrainRequest``, which say what each means. In ``fit()``:

    - ``epochs``: a run resumed mid-epoch finishes that epoch as its first. Resuming a
      checkpoint of an *interrupted* run (killed, or stopped by ``should_stop``) asked for
      the same ``steps``/``epochs`` continues toward that run's own target, so the
      interruption costs only time.
    - ``checkpoint_seconds`` bounds single-process runs only (a save is collective under
      torchrun); a checkpoint is also written at the end, so a killed run loses at most
      one interval. Resuming tries the newest valid file first and falls back past one
      that does not fit the model.
    - ``guard``: when a trigger fires, the run rolls back to its last good state and
      continues in the next precision of the ladder to the same target step
      (``FitResult.demotions``).
    - ``cuda_graph``, ``compile``: what ran and why is ``FitResult.execution`` (see
      :mod:`genesis_fp16_infrastructure.training.step.execution`); ``compile="on"``
      compiles the model inside the captured step (execution ``cuda_graph_compiled``; an
      error where the step cannot be captured).
    - ``precision``: ``auto`` resolves by the device rule (``mode="rule"``, the default
      here) or by timing the task's own steps in each native precision (``measure``, the
      daemon's default; cached in ``precision.cache``: see
      :mod:`genesis_fp16_infrastructure.training.run.calibration`);
      ``FitResult.calibration`` holds it.

    The library's own:

    - ``checkpoint_dir``: None writes no checkpoints; ``keep`` files are kept.
    - ``trainer``: the trainer's own settings (:class:`StepTuning`: gradient clipping,
      accumulation, the overflow window); the step fields above are the run's, once.
    - ``loaded_checkpoint``: a checkpoint the caller has read already
      (``checkpoint_load.read_checkpoint``); resuming uses its state for that file
      instead of reading the file again, while the file is unchanged.
    - ``step_hooks``: called with the trainer after every step (before checkpointing).
    - ``early_stop``: validate with the task's ``validate(model)`` every
      ``early_stop.every_steps`` steps, keep the best weights, stop after ``patience``
      validations without improvement (see
      :mod:`genesis_fp16_infrastructure.training.run.early_stop`);
      ``FitResult.early_stop`` reports the best step and why the run stopped.
    - ``flight``: with the guard on, save the run's first non-finite step and the step
      of each demotion as fault bundles (:mod:`~genesis_fp16_infrastructure.training.flight`);
      ``FitResult.fault_bundles`` lists them.
    - ``range_stats``: per-module range statistics of sampled steps (one in
      ``range_stats.every``, or as often as a 1% cost allows: the default config), each
      sent to ``on_range_stats`` when set; ``FitResult.ranges`` sums them up
      (:mod:`~genesis_fp16_infrastructure.training.flight.range_stats`). None: off (the
      library's default; a ``TrainRequest``'s options turn them on).
    """

    SETTING = "fit"
    checkpoint_dir: Path | None = None
    keep: int = 3
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    trainer: StepTuning = field(default_factory=StepTuning)
    step_hooks: Sequence[StepHook] = ()
    early_stop: EarlyStopping | None = None
    loaded_checkpoint: Loaded | None = None
    flight: FlightConfig | None = None
    range_stats: RangeStatsConfig | None = None
    on_range_stats: Callable[[RangeReport], None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.trainer, TrainerConfig):  # its step fields would be a second copy
            raise ValueError(
                "FitOptions(trainer=TrainerConfig(...)): give the trainer's own settings as "
                "StepTuning(...) and log_interval, cuda_graph, compile on FitOptions itself"
            )
        if self.steps is None and self.epochs is None:
            raise ValueError("FitOptions needs steps=N or epochs=N (or both); got neither")
        Bounded.__post_init__(self)  # the run fields' ranges (RunSpec declares them)


@dataclass(frozen=True)
class FitResult:
    """The outcome of ``fit()``.

    ``summary`` covers the whole run's counters (``step`` continues across resumes);
    ``steps_run`` counts this invocation's steps. ``checkpoint`` is the file written at
    the end (None without ``checkpoint_dir``), ``resumed_from`` the one started from.
    ``demotions`` lists the precision guard's demotions, oldest first
    (:class:`~genesis_fp16_infrastructure.training.reports.Demotion`);
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
    demotions: tuple[Demotion, ...] = ()
    # Set when the guard found, at the last rung of its ladder, that the run cannot learn
    # (``reason`` and ``detail``); the run then ended there, without an end checkpoint.
    failure: Mapping[str, Any] | None = None
    # This invocation's own skipped steps and non-finite losses (``summary`` holds the
    # resumed chain's totals).
    skipped_run: int = 0
    nonfinite_run: int = 0
    # Temp files of killed saves removed from the checkpoint folder at this run's start.
    temps_removed: int = 0
    calibration: Calibration | None = None
    early_stop: EarlyStopReport | None = None
    # The fault bundles the flight recorder wrote ({"path", "reason", "step", ...}).
    fault_bundles: tuple[FaultBundle, ...] = ()
    # The range statistics of the run's sampled steps (None: off, or no step sampled).
    ranges: RangeSummary | None = None
    # The call's wall seconds: calibration, resume, steps, checkpoints and the final
    # evaluation (``summary.wall_seconds`` is the steps' clock, from the first step).
    seconds: float = 0.0
