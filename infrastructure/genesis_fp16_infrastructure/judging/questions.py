"""What the gate asks of a scored candidate against the served model (:func:`_comparisons`:
every set and part, issues 62, 68 and 92; a first model's own figures, :func:`_first`), and
the verdict those questions decide (:func:`decide_scored`: a :class:`~.verdict.Decided`,
nothing written; its phase's transaction stages it).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import KeptCandidate
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.contract.judging import judging_margin, records_are_training_data
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.judging.gate import (
    MIN_RECORDS,
    Paired,
    Segments,
    compare,
    compare_part,
    decide,
    paired_losses,
    segment_questions,
    shared_rows,
)
from genesis_fp16_infrastructure.judging.scoring_copy import losses_of
from genesis_fp16_infrastructure.judging.served import KnownSegments, Served, held_out_unknown
from genesis_fp16_infrastructure.judging.verdict import Decided
from genesis_fp16_infrastructure.precision_names import PrecisionName


def decide_scored(
    request: TrainRequest,
    served: Served,
    rolled_back: np.ndarray | None,
    scored: tuple[KeptCandidate, Path, bool, RecordLosses],
    started: float,
    used: PrecisionName | None,
    digest: str,
    reported: Mapping[str, float],
) -> Decided:
    """The verdict on a scored candidate (``scored``: the candidate as read, its
    checkpoint, whether it is judged on held-out records, its losses), decided, nothing
    written. ``rolled_back``: the records a model the watch rolled back knew, as the run's
    phase 3 read them of its candidates (``watch.rolled_back_to``; None: none); ``used``:
    the precision it was trained in; ``digest``: the data's; ``reported``: its run's
    figures reported beside its losses (``judging.run._reported``)."""
    kept, checkpoint, held_out, losses = scored
    evidence, note = _evidence(held_out, served)
    if served.losses is None:
        outcome, reason, comparisons = Outcome.PROMOTED, "the first model", _first(losses)
    else:
        asked = _comparisons(request, served, losses, checkpoint, held_out, rolled_back)
        outcome, reason, comparisons = decide(asked)
        reason += note
    first = served.pointer is None
    return Decided(
        kept, checkpoint, outcome, reason, comparisons, started, used, served.id, first,
        digest, evidence, reported,
    )  # fmt: skip


def _first(losses: RecordLosses) -> list[Paired]:
    """The first model's figures: each column's mean on every record, nothing to compare."""
    nan, records = math.nan, len(losses.ids)
    first = Paired("current", records, nan, nan, nan, nan, nan, True)
    return [replace(first, candidate=losses.mean(m), metric=m) for m in losses.metrics()]


def _comparisons(
    request: TrainRequest,
    served: Served,
    losses: RecordLosses,
    checkpoint: Path,
    held_out: bool,
    rolled_back: np.ndarray | None = None,
) -> list[Paired]:
    """Every question the gate asks, of every loss column both models have (the primary
    first: its pooled comparison is the verdict's figure), each with its column's margin;
    :func:`~.gate.decide` settles them together (Holm over all of them); the records
    newer than ``rolled_back`` also as ``newest`` (:func:`~.watch.rolled_back_to`)."""
    judged, span = served.plugin, float(served.plugin.loss_span)
    assert served.losses is not None and served.checkpoint is not None
    name, losses, reference = _judged_records(held_out, served, losses)
    # The pairs, their segments and the parts asked apart, once for every column: the
    # same records for each (about 20,000 at a 100,000-record pool).
    rows = shared_rows(losses, reference)
    segments = Segments.of(reference.segments, rows[1], _known_segments(served))
    parts = []
    knew = _on_known(losses, served)
    if knew is not None:  # a veto only (_on_known)
        parts.append(("known", knew[rows[0]], False))
    if rolled_back is not None:  # required: the evidence that rolled a model back (watch.py)
        parts.append(("newest", ~schema.known(losses.id_hashes, rolled_back)[rows[0]], True))
    golden = None
    if request.golden_data_path is not None:
        ask = replace(request, data_path=request.golden_data_path)
        golden = losses_of(judged, checkpoint, ask), losses_of(judged, served.checkpoint, ask)
    found: list[Paired] = []
    for metric in [m for m in losses.metrics() if m in reference.metrics()]:  # no tuple made
        margin = partial(judging_margin, judged, metric=metric)  # of the served mean there
        a, b = paired_losses(losses, reference, span, metric, rows)
        found += segment_questions(name, a, b, margin, segments, metric)
        for part, keep, required in parts:
            asked = compare_part(part, a, b, keep, margin, metric)
            found.append(replace(asked, required=required))
        if golden is not None:
            found.append(compare("golden", *golden, span, margin, metric))
    return found


def _on_known(losses: RecordLosses, served: Served) -> np.ndarray | None:
    """Issue 68: the set ``known``, those of the judged records the served model already
    knew (it was judged on them), asked on its own when the records also hold new ones:
    a candidate that learned the new records' noise gains there what it loses on the
    records the served model was shown good on, and the new ones must not excuse it.
    It is a veto, as a known segment is (issue 68's gate with power): shown worse, the
    candidate is rejected; not shown no worse, it holds nothing back. The known records
    never grow, so a required question there held clean growth back for good whenever a
    candidate trained afresh could not show itself within the margin on them (se_darwin:
    inconclusive on the same 382 records after 1,000 more arrived). Per record of
    ``losses``, whether it is one; None when every record is known, fewer than two are,
    or the plugin's records are evaluation episodes (a new task file is not noise)."""
    if served.known is None or not records_are_training_data(served.plugin):
        return None
    # The judged records themselves (their hashes the served model's): the listing's
    # lookup at their rows, no search of the known ids again.
    judged = isinstance(served, Served) and served.losses is not None
    same = judged and losses.id_hashes is served.judged.id_hashes
    knew = served.judged_knew if same else None
    if knew is None:
        knew = schema.known(losses.id_hashes, served.known)
    return None if knew.all() or int(knew.sum()) < MIN_RECORDS else knew


def _judged_records(
    held_out: bool, served: Served, losses: RecordLosses
) -> tuple[str, RecordLosses, RecordLosses]:
    """The set the gate compares on, and the candidate's and the served model's losses
    there: ``held_out``, the held-out records the served model did not train on (the
    candidate trained on none: :func:`~.served.held_out_check` saw to it); else ``current``,
    every record both scored."""
    assert served.losses is not None
    if not held_out:
        return "current", losses, served.losses
    reference = served.judged
    if not losses.same_records(reference):  # it scored more than asked
        losses = losses.take(held_out_unknown(served, losses))
    return "held_out", losses, reference


def _evidence(
    held_out: bool, served: Served
) -> tuple[Literal["held_out", "training_data"] | None, str]:
    """The verdict's ``evidence`` (held-out records, the plugin's training data: its
    candidate names none it trained on; None: records no model trains on), and what its
    reason adds about them: "on training data" when the candidate names none; that the
    served model may know them when it names nothing and knew no judged records."""
    if not records_are_training_data(served.plugin):
        return None, ""
    if not held_out:
        return "training_data", " (on training data: the candidate names no records it trained on)"
    if served.trained is None:
        return "held_out", " (the served model names no records it trained on: it may know these)"
    return "held_out", ""


def _known_segments(served: Served) -> Collection[str] | None:
    """The segments of the records the served model knew (issue 62: only these are
    judged on their own), read as the gate asks (``served.KnownSegments``); None: every
    segment (the plugin keeps no known ids)."""
    if served.losses is None or served.records.segments is None or served.known is None:
        return None
    return KnownSegments(served.records.segments, served.knew)
