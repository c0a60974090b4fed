"""A judged run with nothing to learn: whether it has any (:func:`nothing_new`), and its
result when it has none (:func:`up_to_date`), with the data report of such a run and the
phases every judged run reports (:func:`judged_phases`).

A run is up to date when the served model, or the last candidate judged against it,
knew every current record, was trained with the options asked now, and trained on no
record the pool no longer holds; it then takes no step, renews the data manifest that
answers the next run without a read, and reports the served model's figures.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import (
    KeptCandidate,
    newest_checkpoint,
    read_meta,
    renew_data_manifest,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.contract.judging import records_are_training_data
from genesis_fp16_infrastructure.contract.record_losses import RecordIds, RecordLosses
from genesis_fp16_infrastructure.contract.reports import (
    DataReport,
    GateReport,
    LiveReport,
    TrainResult,
)
from genesis_fp16_infrastructure.contract.split import sorted_unique
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.served import Served
from genesis_fp16_infrastructure.judging.trained_ids import (
    TrainedIdsError,
    trained_ids,
    trained_on_gone,
)
from genesis_fp16_infrastructure.precision_names import PRECISIONS, PrecisionName
from genesis_fp16_infrastructure.training.checkpoint_files import read_summary

logger = logging.getLogger("genesis_fp16_infrastructure.judging.run")


def judged_phases(
    phases: Mapping[str, float] | None, read: float, outside: float, gate: float | None
) -> dict[str, float]:
    """A judged run's phases, one that took no step too (the gauge then shows its own):
    the judging's (``outside``: its seconds outside the plugin's train) as "live" (the
    served model scored and watched) and "gate" (the candidate scored and judged; None:
    none). The plugin's listing (``read`` seconds), the run's first read of its data,
    which training reads again from the plugin's cache, counts as "read", beside its own."""
    out = dict(phases or {})
    if read:
        out["read"] = round(out.get("read", 0.0) + read, 6)
    out["live"] = round(outside - read - (gate or 0.0), 6)
    return out if gate is None else {**out, "gate": gate}


class Learned(NamedTuple):
    """What a run that takes no step is up to date against (the served model, or the last
    candidate judged against it): the ids it knew, and those it trained on (None: it
    names none)."""

    known: np.ndarray
    named: np.ndarray | None


def nothing_new(
    served: Served,
    request: TrainRequest,
    candidates: Sequence[KeptCandidate],
    last: Path | None,
) -> Learned | None:
    """What the run is up to date against, or None (it trains): the served model knew
    every current record, or the last candidate judged against it (``last``:
    ``candidates.last_judged``, asked by the run's phase) trained on them already
    (rejected, or held by the pin: the same records would train the same candidate again;
    under a pin, promoted too: a pin is never undone by training the same data again);
    and neither trained on a record the pool no longer holds (a removed file: the model
    would keep what it learned from it, so a candidate trains without it, issue 93).
    Asked of a scored served model's unforced run; ``candidates``: the folder's as the
    run's phase read them (no read here)."""
    if served.known is None:
        return None
    if not records_are_training_data(served.plugin) or _other_options(served, request, candidates):
        return None
    ids = served.records.id_hashes
    if served.knew.all() and not trained_on_gone(served.named, ids):
        return Learned(served.known, served.named)
    known = None if last is None else stores.read_known_ids(last)
    if last is None or known is None or not schema.known(ids, known).all():
        return None
    checkpoint = newest_checkpoint(last)
    try:
        named = None if checkpoint is None else trained_ids(checkpoint)
    except TrainedIdsError:  # its list is malformed: it names none (the gate refused it)
        named = None
    return None if trained_on_gone(named, ids) else Learned(known, named)


# A judged run that takes no step (the served model knew every current record, or a kept
# inconclusive candidate was judged again): its result, its data report and the
# renewed data manifest.


def data_unchanged(
    losses: RecordLosses | RecordIds, known: np.ndarray | None, named: np.ndarray | None = None
) -> DataReport:
    """An up-to-date run's data report, from the records it scored: none new; removed,
    those the model it is up to date against trained on (``named``) and the pool no
    longer holds, else (it names none) those it knew. The fingerprint is the digest of
    the current records' ids."""
    ids = sorted_unique(losses.id_hashes)
    digest = hashlib.sha256(ids.tobytes()).hexdigest()[:32]
    # The ids the pool no longer holds: those named (or known) less those found among the
    # current ones (asked in that direction: the current ids are the plugin's hashes).
    gone_from = known if named is None else named
    removed = (
        None if gone_from is None else len(gone_from) - int(schema.known(ids, gone_from).sum())
    )
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
    learned: Learned | None = None,
) -> TrainResult:
    """No step taken: the served model, or the last candidate judged against it
    (``learned``), knew every current record (its manifest renewed), or (``rejudged``) a
    kept inconclusive candidate was judged again and decided (issue 62)."""
    assert served.checkpoint is not None and served.losses is not None  # served, scored
    summary = read_summary(served.checkpoint) or {}
    entry = served.pointer.served.precision if served.pointer is not None else None
    precision = summary.get("precision") or entry
    used = cast(PrecisionName, precision if precision in PRECISIONS else "fp32")
    asked = request.precision.without_steps(used)
    # The scale this run ran with: none outside fp16 (an fp32 checkpoint's summary keeps
    # the disabled scaler's 65536, which the page charted as this run's scale).
    scale = float(summary.get("loss_scale") or 1.0) if asked == "fp16" else 1.0
    records, seconds = len(served.records.ids), round(seconds, 6)
    why = f"nothing new: all {records} current records were learned or judged already"
    data = None if learned is None else data_unchanged(served.records, *learned)
    # Nothing new after reading the files: the served model's data manifest (when its
    # plugin keeps one) vouches for the files as the plan scanned them, so the next run is
    # answered without a read (a copy, a quarantined file, a touched file).
    check = request.snapshot.data if request.snapshot is not None else None
    scan = check.scan if check is not None and rejudged is None else None
    if scan is not None and renew_data_manifest(served.checkpoint, scan.to_json(prefixes=False)):
        logger.info("%s: nothing new in the files read: their manifest renewed", request.agent)
    return TrainResult(
        agent=request.agent,
        precision_requested=request.precision.requested,
        precision_used=asked,  # what is asked now
        precision_reason=f"{request.precision_reason}; "
        + ("a kept candidate judged again" if rejudged else "up to date, no step taken")
        + f" (the served model was trained in {used})",
        device=request.device,
        steps=0,
        skipped_steps=0,
        overflow_rate=0.0,
        loss_scale=scale,
        final_train_loss=math.nan,
        eval={"loss": served.losses.mean()},
        samples_per_second=0.0,
        wall_seconds=seconds,
        checkpoint=served.checkpoint,
        quarantined=served.losses.quarantined,
        data=data,
        up_to_date=rejudged is None,
        up_to_date_against=None if rejudged else why,
        rejected=rejudged is not None and rejudged.outcome == Outcome.REJECTED,
        gate=rejudged,
        live=live,
        phases=judged_phases(
            None, served.read_seconds, seconds, rejudged.seconds if rejudged else None
        ),
    )


def _other_options(
    served: Served, request: TrainRequest, candidates: Sequence[KeptCandidate] | None
) -> bool:
    """The served model was trained with other plugin options than this run asks for (as
    its candidate's meta says, as the phase read it, else read now; a meta that does not
    say: the same): the run trains."""
    assert served.checkpoint is not None
    folder = served.checkpoint.parent
    read = [c.meta for c in candidates or () if c.path == folder]
    meta = read[0] if read else read_meta(folder)
    asked = meta.extra.get("request")  # an older meta's: its run's request whole
    older = asked.get("options") if isinstance(asked, Mapping) else None
    recorded = meta.options if meta.options is not None else older
    return recorded is not None and recorded != request.recorded_options()
