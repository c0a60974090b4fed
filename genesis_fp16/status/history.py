"""An agent's memory on the status page: its recent runs, the served model's transitions
and what the page says of its precision, quarantined records and drift.

Read from the state folder, bounded, each source on its own:

- the run history (agent_folder/run_records.py): the last CHART_RUNS runs, with
  the gate's scores, loss scale, skipped steps, demotions, drift and live figures;
- the served pointer's journal (agent_folder/transitions.py): its last transitions
  (promotions, rollbacks, repairs), each with the served model's score where the
  pointer or the runs know it; the pointer's ``live``: the watch's running figures now;
- the quarantine folder: the newest file's name (a scan of at most QUARANTINE_SCAN
  entries; the daemon keeps 20).

A source that cannot be read is a problem line on the page; its part stays empty::

    history, problems = gather_history(folder, pointer)
    history.runs[-1].run.outcome      # the newest run's, when one was recorded
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis_fp16.metrics.recent_verdicts import HISTORY_LINES, RecentVerdicts
from genesis_fp16.metrics.watch_state import stamp_seconds
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    LiveMark,
    Outcome,
    RunEntry,
    ServedPointer,
    UnusableStateFile,
    text,
)

CHART_RUNS = HISTORY_LINES  # the runs the charts draw (the history keeps more)
TABLE_RUNS = 10  # the runs the page lists
QUARANTINE_SCAN = 200
# The journal's kinds of a transition that served a new model (serve's ``how``; an older
# release wrote the outcome's word).
PROMOTIONS = ("first", "gate", Outcome.PROMOTED, "manual", "adopted")


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
    live_at: float | None = None
    quarantine_file: str | None = None
    unreadable: int = 0
    # The gate's verdicts on the last judged runs, oldest first (metrics/recent_verdicts.py)
    verdicts: tuple[str, ...] = ()


# The last history built per agent folder, by what it was built from (the history file's
# and the quarantine folder's stat, the pointer's parts it reads): a page asked for again
# with nothing changed reads no history line again, and draws nothing again (render.py
# keeps the drawing by the history object). Bounded: cleared past CACHE_AGENTS folders.
CACHE_AGENTS = 256
_CACHE: dict[str, tuple[tuple[Any, ...], AgentHistory, tuple[str, ...]]] = {}


def gather_history(
    folder: AgentFolder, pointer: ServedPointer | None
) -> tuple[AgentHistory, list[str]]:
    """The agent's history, from its folder and the pointer as already read (None when
    there is none or it is unusable); and its problems. The same object as the last
    call's for the folder when nothing it reads changed."""
    key = _source_key(folder, pointer)  # each stat taken before its file is read
    cached = _CACHE.get(str(folder.root))
    if cached is not None and cached[0] == key:
        return cached[1], list(cached[2])
    history, problems = _build_history(folder, pointer)
    if len(_CACHE) >= CACHE_AGENTS:
        _CACHE.clear()
    _CACHE[str(folder.root)] = (key, history, tuple(problems))
    return history, problems


def _source_key(folder: AgentFolder, pointer: ServedPointer | None) -> tuple[Any, ...]:
    """What a history is built from, in a form that changes when any of it does: the
    history file's and the quarantine folder's identity, size and time (an append
    changes the size, a compaction the inode, a new quarantine file the folder's time),
    and the pointer's journal number and served entry (its live figures change alone)."""
    return (
        _stat_key(folder.history_path),
        _stat_key(folder.quarantine_dir),
        None if pointer is None else (pointer.sequence, repr(pointer.served)),
    )


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _build_history(
    folder: AgentFolder, pointer: ServedPointer | None
) -> tuple[AgentHistory, list[str]]:
    problems: list[str] = []
    try:
        found = folder.history(CHART_RUNS)
        runs, unreadable = found.entries, found.unreadable
    except UnusableStateFile as exc:
        runs, unreadable = (), 0
        problems.append(f"run history unreadable: {exc}")
    if unreadable:
        problems.append(f"run history: {unreadable} line(s) unreadable, skipped")
    metric, metric_set = _metric(runs, pointer)
    scores = _scores_by_id(pointer, runs, metric)
    live = None if pointer is None else pointer.served.live  # the watch's figures now
    history = AgentHistory(
        runs=runs,
        transitions=_transitions(pointer, scores),
        metric=metric,
        metric_set=metric_set,
        live_now=None if live is None else LiveMark.of(live.figures_json()),
        live_at=None if live is None else stamp_seconds(live.updated_at),
        quarantine_file=_newest_quarantine(folder),
        unreadable=unreadable,
        verdicts=RecentVerdicts.of_history(runs).verdicts,
    )
    return history, problems


def _metric(
    runs: tuple[RunEntry, ...], pointer: ServedPointer | None
) -> tuple[str | None, str | None]:
    """The score the agent's models are told by and on which set: the newest gate's,
    else the pointer's."""
    for entry in reversed(runs):
        if entry.gate is not None and entry.gate.primary is not None:
            return entry.gate.primary, entry.gate.set
    scores = None if pointer is None else pointer.served.scores
    return (next(iter(scores.figures()), None), text(scores.name)) if scores else (None, None)


def _scores_by_id(
    pointer: ServedPointer | None, runs: tuple[RunEntry, ...], metric: str | None
) -> dict[str, float]:
    """Each model's score where known: the runs' gates, then the pointer's entries and
    the journal's verdicts (the newer the source, the later it is written)."""
    scores: dict[str, float] = {}
    for gate in (entry.gate for entry in runs if entry.gate is not None):
        for ident, side in ((gate.candidate_id, gate.candidate), (gate.served_id, gate.served)):
            if ident is not None and (metric or "") in side:
                scores[ident] = side[metric or ""]
    entries = [] if pointer is None else [pointer.served, *pointer.history][:32]
    for item in entries:
        value = None if item.scores is None else item.scores.figures().get(metric or "")
        if value is not None:
            scores[str(item.id)] = value
    return scores


def _transitions(pointer: ServedPointer | None, scores: dict[str, float]) -> tuple[Transition, ...]:
    """The journal's changes of the served model (trims and unpins change none; an entry
    a hand made unreadable, the pointer's read left out)."""
    found = []
    for entry in [] if pointer is None else pointer.journal[-64:]:
        at = entry.at_s
        if entry.kind in ("trim", "unpin") or at is None or not math.isfinite(at):
            continue
        found.append(
            Transition(
                at=at,
                kind=entry.kind or "unknown",
                served=text(entry.served),
                dropped=text(entry.dropped),
                reason=text(entry.reason),
                score=None if entry.served is None else scores.get(entry.served),
            )
        )
    return tuple(found)


def _newest_quarantine(folder: AgentFolder) -> str | None:
    """The newest quarantine file's path (files are named by their UTC time), from at
    most QUARANTINE_SCAN entries of the folder; None when there is none."""
    newest = None
    try:
        with os.scandir(folder.quarantine_dir) as entries:
            for index, entry in enumerate(entries):
                if index >= QUARANTINE_SCAN:
                    break
                if entry.name.endswith(".jsonl") and (newest is None or entry.name > newest):
                    newest = entry.name
    except OSError:  # no folder yet, or not ours to list
        return None
    return None if newest is None else text(str(folder.quarantine_dir / newest))


def last_drift(runs: tuple[RunEntry, ...]) -> tuple[float, str] | None:
    """The newest run's drift warning and when (None: no run flagged drift)."""
    for entry in reversed(runs):
        if entry.drift is not None:
            return entry.run.finished_at, entry.drift
    return None
