"""A judged plugin's live watch: the served model against its predecessor on later records.

Each judged run first scores the current records with the served model (the gate needs
them too). Records whose ids neither the served model nor its predecessor (the pointer's
``history[0]``) knew when it was judged (:mod:`.stores`: ``judged_ids.npz``), and that
this watch has not scored before, are scored by the predecessor as well and appended, in
arrival order, to ``judged-live-<predecessor>.npz`` in the served model's candidate
folder: each record counts once, in one fixed order, as the bound requires.

The test, on each loss column the plugin declares (``RecordLosses.losses``): both
losses clipped to ``[0, loss_span]`` (the plugin's declared span: the bound needs
bounded differences), the paired differences (served - predecessor) get the
anytime-valid empirical-Bernstein bounds of :mod:`.confidence_sequence` at ``ALPHA / k`` for
``k`` columns; when a column's lower bound passes its margin (the plugin's
``judging_margin``, else 5% of the predecessor's mean loss there, never under a declared
``judging_margin_floor``), the served model is
worse than the one before it beyond the margin. Why ``ALPHA / k`` (Bonferroni): each
column's bounds hold over the whole watch except with probability ``ALPHA / k``, so all
hold together except with at most ``ALPHA``, whatever the columns' dependence; Holm's
step-down tests nothing at a wider level before a first failure, which already rolls
back (docs/judging.md). Each column is tested overall and per segment, and the A/A
self-test replays the columns together (:mod:`.segment_tests`).
Unless the operator pinned it (then ``held``), the predecessor is served again through
:func:`~genesis_fp16_infrastructure.agent_folder.transitions.rollback`, and the dropped
model's verdict becomes ``rolled_back`` with reason ``live_regression``, the figures,
and the columns that regressed. The running figures (a
:class:`~genesis_fp16_infrastructure.contract.reports.LiveReport`'s JSON, a map by
column) go into the served entry of ``served.json`` as ``live``.

What counts as a "later record" is the plugin's: its ids. The scaffold's are lines of
its data file (a new file brings new ids); rlhf_ppo's are evaluation episodes of the
current task file (a changed task file brings new episodes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import (
    KeptCandidate,
    utc_now,
)
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_WATCH
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome, Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import ServedPointer
from genesis_fp16_infrastructure.agent_folder.transaction import Transaction, transaction
from genesis_fp16_infrastructure.contract.judging import judging_margin
from genesis_fp16_infrastructure.contract.listed_rows import at_rows, taken_at
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError, plugin_name
from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
from genesis_fp16_infrastructure.contract.reports import LiveReport
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.scoring_copy import CheckpointChangedError, losses_of
from genesis_fp16_infrastructure.judging.segment_tests import judge, self_test
from genesis_fp16_infrastructure.judging.served import Served
from genesis_fp16_infrastructure.training.checkpoint_load import reusing_loads

logger = logging.getLogger(__name__)

ALPHA = 0.05  # a false rollback's probability over one model's whole watch, at most
LIVE_REGRESSION = "live_regression"


def watch(request: TrainRequest, served: Served) -> LiveReport | None:
    """Score the new records (module docstring), update the figures, roll back on a
    regression. ``served``: the served model as the run read it (a pointer's: its losses
    on the current records, the ids it knew); the predecessor is scored on the new
    records (:func:`~.scoring_copy.losses_of`, logged when it cannot be). Returns the report
    (the run's ``live``), or None when there is nothing to watch: no predecessor, a model
    whose known records are not kept, no new record, or a predecessor that cannot be
    scored."""
    plugin, folder = served.plugin, Path(request.checkpoint_dir)
    name = plugin_name(plugin)
    pointer, served_now, served_known = served.pointer, served.losses, served.known
    assert pointer is not None and served_now is not None  # a pointer's model is scored
    if not pointer.history:
        return None
    served_c = (folder / str(pointer.served.checkpoint)).parent
    previous = pointer.history[0]
    known = [served_known, stores.read_known_ids((folder / str(previous.checkpoint)).parent)]
    if known[0] is None or known[1] is None:
        logger.warning("%s: live watch off: a model's known records are not kept", name)
        return None
    store = JUDGED_WATCH.at(served_c, str(previous.id))
    kept = stores.read_watch(store, served_now.primary)
    ids, new = served_now.id_hashes, np.ones(len(served_now.ids), dtype=bool)
    seen_by = [known[0], known[1], np.sort(kept["ids"])]
    knew = served.scored_knew  # the served model's, as its scoring's listing looked them up
    if knew is not None:
        new, seen_by = ~knew, seen_by[1:]
    for seen in seen_by:  # asked of those still new
        still = np.flatnonzero(new)
        new[still] = ~schema.known(ids[still], seen)
    fresh = _within_bound(name, store, kept, served_now, np.flatnonzero(new).tolist())
    if not fresh:
        return None
    # By their rows in the listing where the served model's scoring was given what it
    # asked by rows (no lookup of every listed id in the plugin), else by their ids. Their
    # ids and segments are taken at their rows alone: no tuple of every scored record's.
    at = np.asarray(fresh, dtype=np.int64)
    fresh_ids = taken_at(served_now, "ids", at)
    assert fresh_ids is not None  # a record's ids are never None
    asked = served.rows_asked(at)
    only = list(fresh_ids) if asked is None else asked
    try:
        # In a resident process the predecessor's state is the one kept since it was
        # served (a reusing_loads() block: its bytes hashed and matched, not unpickled)
        with reusing_loads():
            before = losses_of(plugin, folder / str(previous.checkpoint), request, only)
    except CheckpointChangedError:
        raise
    except TrainRequestError as exc:  # the predecessor cannot be scored: logged, not watched
        logger.warning("%s", exc)
        return None
    row = {id_: k for k, id_ in enumerate(before.ids)}
    both = [(i, row[id_]) for i, id_ in zip(fresh, fresh_ids, strict=True) if id_ in row]
    picked, rows = [i for i, _ in both], [k for _, k in both]
    named = taken_at(served_now, "segments", np.asarray(picked, dtype=np.int64))
    scored = {
        "ids": ids[picked],
        "segments": np.array(
            [s[: stores.SEGMENT_CHARS] for s in named] if named else [""] * len(picked),
            dtype=str,
        ),
    }
    missing = np.full(len(picked), np.nan)
    for metric in served_now.metrics():  # every loss column: a column the predecessor
        theirs = before.losses.get(metric)  # does not score is NaN there (not tested)
        # The new records' losses alone, by the column's array: a record of rows keeps
        # its columns so, and no tuple of every scored record's floats is made
        scored[f"served/{metric}"] = served_now.column_array(metric)[picked]
        scored[f"previous/{metric}"] = (
            missing if theirs is None else np.array(at_rows(theirs, rows), float)
        )
    kept = stores.extend_watch(kept, scored)
    stores.write_watch(store, kept)
    span, metrics = float(plugin.loss_span), served_now.metrics()
    figures = figures_of(kept, span, plugin, metrics, str(previous.id), len(picked))
    return decide_live(folder, name, str(pointer.served.id), figures)


def _within_bound(
    name: str, store: Path, kept: Mapping[str, np.ndarray], losses: RecordLosses, fresh: list[int]
) -> list[int]:
    """The first of the ``fresh`` rows that the store takes within its reader's bound
    (:func:`~.stores.room`), before the predecessor is asked to score them; the rest
    are not watched, said in one line."""
    named = taken_at(losses, "segments", np.asarray(fresh, dtype=np.int64))
    chars = max((len(s[: stores.SEGMENT_CHARS]) for s in named), default=1) if named else 1
    columns = [f"{side}/{m}" for m in losses.metrics() for side in ("served", "previous")]
    fits = stores.room(kept, columns, chars, len(fresh))
    if fits < len(fresh):
        bound = stores.decoded_bound(JUDGED_WATCH)
        logger.warning(
            "%s: live watch store %s full: %d new record(s) not watched (the store holds at "
            "most %d bytes decoded, the bound its reader enforces); its figures stand",
            name, store, len(fresh) - fits, bound,
        )  # fmt: skip
    return fresh[:fits]


def rolled_back_to(candidates: Sequence[KeptCandidate], served_id: str | None) -> np.ndarray | None:
    """Issue 92: the records the newest model this watch rolled back to ``served_id`` knew
    (its verdict ``rolled_back``, reason ``live_regression``, watched against
    ``served_id``), as sorted id hashes. The records newer than it, those that showed it
    worse, are the gate's set ``newest`` (judging.run): a candidate trained on the
    records that made it worse is likely worse there again, and its gain elsewhere (the
    poison's own held-out records reward it) must not excuse it, so it must be shown no
    worse there too, a required question (fewer than two such records: ``undecided``
    until more arrive). None: no such model, or its known records are not kept (logged).
    ``candidates``: the folder's, as a judged run's phase read them (no read here)."""
    for kept in reversed(candidates):
        candidate, verdict = kept.path, kept.verdict
        if verdict.outcome != Outcome.ROLLED_BACK or verdict.reason != LIVE_REGRESSION:
            continue
        if verdict.live is None or verdict.live.against != served_id:
            continue
        known = stores.read_known_ids(candidate)
        if known is None:
            logger.warning("rolled-back candidate %s keeps no known records", candidate.name)
            return None
        logger.info("judged on the records newer than %s too (rolled back)", candidate.name)
        return known
    return None


def figures_of(
    kept: Mapping[str, np.ndarray],
    span: float,
    plugin: object,
    metrics: Sequence[str],
    against: str | None = None,
    new_records: int = 0,
) -> LiveReport:
    """The running figures of a watch's records (in arrival order), against the model
    ``against`` with ``new_records`` of them new this run: each loss column's of
    ``metrics`` (the primary first) at ``ALPHA / len(metrics)`` with its own margin, and
    the family's A/A self-test. The model watched and the time are :func:`decide_live`'s to
    say (``served`` is empty until then)."""
    names = _segment_names(kept.get("segments"))
    level, columns, tests = ALPHA / len(metrics), {}, []
    for metric in metrics:
        served = np.asarray(kept.get(f"served/{metric}", []), dtype=np.float64)
        previous = np.asarray(kept.get(f"previous/{metric}", []), dtype=np.float64)
        on = np.isfinite(served) & np.isfinite(previous)  # the records scored on it
        served, previous = np.clip(served[on], 0.0, span), np.clip(previous[on], 0.0, span)
        margin = judging_margin(plugin, float(previous.mean()) if on.any() else 0.0, metric)
        d, segments = served - previous, None if names is None else names[on]
        # Each record's segment (se_darwin: its Genesis agent): the column's test at half
        # its level and each segment's beside it; none declared: the column's test alone.
        columns[metric] = replace(
            judge(d, segments, span, margin, level),
            served_loss=round(float(served.mean()), 6) if on.any() else None,
            previous_loss=round(float(previous.mean()), 6) if on.any() else None,
        )
        tests.append((d, segments, margin))
    return LiveReport(
        served="",
        against=against,
        records=len(kept["ids"]),
        new_records=new_records,
        alpha=ALPHA,
        regression=any(c.regression for c in columns.values()),
        primary=metrics[0],
        metrics=columns,
        self_test=self_test(tests, span, level, seed=len(kept["ids"])),
    )


def _segment_names(segments: np.ndarray | None) -> np.ndarray | None:
    """The records' segment names for the test, None when no record has one; a record
    kept before segments were (an older store), ``(unsegmented)``."""
    if segments is None or not len(segments) or not (segments != "").any():
        return None
    return np.where(segments == "", "(unsegmented)", segments)


def decide_live(
    folder: Path, agent: str, watched: str, figures: LiveReport | Mapping[str, object]
) -> LiveReport:
    """The watch's decision on its ``figures`` of the served model ``watched``
    (:func:`figures_of`'s, or a LiveReport's JSON but what the watch did): write them
    into the pointer, or roll back, under the pointer's lock and only while the model
    watched is still the one served (an operator may have changed it meanwhile: then
    nothing is written). Returns the report: the figures, rolled back (``now_served``)
    or ``held`` and why."""
    if isinstance(figures, LiveReport):
        report = replace(figures, updated_at=utc_now(), served=watched)
    else:
        report = LiveReport.from_json({**figures, "updated_at": utc_now(), "served": watched})
    try:
        with transaction(folder) as tx:
            current = tx.pointer
            if current is None or current.served.id != watched:
                return replace(report, held="the served model changed meanwhile")
            report = _staged(tx, current, report)
    except ServedPointerError:
        return replace(report, held="the pointer changed and cannot be read")
    if report.rolled_back:  # logged once committed
        said = (agent, watched, report.now_served, _detail(report))
        logger.warning("%s: served model %s rolled back to %s: %s", *said)
    elif report.regression:
        logger.warning("%s: live regression of %s held: %s", agent, watched, report.held)
    return report


def _staged(tx: Transaction, current: ServedPointer, report: LiveReport) -> LiveReport:
    """The watch's decision on the model ``current`` serves, staged in ``tx``: the
    rollback, or the figures written into the pointer (its journal and sequence as they
    are); the report as decided."""
    if report.regression and current.pinned is not None:
        report = replace(report, held="pinned by the operator")
    elif report.regression:
        verdict = Verdict(reason=LIVE_REGRESSION, live=report, detail=_detail(report))
        try:
            now = tx.rollback(verdict=verdict)
        except ServedPointerError as exc:  # its predecessor's checkpoint is gone
            report = replace(report, held=str(exc))
        else:
            return replace(report, rolled_back=True, now_served=now.id)
    tx.record_live(msgspec.structs.replace(current.served, live=report))
    return report


def _detail(report: LiveReport) -> str:
    """The rollback's reason in one line: each column that regressed, with its figures."""
    said = [
        f"{metric} {f.served_loss:.6g} vs its predecessor's {f.previous_loss:.6g} on "
        f"{f.records} later record(s), at least {f.lower:.6g} worse (anytime, "
        f"{1 - f.alpha:.1%}), margin {f.margin:.6g}"
        for metric, f in report.metrics.items()
        if f.regression
    ]
    return "live regression: " + "; ".join(said)
