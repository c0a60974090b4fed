"""What an idle agent's next run will train in, for the gauges before any run reports.

``genesis_fp16_precision`` and ``genesis_fp16_loss_scale`` follow a run's reports while it
trains. Between runs, and from start-up on (with ``RUN_AT_START=false`` the first run may
be an hour away), they say what the agent's next run starts with:

- **precision**: what ``decide`` answers the next run's planned request (the settings
  and the precision guard's memory, ``genesis_fp16.runs.run_request.precision_request``;
  ``run_request.expected_precision``): a measured ``auto`` answers from the measurement
  it kept; with none it is undecided (``None``: every precision series 0) until the run
  measures and reports.
- **loss scale**: 1 outside fp16 (the scaler is disabled there, and every run reports 1).
  In fp16, the scale the run resumes with: the newest checkpoint's scaler state (an fp32
  or bf16 checkpoint holds one too), or the core's initial scale
  (``ScalerConfig.init_scale``, 65,536) without a checkpoint. NaN while the precision is
  undecided: a comparison with NaN is false, so no alert fires on it.

Checkpoints are the core's (``CheckpointManager``, ``checkpoint_keys``); a plugin that
writes its own format has none here, as for ``resumed_totals`` in genesis_fp16/runs/recording.py.

>>> expected_next_run(AgentPaths(Path("state/agents/se_darwin")), "fp32")
NextRun(precision='fp32', loss_scale=1.0, source='request')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import structlog

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16_infrastructure.served import ServedPointerError, served_checkpoint
from genesis_fp16_infrastructure.training import CheckpointError, CheckpointManager
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision_names import LOSS_SCALED

log = structlog.get_logger("genesis_fp16.next_run")

INITIAL_SCALE = ScalerConfig().init_scale


@dataclass(frozen=True)
class NextRun:
    """The precision (None: undecided) and loss scale (NaN: unknown) a next run starts
    with, and where they come from: ``request`` (decided for it) or ``undecided``."""

    precision: str | None
    loss_scale: float
    source: str


def expected_next_run(paths: AgentPaths, precision: str | None) -> NextRun:
    """The :class:`NextRun` of the agent under ``paths`` whose next run computes in
    ``precision``, as ``decide`` planned it (None: decided by the run's measurement).

    Reads the newest checkpoint's summary file only for fp16's scale; a checkpoint
    without one is loaded (written before summary files). An unreadable one counts as
    none.
    """
    if precision is None:
        return NextRun(None, math.nan, "undecided")
    if precision not in LOSS_SCALED:
        return NextRun(precision, 1.0, "request")
    scale = _newest_scale(paths)
    return NextRun(precision, INITIAL_SCALE if scale is None else scale, "request")


def served_model_folder(paths: AgentPaths) -> Path:
    """Where the served model's checkpoints are: the folder of the checkpoint the agent's
    served-model pointer names (genesis_fp16_infrastructure.served: se_darwin's candidates), else
    the agent's checkpoint folder itself (an agent without a pointer)."""
    try:
        served = served_checkpoint(paths.checkpoint_dir)
    except ServedPointerError as exc:
        log.warning("cannot follow the served-model pointer", error=str(exc))
        return paths.checkpoint_dir
    return served.parent if served is not None else paths.checkpoint_dir


def _newest_scale(paths: AgentPaths) -> float | None:
    """The served model's newest valid core checkpoint's scaler scale, or None; from its
    summary file (``CheckpointManager.latest_summary``) when it has one."""
    folder = served_model_folder(paths)
    try:
        summary = CheckpointManager(folder).latest_summary()
    except (OSError, CheckpointError) as exc:  # a folder we may not read: no checkpoint
        log.warning("cannot read the agent's checkpoints", path=str(folder), error=str(exc))
        return None
    return None if summary is None else summary.get("loss_scale")
