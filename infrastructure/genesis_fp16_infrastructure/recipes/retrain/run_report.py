"""What a retrain run reports beside its counts (contract.reports): the data it trained
on and what changed, the drift of the new records (logged when flagged), and how the
records were split; ``run`` builds its result from these once."""

from __future__ import annotations

import logging
from typing import Any

from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    DriftReport,
)
from genesis_fp16_infrastructure.data.fingerprint import DataChange, DataFingerprint
from genesis_fp16_infrastructure.data.readers import ReadResult
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.recipes.retrain.task import WorldModelTask
from genesis_fp16_infrastructure.training import FitResult

logger = logging.getLogger(__name__)


def log_drift(drift: DriftReport, agent: str) -> None:
    """One line for a flagged report: what moved, and by how much."""
    if drift.any_flagged:
        logger.warning(
            "%s: %d new record(s) drifted: %s; success rate shift %+.3f (threshold %.3f)",
            agent,
            drift.new_records,
            ", ".join(f"{k} {drift.features[k]:.3f}" for k in drift.flagged) or "none",
            drift.label_shift,
            drift.label_shift_threshold,
        )


def data_record(seen: DataFingerprint, change: DataChange | None) -> DataReport:
    """The run's ``data``: the records trained on and what changed."""
    if change is None:
        return DataReport(seen.records, seen.digest, "first")
    return DataReport(
        seen.records,
        seen.digest,
        "unchanged" if change.unchanged else "changed",
        previous_records=change.previous,
        new=change.added,
        removed=change.removed,
        relabelled=change.relabelled,
    )


def split_record(task: WorldModelTask) -> dict[str, Any]:
    """``extra.split`` of ``train --json``: how the records were used."""
    if task.cross_validated:
        return {
            "mode": "cross_validation",
            "folds": task.members,
            "records": len(task.train_data),
            "eval": "out-of-fold: each record scored by the member that did not train on it",
        }
    return {
        "mode": "held_out",
        "train": len(task.train_data),
        "validation": len(task.validation_data),
        "held_out": len(task.eval_data),
    }


def run_extra(result: FitResult, data: ReadResult, task: WorldModelTask) -> dict[str, Any]:
    """The run's own record in ``extra`` (the daemon reads none of it): its steps over
    the whole chain, the records used, skipped as duplicates or unlabelled, the split."""
    return {
        "total_steps": result.summary.step,
        "examples": data.labelled,
        "duplicates": data.duplicates,
        "unlabelled": data.unlabelled,
        "split": split_record(task),
    }


def trained_extra(result: FitResult, candidate: str) -> dict[str, Any]:
    """What a run that trained adds to ``extra``: the precision's warning, the checkpoint
    it resumed from and its candidate's name."""
    return {
        "precision_warning": result.precision.warning,
        "resumed_from": str(result.resumed_from) if result.resumed_from else None,
        "candidate": candidate,
    }


def cache_record(cache: RecordCache) -> dict[str, int]:
    """``extra.record_cache``: the per-file record cache's counts for this read."""
    return {
        "files_cached": cache.hits,
        "files_read": cache.misses,
        "files_continued": cache.continued,  # appended .jsonl: new lines only
        "write_failures": cache.write_failures,
        "entries_unreadable": cache.unreadable,  # damaged entries: their files parsed again
        "pool_cached": int(cache.pool_hit),  # the joined pool whole: no file decoded
    }
