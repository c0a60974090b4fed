"""The agent's model history, bounded after each run: what a killed transition left is
recovered, then the served models past ``GENESIS_FP16_SERVED_HISTORY_KEEP`` and the
rejected candidates past ``GENESIS_FP16_REJECTED_KEEP_DAYS`` are pruned, in one read of the
served-model pointer (:func:`bound_history`: the daemon's, and an operator's ``train`` in a
state folder). The daemon then exports what the run reported and that read found
(:func:`bound_agent_history`: the rollbacks and promotions the run's transactions
committed, those of the journal no run reported, the pruned count and the folder's
bytes), a subscriber of the run's end (genesis_fp16/jobs/run_ended.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog

from genesis_fp16.config.settings import Settings
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.metrics.served_metrics import Change
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    CheckpointsFolder,
    ServedPointer,
    ServedPointerError,
)

log = structlog.get_logger("genesis_fp16.jobs")


def bound_history(
    settings: Settings, models: CheckpointsFolder
) -> tuple[list[Path], ServedPointer | None]:
    """Prune ``models`` to the bounded history (the last GENESIS_FP16_SERVED_HISTORY_KEEP
    served ones, rejected candidates for GENESIS_FP16_REJECTED_KEEP_DAYS), after the
    recovery of what the run, killed or not, left to finish: after each run of the
    daemon's, and of an operator's ``train`` in a state folder. The candidates removed,
    and the pointer as it stands after. A pointer that cannot be read prunes nothing:
    logged, never a guess."""
    try:
        removed, pointer = models.prune(
            settings.served_history_keep,
            settings.rejected_keep_days,
            recover_first=True,  # what the run, killed or not, left: on the prune's one read
        )
    except (ServedPointerError, OSError) as exc:
        log.error("model history not pruned", error=str(exc))
        return [], None  # none pruned, no pointer read
    for path in removed:
        log.info("model history: removed candidate", candidate=path.name)
    return removed, pointer


def bound_agent_history(
    settings: Settings,
    metrics: DaemonMetrics,
    folder: AgentFolder,
    reported: Sequence[Change] = (),
) -> None:
    """Bound the model history of the agent of ``folder`` (:func:`bound_history`) and
    export the bytes its folder holds, with the changes of its served model: those the
    run ``reported`` (``TrainResult.transitions``, what its transactions committed), and
    those of the pointer's journal no run reported: after each run with a result or a
    failure (genesis_fp16/jobs/run_ended.py)."""
    agent, models = folder.agent, folder.checkpoints
    removed, pointer = bound_history(settings, models)  # pointer None: none served, or unread
    # Each promotion and rollback counted once: the run's as it reported them; a run
    # killed after its rollback reached the pointer reports nothing, and its rollback
    # (like an operator's command) is read from the journal.
    journal = [] if pointer is None else pointer.journal
    if journal or reported:  # a served model (the series exist from 0)
        new = metrics.live.cursor.new(agent, journal, reported)
        metrics.live.count_rollbacks(agent, new)
        metrics.promotion.count_promotions(agent, new)
    if pointer is not None:  # watched, or not: the gauge then follows the clock
        metrics.live.observe_pointer(agent, pointer, settings.live_watch_idle_seconds)
    metrics.promotion.pruned.labels(agent=agent).set(len(removed))
    metrics.promotion.state_bytes.labels(agent=agent).set(models.disk_bytes())
