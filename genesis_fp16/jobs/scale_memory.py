"""The daemon's side of the carried loss scale: write it after each run.

An fp16 run that starts without a checkpoint of its own would start at the initial scale
and skip its first steps finding the scale again; the agent's last run already found it.
``plan_request`` puts the carried scale, read with the agent's other state files
(``AgentState.initial_scale``), in ``TrainRequest.initial_loss_scale`` (used only when
the request asks for the precision the carried run asked for), ``_finish``
records it after each run (forgetting it after a demotion or a run that did not end in
fp16). The file is ``<state>/agents/<agent>/loss_scale.json``
(:mod:`genesis_fp16_infrastructure.training.precision.carried_scale`); ``genesis-fp16
precision show`` prints it and ``precision reset`` forgets it.
"""

from __future__ import annotations

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import AgentFolder

log = structlog.get_logger("genesis_fp16.scale_memory")


def record_scale(settings: Settings, agent: str, result: TrainResult) -> None:
    """Carry the run's last scale, or forget it (a demotion, a precision other than fp16).

    A run that took no step (up to date) leaves the file as it is."""
    if result.steps == 0:
        return
    folder = AgentFolder(settings.state_dir, agent)
    carried = result.carried_scale()
    try:
        folder.save_carried_scale(carried)
    except OSError as exc:
        path = str(folder.loss_scale_path)
        log.error("cannot write the carried loss scale", path=path, error=str(exc))
