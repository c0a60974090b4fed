"""Demote a guarded run: roll back to the guard's last good state in the next precision.

``fit()`` calls :func:`demote_run` when its guard fires, for every task (one with
iteration hooks too), so a guard trip is handled one way and reported one way: the same
policy for the next precision (the run's device and loss-scaler config), the
same rollback and the same record in ``demotions``::

    while guard.final_check(trainer, epoch, batch) is not None:
        failure = failure_at_last_rung(guard, trainer.policy.name)
        if failure is not None:  # nowhere to demote to: the run ends failed
            break
        trainer, record = demote_run(guard, trainer, scaler, build_trainer, restore_run)
        demotions.append(record)

What differs between runs is what the caller builds and restores around the trainer:
``rebuild(policy)`` makes a fresh trainer in the demoted policy (the task's model and
optimizers), and ``restore(trainer, snapshot)`` puts the run's own state back once the
trainer's is loaded (the data position, the task's extra state, stale checkpoints, the
captured step's verification).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from genesis_fp16_infrastructure.training.precision.loss_scaler import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.reports import Demotion
from genesis_fp16_infrastructure.training.run.guard import PrecisionGuard, Snapshot
from genesis_fp16_infrastructure.training.step.trainer import Trainer

__all__ = ["demote_run", "failure_at_last_rung"]

logger = logging.getLogger(__name__)


def failure_at_last_rung(
    guard: PrecisionGuard, precision: PrecisionName
) -> Mapping[str, str] | None:
    """After a trigger fired: the run's failure (``FitResult.failure``: ``reason`` and
    ``detail``) when ``precision`` is the ladder's last rung, logged as an error; None
    where a demotion answers the trigger. At the last rung a trigger fires only for a run
    whose steps are persistently skipped: it cannot learn, and ends there."""
    trouble = guard.pending
    if not guard.last_rung or trouble is None:
        return None
    logger.error("precision guard: %s cannot train this run: %s", precision, trouble.detail)
    return {"reason": trouble.reason, "detail": trouble.detail}


def demote_run(
    guard: PrecisionGuard,
    trainer: Trainer,
    scaler: ScalerConfig,
    rebuild: Callable[[PrecisionPolicy], Trainer],
    restore: Callable[[Trainer, Snapshot], None],
) -> tuple[Trainer, Demotion]:
    """The trainer of the next precision, at the guard's snapshot, and the demotion record.

    Needs a fired trigger (``guard.pending``) below the ladder's last rung. ``scaler`` is
    the run's loss-scaler config, not the troubled trainer's (a rebuilt trainer's own may
    be a default). The guard then watches the new trainer from the rolled-back state,
    keeping its snapshot: the state rolled back to is the last good one.
    """
    device = trainer.policy.device
    policy, record = guard.demote(
        trainer.policy, lambda decision: PrecisionPolicy.from_decision(decision, device, scaler)
    )
    snapshot = guard.restore()
    demoted = rebuild(policy)
    demoted.load_state_dict(snapshot.trainer)  # model, optimizers, schedulers, scaler, RNG
    restore(demoted, snapshot)
    guard.start(demoted, snapshot.epoch, snapshot.batch, snapshot=False)
    return demoted, record
