"""An agent's memory on the status page: its recent runs, the served model's transitions
and what the page says of its precision, quarantined records and drift.

Read from the state folder, bounded, each source on its own:

- the run history (genesis_fp16/metrics/run_history.py): the last CHART_RUNS runs, with
  the gate's scores, loss scale, skipped steps, demotions, drift and live figures;
- the served pointer's journal (agent_folder/lifecycle.py): its last transitions
  (promotions, rollbacks, repairs), each with the served model's score where the
  pointer or the runs know it; the pointer's ``live``: the watch's running figures now;
- the quarantine folder: the newest file's name (a scan of at most QUARANTINE_SCAN
  entries; the daemon keeps 20).

A source that cannot be read is a problem line on the page; its part stays empty::

    history, problems = gather_history(paths, pointer_data)
    history.runs[-1].run.outcome      # the newest run's, when one was recorded
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.metrics.run_history import (
    HistoryUnreadable,
    LiveMark,
    RunEntry,
    load_history,
    score_name,
    score_of,
)

CHART_RUNS = 30  # the runs the charts draw (the history keeps more)
TABLE_RUNS = 10  # the runs the page lists
QUARANTINE_SCAN = 200
# The journal's kinds of a transition that served a new model (serve's ``how``).
PROMOTIONS = ("first", "gate", "promoted", "manual", "adopted")
TEXT_CHARS = 160


@dataclass(frozen=True)
class Transition:
    """One change of the served model from the pointer's journal: when (Unix time),
    what (``promoted``, ``first``, ``manual``, ``rollback``, ``repair``), the model
    served after it, the one dropped (a rollback's), why, and the served model's score
    after it (None: not known)."""

    at: float
    kind: str
    served: str | None
    dropped: str | None = None
    reason: str | None = None
    score: float | None = None


@dataclass(frozen=True)
class AgentHistory:
    """What the page draws and lists of an agent's past: its recent runs (oldest first),
    the served model's transitions, the score name the quality figures are in, the
    live watch's figures now, the newest quarantine file, and the history's lines that
    could not be read."""

    runs: tuple[RunEntry, ...] = ()
    transitions: tuple[Transition, ...] = ()
    metric: str | None = None
    metric_set: str | None = None
    live_now: LiveMark | None = None
    quarantine_file: str | None = None
    unreadable: int = 0


def gather_history(paths: AgentPaths, pointer: Any) -> tuple[AgentHistory, list[str]]:
    """The agent's history, from its folder and the pointer's JSON as already read
    (``pointer``: None when there is none or it could not be read); and its problems."""
    problems: list[str] = []
    try:
        found = load_history(paths, CHART_RUNS)
        runs, unreadable = found.entries, found.unreadable
    except HistoryUnreadable as exc:
        runs, unreadable = (), 0
        problems.append(f"run history unreadable: {exc}")
    if unreadable:
        problems.append(f"run history: {unreadable} line(s) unreadable, skipped")
    pointer = pointer if isinstance(pointer, dict) else {}
    metric, metric_set = _metric(runs, pointer)
    scores = _scores_by_id(pointer, runs, metric)
    history = AgentHistory(
        runs=runs,
        transitions=_transitions(pointer, scores),
        metric=metric,
        metric_set=metric_set,
        live_now=_live_now(pointer),
        quarantine_file=_newest_quarantine(paths),
        unreadable=unreadable,
    )
    return history, problems


def _metric(runs: tuple[RunEntry, ...], pointer: dict[str, Any]) -> tuple[str | None, str | None]:
    """The score the agent's models are told by and on which set: the newest gate's,
    else the pointer's."""
    for entry in reversed(runs):
        if entry.gate is not None and entry.gate.metric is not None:
            return entry.gate.metric, entry.gate.set
    served = pointer.get("served")
    scores = served.get("scores") if isinstance(served, dict) else None
    if not isinstance(scores, dict):
        return None, None
    return score_name(scores), _text(scores.get("set"))


def _scores_by_id(
    pointer: dict[str, Any], runs: tuple[RunEntry, ...], metric: str | None
) -> dict[str, float]:
    """Each model's score where known: the runs' gates, then the pointer's entries and
    the journal's verdicts (the newer the source, the later it is written)."""
    scores: dict[str, float] = {}
    for entry in runs:
        gate = entry.gate
        if gate is not None and gate.metric == metric:
            for ident, value in (
                (gate.candidate_id, gate.candidate),
                (gate.served_id, gate.served),
            ):
                if ident is not None and value is not None:
                    scores[ident] = value
    served, history = pointer.get("served"), pointer.get("history")
    entries = [served, *(history if isinstance(history, list) else [])][:32]
    for item in entries:
        if isinstance(item, dict) and isinstance(item.get("scores"), dict):
            value = score_of(item["scores"], metric)
            if value is not None:
                scores[str(item.get("id"))] = value
    return scores


def _transitions(pointer: dict[str, Any], scores: dict[str, float]) -> tuple[Transition, ...]:
    """The journal's changes of the served model (trims and unpins change none)."""
    journal = pointer.get("journal")
    found = []
    for item in journal[-64:] if isinstance(journal, list) else []:
        if not isinstance(item, dict) or item.get("kind") in ("trim", "unpin"):
            continue
        at = item.get("at_s")
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            continue
        served = _text(item.get("served"))
        found.append(
            Transition(
                at=float(at),
                kind=_text(item.get("kind")) or "unknown",
                served=served,
                dropped=_text(item.get("dropped")),
                reason=_text(item.get("reason")),
                score=None if served is None else scores.get(served),
            )
        )
    return tuple(found)


def _live_now(pointer: dict[str, Any]) -> LiveMark | None:
    """The live watch's running figures in the served entry (None: not watching yet)."""
    served = pointer.get("served")
    live = served.get("live") if isinstance(served, dict) else None
    if not isinstance(live, dict):
        return None
    number = _number
    records = live.get("records")
    return LiveMark(
        difference=number(live.get("difference")),
        lower=number(live.get("lower")),
        upper=number(live.get("upper")),
        margin=number(live.get("margin")),
        records=records if isinstance(records, int) and not isinstance(records, bool) else 0,
        regression=live.get("regression") is True,
        rolled_back=live.get("rolled_back") is True,
    )


def _newest_quarantine(paths: AgentPaths) -> str | None:
    """The newest quarantine file's path (files are named by their UTC time), from at
    most QUARANTINE_SCAN entries of the folder; None when there is none."""
    newest = None
    try:
        with os.scandir(paths.quarantine_dir) as entries:
            for index, entry in enumerate(entries):
                if index >= QUARANTINE_SCAN:
                    break
                if entry.name.endswith(".jsonl") and (newest is None or entry.name > newest):
                    newest = entry.name
    except OSError:  # no folder yet, or not ours to list
        return None
    return None if newest is None else _text(str(paths.quarantine_dir / newest))


def last_drift(runs: tuple[RunEntry, ...]) -> tuple[float, str] | None:
    """The newest run's drift warning and when (None: no run flagged drift)."""
    for entry in reversed(runs):
        if entry.drift is not None:
            return entry.run.finished_at, entry.drift
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"
