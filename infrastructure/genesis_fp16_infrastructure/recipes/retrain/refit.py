"""``final_fit=whole``: the served model trained again on every labelled record the
judged run does not hold out.

The split run finds how many steps the pool needs (its best validated step); the refit
trains a fresh model on every record for that many steps and is what the candidate
offers (``docs/se-darwin.md``, "final_fit").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import CheckpointManager, FitResult, fit
from genesis_fp16_infrastructure.training import checkpoint_keys as keys

logger = logging.getLogger(__name__)

SUPERSEDED_FOLDER = "superseded"  # final_fit=whole: earlier checkpoints of the folder, kept
SPLIT_FOLDER = "split"  # final_fit=whole: the split run's checkpoints, under the candidate


def train_refit(
    request: TrainRequest, task: WorldModelTask, data: ReadResult, split: FitResult
) -> FitResult:
    """``final_fit=whole``: train a fresh model on every labelled record for the step count
    the split run served (its best validated step), with no early stopping.

    It writes one checkpoint, at its end, into the request's folder. A resumed request
    continues an earlier refit found there (same encoder, at most that many steps) to the
    same step count, so a finished one takes no step; any other checkpoint there (another
    step count, other data) is first moved into ``superseded/<UTC time>/`` under the
    folder, since it would otherwise be the newest: kept, but no longer served.
    """
    best = split.early_stop.best_step if split.early_stop is not None else None
    steps = int(best or split.summary.step)
    whole = task.on_whole_pool(data, request.device)
    folder = Path(request.checkpoint_dir)
    done = _refit_done(folder, whole, steps) if request.resume else None
    if done is None:
        _set_aside_checkpoints(folder)
    logger.info("final_fit=whole: %d record(s), %d step(s)", len(whole.train_data), steps)
    options = request.fit_options(
        # What the split run ended in, after any demotion; the request's measurement cache
        # (where captured steps' verdicts are kept) and floor stay.
        precision=dataclasses.replace(request.precision, requested=split.precision.used),
        steps=steps - (done or 0),
        epochs=None,
        resume=done is not None,
        checkpoint_steps=steps or 1,  # the end only: a refit is at most the split's length
        checkpoint_seconds=None,
        on_log=None,  # its step counter starts again at 0: not the run's progress
    )
    return fit(whole, options)


def _refit_done(folder: Path, whole: WorldModelTask, steps: int) -> int | None:
    """The steps of an earlier refit in ``folder`` that this one can continue, or None."""
    found = CheckpointManager(folder).load_latest()
    if found is None:
        return None
    state = found[0]
    same_data = state.get(keys.EXTRA, {}).get("encoder") == whole.encoder.state_dict()
    step = int(state[keys.STEP])
    return step if same_data and step <= steps else None


def _set_aside_checkpoints(folder: Path) -> None:
    manager = CheckpointManager(folder)
    into = folder / SUPERSEDED_FOLDER / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in manager.checkpoints():
        moved = manager.set_aside(path, into)
        logger.warning("moved %s to %s (kept, no longer served)", path, moved)


def refit_record(refit: FitResult, records: int, split_checkpoint: Path | None) -> dict[str, Any]:
    """``extra.final_fit`` of ``train --json``: what is served, and what ``eval`` measures."""
    return {
        "mode": "whole",
        "records": records,
        "steps": refit.summary.step,
        "precision": refit.precision.used,
        "checkpoint": str(refit.checkpoint) if refit.checkpoint else None,
        "split_checkpoint": str(split_checkpoint) if split_checkpoint else None,
        "stopped_early": refit.stopped_early,
        "eval": "the split model's, on its held-out part; the served model trained on it too",
    }
