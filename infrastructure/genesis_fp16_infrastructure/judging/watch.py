"""A judged plugin's live watch: the served model against its predecessor on later records.

Each judged run first scores the current records with the served model (the gate needs
them too). Records whose ids neither the served model nor its predecessor (the pointer's
``history[0]``) knew when it was judged (:mod:`.stores`: ``judged_ids.npz``), and that
this watch has not scored before, are scored by the predecessor as well and appended, in
arrival order, to ``judged-live-<predecessor>.npz`` in the served model's candidate
folder: each record counts once, in one fixed order, as the bound below requires.

The test, on each loss column the plugin declares (``RecordLosses.losses``): both
losses clipped to ``[0, loss_span]`` (the plugin's declared span: the bound needs
bounded differences), the paired differences (served - predecessor) get the
anytime-valid empirical-Bernstein bounds of :mod:`.segments` at ``ALPHA / k`` for
``k`` columns; when a column's lower bound passes its margin (the plugin's
``judging_margin``, else 5% of the predecessor's mean loss there), the served model is
worse than the one before it beyond the margin. Why ``ALPHA / k`` (Bonferroni): each
column's bounds hold over the whole watch except with probability ``ALPHA / k``, so all
hold together except with at most ``ALPHA``, whatever the columns' dependence; Holm's
step-down tests nothing at a wider level before a first failure, which already rolls
back (docs/judging.md). The A/A self-test replays the columns together.
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
from typing import Any

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.candidates import utc_now
from genesis_fp16_infrastructure.agent_folder.layout import JUDGED_WATCH
from genesis_fp16_infrastructure.agent_folder.pointer import pointer_lock, read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import commit, rollback
from genesis_fp16_infrastructure.contract.judging import judging_margin
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError, plugin_name
from genesis_fp16_infrastructure.contract.reports import LiveReport
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.segments import judge, self_test
from genesis_fp16_infrastructure.judging.served import CheckpointChangedError, Served, losses_of

logger = logging.getLogger(__name__)

ALPHA = 0.05  # a false rollback's probability over one model's whole watch, at most
LIVE_REGRESSION = "live_regression"


def watch(request: TrainRequest, served: Served) -> LiveReport | None:
    """Score the new records (module docstring), update the figures, roll back on a
    regression. ``served``: the served model as the run read it (a pointer's: its losses
    on the current records, the ids it knew); the predecessor is scored on the new
    records (:func:`~.served.losses_of`, logged when it cannot be). Returns the report
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
    for seen in (known[0], known[1], np.sort(kept["ids"])):  # asked of those still new
        still = np.flatnonzero(new)
        new[still] = ~stores.known(ids[still], seen)
    fresh = np.flatnonzero(new).tolist()
    if not fresh:
        return None
    only = [served_now.ids[i] for i in fresh]
    try:
        before = losses_of(plugin, folder / str(previous.checkpoint), request, only)
    except CheckpointChangedError:
        raise
    except TrainRequestError as exc:  # the predecessor cannot be scored: logged, not watched
        logger.warning("%s", exc)
        return None
    row = {id_: k for k, id_ in enumerate(before.ids)}
    picked = [i for i in fresh if served_now.ids[i] in row]
    named = served_now.segments
    scored = {
        "ids": ids[picked],
        "segments": np.array(
            ["" if named is None else named[i][: stores.SEGMENT_CHARS] for i in picked], dtype=str
        ),
    }
    rows, missing = [row[served_now.ids[i]] for i in picked], np.full(len(picked), np.nan)
    for metric in served_now.metrics():  # every loss column: a column the predecessor
        theirs = before.losses.get(metric)  # does not score is NaN there (not tested)
        scored[f"served/{metric}"] = np.asarray(served_now.column(metric))[picked]
        scored[f"previous/{metric}"] = missing if theirs is None else np.asarray(theirs)[rows]
    kept = stores.extend_watch(kept, scored)
    stores.write_watch(store, kept)
    figures = figures_of(kept, float(plugin.loss_span), plugin, served_now.metrics())
    figures.update(against=previous.id, new_records=len(picked))
    return LiveReport.from_json(decide(folder, name, str(pointer.served.id), figures))


def figures_of(
    kept: Mapping[str, np.ndarray], span: float, plugin: object, metrics: Sequence[str]
) -> dict[str, Any]:
    """The running figures of a watch's records (in arrival order): each loss column's
    of ``metrics`` (the primary first) at ``ALPHA / len(metrics)`` with its own margin,
    and the family's A/A self-test."""
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
        judged = judge(d, segments, span, margin, level)
        columns[metric] = {
            **judged,
            "served_loss": round(float(served.mean()), 6) if on.any() else None,
            "previous_loss": round(float(previous.mean()), 6) if on.any() else None,
            "margin": margin,
            "alpha": level,
        }
        tests.append((d, segments, margin))
    return {
        "records": len(kept["ids"]),
        "alpha": ALPHA,
        "primary": metrics[0],
        "metrics": columns,
        "self_test": self_test(tests, span, level, seed=len(kept["ids"])),
        "regression": any(c["regression"] for c in columns.values()),
    }


def _segment_names(segments: np.ndarray | None) -> np.ndarray | None:
    """The records' segment names for the test, None when no record has one; a record
    kept before segments were (an older store), ``(unsegmented)``."""
    if segments is None or not len(segments) or not (segments != "").any():
        return None
    return np.where(segments == "", "(unsegmented)", segments)


def decide(folder: Path, agent: str, watched: str, figures: dict[str, Any]) -> dict[str, Any]:
    """The watch's decision: write the figures (a LiveReport's JSON but the outcome's
    fields) into the pointer, or roll back, under the pointer's lock and only while the
    model watched is still the one served (an operator may have changed it meanwhile:
    then nothing is written)."""
    figures = {**figures, "updated_at": utc_now()}
    report = {**figures, "served": watched, "rolled_back": False, "held": None}
    with pointer_lock(folder):
        try:
            current = read_pointer(folder)
        except ServedPointerError:
            return {**report, "held": "the pointer changed and cannot be read"}
        if current is None or current.served.id != watched:
            return {**report, "held": "the served model changed meanwhile"}
        if figures["regression"] and current.pinned is not None:
            report["held"] = "pinned by the operator"
        elif figures["regression"]:
            verdict = {"reason": LIVE_REGRESSION, "live": figures, "detail": _detail(figures)}
            try:
                now = rollback(folder, verdict=verdict)
            except ServedPointerError as exc:  # its predecessor's checkpoint is gone
                report["held"] = str(exc)
            else:
                said = (agent, watched, now.id, verdict["detail"])
                logger.warning("%s: served model %s rolled back to %s: %s", *said)
                return {**report, "rolled_back": True, "now_served": now.id}
        # The pointer read above, under this lock: written back with the figures, its
        # journal and sequence as they are
        served = msgspec.structs.replace(current.served, live=figures)
        commit(folder, replace(current, served=served))
    if figures["regression"]:
        logger.warning("%s: live regression of %s held: %s", agent, watched, report["held"])
    return report


def _detail(figures: Mapping[str, Any]) -> str:
    """The rollback's reason in one line: each column that regressed, with its figures."""
    said = [
        f"{metric} {f['served_loss']:.6g} vs its predecessor's {f['previous_loss']:.6g} on "
        f"{f['records']} later record(s), at least {f['lower']:.6g} worse (anytime, "
        f"{1 - f['alpha']:.1%}), margin {f['margin']:.6g}"
        for metric, f in figures["metrics"].items()
        if f["regression"]
    ]
    return "live regression: " + "; ".join(said)
