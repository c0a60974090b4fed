"""What an idle agent's next run will train in, for the gauges before any run reports.

``genesis_fp16_precision`` and ``genesis_fp16_loss_scale`` follow a run's reports while it
trains. Between runs, and from start-up on (with ``RUN_AT_START=false`` the first run may
be an hour away), they say what the agent's next run starts with:

- **precision**: what ``decide`` answers the next run's planned request (the settings
  and the precision guard's memory, ``genesis_fp16.jobs.run_request.precision_request``;
  ``run_request.expected_precision``): a measured ``auto`` answers from the measurement
  it kept; with none it is undecided (``None``: every precision series 0) until the run
  measures and reports.
- **loss scale**: 1 outside fp16 (the scaler is disabled there, and every run reports 1).
  In fp16, the scale the run resumes with (the library's ``resume_loss_scale``): the
  newest checkpoint's scaler state (an fp32
  or bf16 checkpoint holds one too), or the core's initial scale
  (``ScalerConfig.init_scale``, 65,536) without a checkpoint. NaN while the precision is
  undecided: a comparison with NaN is false, so no alert fires on it.

Checkpoints are the core's (``CheckpointManager``, ``checkpoint_keys``); a plugin that
writes its own format has none here, as for ``resumed_totals`` in genesis_fp16/jobs/recording.py.

>>> from pathlib import Path
>>> next_loss_scale(AgentFolder(Path("state"), "se_darwin"), "fp32")
1.0
"""

from __future__ import annotations

import math

import structlog

from genesis_fp16_infrastructure.api import AgentFolder, PrecisionName, resume_loss_scale

log = structlog.get_logger("genesis_fp16.next_run")


def next_loss_scale(folder: AgentFolder, precision: PrecisionName | None) -> float:
    """The loss scale the next run of the agent under ``folder`` starts with, when it
    computes in ``precision`` as ``decide`` planned it; NaN (unknown) when that is None,
    decided by the run's own measurement, not made yet.

    Reads the newest checkpoint's summary file only for fp16's scale; a checkpoint
    without one is loaded (written before summary files). An unreadable one counts as
    none.
    """
    if precision is None:
        return math.nan
    # The resume point a run's plan reads (the folder the served-model pointer names).
    scale, unread, pointer_error = resume_loss_scale(folder.checkpoint_dir, precision)
    if unread is not None:  # a folder we may not read: no checkpoint
        log.warning(
            "cannot read the agent's checkpoints", path=str(folder.checkpoint_dir), error=unread
        )
    if pointer_error is not None:
        log.warning("cannot follow the served-model pointer", error=pointer_error)
    return scale
