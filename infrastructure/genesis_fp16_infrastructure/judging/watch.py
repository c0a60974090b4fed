"""A judged plugin's live watch: the served model against its predecessor on later records.

Each judged run first scores the current records with the served model (the gate needs
them too). Records whose ids neither the served model nor its predecessor (the pointer's
``history[0]``) knew when it was judged (:mod:`.stores`: ``judged_ids.npz``), and that
this watch has not scored before, are scored by the predecessor as well and appended, in
arrival order, to ``judged-live-<predecessor>.npz`` in the served model's candidate
folder: each record counts once, in one fixed order, as the bound below requires.

The test: both losses clipped to ``[0, loss_span]`` (the plugin's declared span: the
bound needs bounded differences), the paired differences (served - predecessor) get
the anytime-valid empirical-Bernstein bounds of :mod:`.sequential` at ``ALPHA``; when
the lower bound passes the margin (the plugin's ``judging_margin``, else 5% of the
predecessor's mean loss on those records), the served model is worse than the one
before it beyond the margin, at ``ALPHA`` over its whole watch however many runs looked.
Unless the operator pinned it (then ``held``), the predecessor is served again through
:func:`~genesis_fp16_infrastructure.agent_folder.transitions.rollback`, and the dropped
model's verdict becomes ``rolled_back`` with reason ``live_regression`` and the figures.
The running figures go into the served entry of ``served.json`` as ``live``.

What counts as a "later record" is the plugin's: its ids. The scaffold's are lines of
its data file (a new file brings new ids); rlhf_ppo's are evaluation episodes of the
current task file (a changed task file brings new episodes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    pointer_lock,
    read_pointer,
)
from genesis_fp16_infrastructure.agent_folder.transitions import rollback, update_pointer
from genesis_fp16_infrastructure.contract.judging import (
    JudgedPlugin,
    RecordLosses,
    judging_margin,
)
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.segments import judge, self_test

logger = logging.getLogger(__name__)

ALPHA = 0.05  # a false rollback's probability over one model's whole watch, at most
LIVE_REGRESSION = "live_regression"


def watch(
    plugin: JudgedPlugin,
    request: TrainRequest,
    pointer: ServedPointer,
    served_now: RecordLosses,
    score: Callable[[Path, Collection[str]], RecordLosses | None],
) -> dict[str, Any] | None:
    """Score the new records (module docstring), update the figures, roll back on a
    regression. ``served_now``: the served model's losses on the current records;
    ``score(checkpoint, only)``: the plugin's losses of a checkpoint on the records whose
    ids are ``only`` (at least those), or None (logged) when it cannot score it. Returns
    the report (the run's ``live``), or None when there is nothing to watch: no
    predecessor, a model whose known records are not kept, or no new record."""
    folder = Path(request.checkpoint_dir)
    if not pointer.history:
        return None
    served_c = (folder / str(pointer.served.checkpoint)).parent
    previous = pointer.history[0]
    known = [stores.read_known_ids(c) for c in (served_c, _candidate(folder, previous))]
    if known[0] is None or known[1] is None:
        name = getattr(plugin, "name", "agent")
        logger.warning("%s: live watch off: a model's known records are not kept", name)
        return None
    store = stores.watch_path(served_c, str(previous.id))
    kept = stores.read_watch(store)
    ids = served_now.id_hashes
    new = ~stores.known(ids, known[0]) & ~stores.known(ids, known[1])
    new &= ~stores.known(ids, np.sort(kept["ids"]))
    if not new.any():
        return None
    before = score(
        folder / str(previous.checkpoint), [served_now.ids[i] for i in np.flatnonzero(new)]
    )
    if before is None:
        return None
    # The watch watches the primary loss column (contract.judging: RecordLosses.primary).
    by_id = dict(zip(before.ids, before.column(served_now.primary), strict=True))
    now = served_now.column()
    picked = [i for i in np.flatnonzero(new) if served_now.ids[i] in by_id]
    named = served_now.segments
    scored = {
        "ids": ids[picked],
        "served": np.array([now[i] for i in picked], dtype=np.float64),
        "previous": np.array([by_id[served_now.ids[i]] for i in picked], dtype=np.float64),
        "segments": np.array(
            ["" if named is None else named[i][: stores.SEGMENT_CHARS] for i in picked], dtype=str
        ),
    }
    kept = {k: np.concatenate([kept[k], scored[k]]) for k in stores.WATCH_ARRAYS}
    stores.write_watch(store, kept)
    figures = figures_of(kept, float(plugin.loss_span), plugin, served_now.primary)
    figures.update(against=previous.id, new_records=len(picked))
    name = str(getattr(plugin, "name", request.agent))
    return decide(folder, name, str(pointer.served.id), figures, _detail)


def _candidate(folder: Path, entry: ServedEntry) -> Path:
    return (folder / str(entry.checkpoint)).parent


def figures_of(
    kept: Mapping[str, np.ndarray], span: float, plugin: object, metric: str = "loss"
) -> dict[str, Any]:
    """The running figures of a watch's records (in arrival order), of loss column
    ``metric`` (its margin is that column's)."""
    served = np.clip(np.asarray(kept["served"], dtype=np.float64), 0.0, span)
    previous = np.clip(np.asarray(kept["previous"], dtype=np.float64), 0.0, span)
    margin = judging_margin(plugin, float(previous.mean()) if len(previous) else 0.0, metric)
    d = served - previous
    # Each record's segment (se_darwin: its Genesis agent): the overall test at ALPHA / 2
    # and each segment's beside it; none declared: one segment, the overall test at ALPHA.
    names = _segment_names(kept.get("segments"))
    judged = judge(d, names, span, margin, ALPHA)
    return {
        "score": "loss",
        "metric": metric,
        "records": judged["records"],
        "served_loss": round(float(served.mean()), 6) if len(served) else None,
        "previous_loss": round(float(previous.mean()), 6) if len(previous) else None,
        "difference": judged["difference"] if len(d) else float("nan"),
        "lower": judged["lower"],
        "upper": judged["upper"],
        "margin": margin,
        "alpha": ALPHA,
        "span": span,
        "evidence": judged["evidence"],
        "records_needed": judged["records_needed"],
        "segments": judged["segments"],
        "self_test": self_test(d, names, span, margin, ALPHA, seed=len(d)),
        "regression": judged["regression"],
    }


def _segment_names(segments: np.ndarray | None) -> np.ndarray | None:
    """The records' segment names for the test, None when no record has one; a record
    kept before segments were (an older store), ``(unsegmented)``."""
    if segments is None or not len(segments) or not (segments != "").any():
        return None
    return np.where(segments == "", "(unsegmented)", segments)


def decide(
    folder: Path,
    agent: str,
    watched: str,
    figures: dict[str, Any],
    detail: Callable[[Mapping[str, Any]], str],
) -> dict[str, Any]:
    """A watch's decision, for both watches (this one and the retrain recipe's): write the
    figures into the pointer, or roll back, under the pointer's lock and only while the
    model watched is still the one served (an operator may have changed it meanwhile: then
    nothing is written). ``detail``: the rollback's one-line reason, from the figures."""
    figures = {**figures, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
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
            verdict = {"reason": LIVE_REGRESSION, "live": figures, "detail": detail(figures)}
            try:
                now = rollback(folder, verdict=verdict)
            except ServedPointerError as exc:  # its predecessor's checkpoint is gone
                report["held"] = str(exc)
            else:
                logger.warning(
                    "%s: served model %s rolled back to %s: %s",
                    agent,
                    watched,
                    now.id,
                    detail(figures),
                )
                return {**report, "rolled_back": True, "now_served": now.id}

        def add(pointer: ServedPointer | None) -> ServedPointer | None:
            if pointer is None:
                return None
            # replace(): the pointer's journal and sequence go with it, untouched
            return replace(pointer, served=msgspec.structs.replace(pointer.served, live=figures))

        update_pointer(folder, add)
    if figures["regression"]:
        logger.warning("%s: live regression of %s held: %s", agent, watched, report["held"])
    return report


def _detail(figures: Mapping[str, Any]) -> str:
    return (
        f"live regression: {figures['metric']} {figures['served_loss']:.6g} vs its "
        f"predecessor's {figures['previous_loss']:.6g} on {figures['records']} later "
        f"record(s), at least {figures['lower']:.6g} worse (anytime, "
        f"{1 - figures['alpha']:.0%}), margin "
        f"{figures['margin']:.6g}"
    )
