"""What ``fit()`` takes and returns: :class:`FitOptions` and :class:`FitResult`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.training.checkpoint_load import Loaded
from genesis_fp16_infrastructure.training.flight.range_stats import RangeReport, RangeStatsConfig
from genesis_fp16_infrastructure.training.flight.recorder import FlightConfig
from genesis_fp16_infrastructure.training.precision.decide import ResolvedPrecision
from genesis_fp16_infrastructure.training.precision.loss_scaler import ScalerConfig
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
from genesis_fp16_infrastructure.training.step.execution import ResolvedExecution
from genesis_fp16_infrastructure.training.step.trainer import StepTuning, Trainer, TrainerConfig

StepHook = Callable[[Trainer], None]


@dataclass(frozen=True, kw_only=True)
class FitOptions(RunSpec, RunCallbacks):
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
        for name in ("steps", "epochs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}={value!r}: must be >= 0")
        if self.checkpoint_steps is not None and self.checkpoint_steps < 1:
            raise ValueError(f"checkpoint_steps={self.checkpoint_steps!r}: must be >= 1")
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
