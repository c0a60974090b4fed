"""The gate's further sets: the newest records, and the best model served before.

Beside the held-out set (every current record neither model trained on), the gate judges
a candidate on two more, so that a run of promotions cannot ratchet the served model
down and a regression the live watch rolled back does not come straight back:

* **newest** ("train on the past, judge on the future"): the held-out records that
  arrived after the *anchor*: the newest candidate rolled back for a live regression,
  when one is kept (the records after it are the ones that showed it worse), else the
  served model (records no served model ever saw). A set under ``gate.MIN_RECORDS``
  cannot decide and says so.
* **best_earlier**: the models served before (the pointer's history, at most
  ``EARLIER_MODELS``, those whose checkpoints are kept) are scored with the served one
  on the records none of them trained on; when one of them has a lower log-loss there
  than the served model, the candidate must also be shown no worse than *it*. A loss
  the gate let through (within its margin) cannot then add up over promotions.

New data that the served model never saw counts as evidence like any other record: the
held-out part of it is in every set above, where a candidate that learned it scores
better. It does not excuse a loss elsewhere: each set must pass.

Each read here is of a file the job reads nowhere else (an earlier model's checkpoint,
the anchor's), once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genesis_fp16_infrastructure.agent_folder.lifecycle import (
    VERDICT_NAME,
    list_candidates,
    newest_checkpoint,
    read_json,
)
from genesis_fp16_infrastructure.contract.reports import GateComparison
from genesis_fp16_infrastructure.data.fingerprint import held_in
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.recipes.retrain import gate
from genesis_fp16_infrastructure.training.checkpoint import CheckpointError, load_checkpoint

logger = logging.getLogger(__name__)

EARLIER_MODELS = 2  # models served before the current one that the gate scores
LIVE_REGRESSION = "live_regression"  # the verdict reason of a live watch's rollback


def newest(
    root: Path,
    hashes: gate.RecordHashes,
    chosen: np.ndarray,
    served_model: gate.ScoredModel,
) -> tuple[np.ndarray, str]:
    """Which of the comparison set's records (``chosen``) arrived after the anchor (the
    module docstring), and what the anchor is, in words."""
    anchor = _rolled_back_anchor(root)
    name = "the served model"
    pool_ids = served_model.pool_ids
    if anchor is not None:
        name, pool_ids = anchor
    if pool_ids is None:
        return np.zeros_like(chosen), f"{name}'s data is unknown"
    return chosen & ~held_in(hashes.ids, pool_ids), f"records newer than {name}"


def earlier_models(
    root: Path, history: Sequence[Mapping[str, Any]]
) -> list[tuple[str, gate.ScoredModel]]:
    """The first ``EARLIER_MODELS`` models of the pointer's history whose checkpoints
    are kept and can be scored, with their ids; one that cannot is left out, logged."""
    found = []
    for entry in history[:EARLIER_MODELS]:
        path = Path(root) / str(entry.get("judged") or entry.get("checkpoint"))
        if not path.is_file():
            continue
        try:
            found.append((str(entry.get("id")), gate.ScoredModel(load_checkpoint(path))))
        except (CheckpointError, ValueError) as exc:
            logger.warning("earlier model %s not scored by the gate: %s", entry.get("id"), exc)
    return found


def best_earlier(
    columns: PoolColumns,
    hashes: gate.RecordHashes,
    chosen: np.ndarray,
    served_model: gate.ScoredModel,
    earlier: Sequence[tuple[str, gate.ScoredModel]],
    numeric: torch.Tensor | None,
) -> tuple[str, gate.ScoredModel, gate.Records] | None:
    """The earlier model that beats the served one on the records none of them trained
    on (lowest mean log-loss there), with those records; None when none does (or the
    shared records are too few to say)."""
    if not earlier:
        return None
    shared = chosen.copy()
    for _, model in earlier:
        shared &= model.held_out_for(hashes)
    if int(shared.sum()) < gate.MIN_RECORDS:
        return None
    rows = None if numeric is None else numeric[torch.from_numpy(shared)]
    records = gate.Records.of_columns(columns, np.flatnonzero(shared), rows)
    served_loss = _log_loss(served_model, records)
    best = min(earlier, key=lambda pair: _log_loss(pair[1], records))
    if _log_loss(best[1], records) >= served_loss:
        return None
    return best[0], best[1], records


def _log_loss(model: gate.ScoredModel, records: gate.Records) -> float:
    return gate.score(model.success_probability(records, True), records.labels)[0].log_loss


def _rolled_back_anchor(root: Path) -> tuple[str, np.ndarray | None] | None:
    """The newest candidate rolled back for a live regression, and its pool's id hashes
    (None: its checkpoint cannot tell); None when there is none."""
    for candidate in reversed(list_candidates(root)):
        verdict = read_json(candidate / VERDICT_NAME) or {}
        if verdict.get("outcome") != "rolled_back" or verdict.get("reason") != LIVE_REGRESSION:
            continue
        # The file its verdict names (the one that was served), not the newest in its folder
        named = candidate / str(verdict.get("checkpoint") or "-")
        checkpoint = named if named.is_file() else newest_checkpoint(candidate)
        if checkpoint is None:
            return None
        try:
            model = gate.ScoredModel(load_checkpoint(checkpoint))
        except (CheckpointError, ValueError) as exc:
            logger.warning("rolled-back candidate %s not read: %s", candidate.name, exc)
            return None
        return f"candidate {candidate.name} (rolled back: live regression)", model.pool_ids
    return None


def further_comparisons(
    root: Path,
    columns: PoolColumns,
    hashes: gate.RecordHashes,
    chosen: np.ndarray,
    candidate: gate.ScoredModel,
    served_model: gate.ScoredModel,
    numeric: torch.Tensor | None,
    history: Sequence[Mapping[str, Any]] = (),
) -> list[GateComparison]:
    """The ``newest`` comparison, and ``best_earlier`` when an earlier model beats the
    served one; ``chosen``: the held-out comparison set's records; ``history``: the
    models served before it, newest first (the pointer's, as the run's plan read it)."""
    newer, anchor = newest(root, hashes, chosen, served_model)
    rows = None if numeric is None else numeric[torch.from_numpy(newer)]
    records = gate.Records.of_columns(columns, np.flatnonzero(newer), rows)
    newest_cmp = gate.compare_on("newest", records, candidate, served_model, True)
    found = [replace(newest_cmp, reason=f"{anchor}: {newest_cmp.reason}")]
    best = best_earlier(
        columns, hashes, chosen, served_model, earlier_models(root, history), numeric
    )
    if best is not None:
        ident, model, shared = best
        found.append(gate.compare_on("best_earlier", shared, candidate, model, True, ident))
    return found
