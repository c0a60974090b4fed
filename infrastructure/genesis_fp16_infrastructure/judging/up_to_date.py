"""A judged run that takes no step: its result, its data report and the renewed data
manifest (``judging.run``: the served model knew every current record, or a kept
inconclusive candidate was judged again), and the watch's figures as a typed report."""

from __future__ import annotations

import hashlib
import logging
import math
from typing import cast

import numpy as np

from genesis_fp16_infrastructure.agent_folder import data_manifest
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.contract.judging import RecordIds, RecordLosses
from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    GateReport,
    LiveReport,
    TrainResult,
)
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.served import Served
from genesis_fp16_infrastructure.judging.split import sorted_unique
from genesis_fp16_infrastructure.training.checkpoint_files import read_summary
from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName

logger = logging.getLogger(__name__)


def data_unchanged(losses: RecordLosses | RecordIds, known: np.ndarray | None) -> DataReport:
    """An up-to-date run's data report, from the records it scored: none new; those the
    served model knew and the pool no longer holds, removed. The fingerprint is the
    digest of the current records' ids."""
    ids = sorted_unique(losses.id_hashes)
    digest = hashlib.sha256(ids.tobytes()).hexdigest()[:32]
    # The known ids the pool no longer holds: those known less those found among the
    # current ones (asked in that direction: the current ids are the plugin's hashes).
    removed = None if known is None else len(known) - int(stores.known(ids, known).sum())
    return DataReport(
        records=len(ids),
        fingerprint=digest,
        change="unchanged",
        previous_records=None if known is None else len(known),
        new=0,
        removed=removed,
        relabelled=0,
        checked_by="records",
    )


def up_to_date(
    request: TrainRequest,
    served: Served,
    seconds: float,
    live: LiveReport | None,
    rejudged: GateReport | None = None,
) -> TrainResult:
    """No step taken: the served model knew every current record (its manifest renewed),
    or (``rejudged``) a kept inconclusive candidate was judged again and decided (issue 62)."""
    assert served.checkpoint is not None and served.losses is not None  # served, scored
    summary = read_summary(served.checkpoint) or {}
    entry = served.pointer.served.precision if served.pointer is not None else None
    precision = summary.get("precision") or entry
    used = cast(PrecisionName, precision if precision in ("fp32", "bf16", "fp16") else "fp32")
    records = len(served.records.ids)
    why = f"nothing new: all {records} current records were learned or judged already"
    data = None if rejudged is not None else data_unchanged(served.records, served.known)
    # Nothing new after reading the files: the served model's data manifest (when its
    # plugin keeps one) vouches for the files as the plan scanned them, so the next run is
    # answered without a read (a copy, a quarantined file, a touched file).
    check = request.snapshot.data if request.snapshot is not None else None
    scan = check.scan if check is not None and rejudged is None else None
    if scan is not None and data_manifest.renew(served.checkpoint, scan.to_json(prefixes=False)):
        logger.info("%s: nothing new in the files read: their manifest renewed", request.agent)
    return TrainResult(
        agent=request.agent,
        precision_requested=request.precision.requested,
        precision_used=request.precision.without_steps(used),  # what is asked now
        precision_reason=f"{request.precision_reason}; "
        + ("a kept candidate judged again" if rejudged else "up to date, no step taken")
        + f" (the served model was trained in {used})",
        device=request.device,
        steps=0,
        skipped_steps=0,
        overflow_rate=0.0,
        loss_scale=float(summary.get("loss_scale") or 1.0),
        final_train_loss=math.nan,
        eval={"loss": served.losses.mean()},
        samples_per_second=0.0,
        wall_seconds=round(seconds, 6),
        checkpoint=served.checkpoint,
        quarantined=served.losses.quarantined,
        data=data,
        up_to_date=rejudged is None,
        up_to_date_against=None if rejudged else why,
        rejected=rejudged is not None and rejudged.outcome == Outcome.REJECTED,
        gate=rejudged,
        live=live,
    )
