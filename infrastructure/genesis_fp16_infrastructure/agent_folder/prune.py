"""Pruning an agent's candidates: the ones nobody may still name (neither served nor
kept in the pointer's history, nor a verdict the journal decided and its file does not
say yet) are removed, each by one rename out of ``candidates/``; the pointer's history is
trimmed to the last ``keep_served`` models (a ``trim`` transition,
:mod:`~genesis_fp16_infrastructure.agent_folder.transitions`).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, read_verdict
from genesis_fp16_infrastructure.agent_folder.files import last_write
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    Outcome,
    ServedPointer,
    Verdict,
)
from genesis_fp16_infrastructure.agent_folder.pointer import pointer_lock
from genesis_fp16_infrastructure.agent_folder.transitions import (
    disagreeing,
    journaled,
    update_pointer,
)

UNFINISHED_MIN_DAYS = 1.0  # an unfinished candidate untouched this long is pruned
# Inconclusive candidates (issue 62: judged again as records arrive) kept whatever their
# age: the newest two; an older one is pruned as a rejected one is.
INCONCLUSIVE_KEEP = 2
PRUNING_FOLDER = ".pruning"  # a candidate moved here (one rename) is removed, then or later


def prune(
    folder: Path, keep_served: int, rejected_days: float, recover_first: bool = False
) -> tuple[list[Path], ServedPointer | None]:
    """Remove candidates neither served nor among the last ``keep_served`` served:
    rejected, undecided or inconclusive ones (but the newest ``INCONCLUSIVE_KEEP``
    inconclusive) older than ``rejected_days``, unfinished ones (no verdict) untouched
    for ``rejected_days`` and ``UNFINISHED_MIN_DAYS`` (a run cut short by its timeout
    every hour must find its candidate next time). Returns what was removed, and the
    pointer as it stands after (None: nothing served), read once under the same lock:
    the daemon counts the journal from it without a second read. ``recover_first``:
    :func:`~.transitions.recover`'s work first, on that same read (the daemon's after
    each run: what the run, killed or not, left to finish)."""

    def trim(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or len(current.history) <= keep_served:
            return current
        dropped = [e.id for e in current.history[keep_served:]]
        trimmed = replace(current, history=current.history[:keep_served])
        return journaled(current, trimmed, "trim", dropped=dropped)

    with pointer_lock(folder):  # nothing served meanwhile is removed
        pointer = update_pointer(folder, trim, settle_first=recover_first)
        # What a prune killed midway left in .pruning: nobody names it.
        shutil.rmtree(Path(folder) / PRUNING_FOLDER, ignore_errors=True)
        verdicts = {c: read_verdict(c) for c in list_candidates(folder)}  # each read once
        inconclusive = [c.name for c, v in verdicts.items() if v.outcome == Outcome.INCONCLUSIVE]
        kept_ids = set(inconclusive[-INCONCLUSIVE_KEEP:])
        if pointer is not None:
            kept_ids |= {str(e.id) for e in [pointer.served, *pointer.history]}
            kept_ids |= set(disagreeing(folder, pointer))  # a verdict not yet rolled forward
        cutoff = time.time() - rejected_days * 86400
        removed = []
        for stale in Path(folder).glob(".up-to-date-*"):  # an up-to-date run killed mid-eval
            if stale.is_dir() and last_write(stale) < time.time() - UNFINISHED_MIN_DAYS * 86400:
                shutil.rmtree(stale, ignore_errors=True)
        for candidate, verdict in verdicts.items():
            if candidate.name in kept_ids or not _prunable(candidate, verdict, pointer, cutoff):
                continue
            _remove(folder, candidate)
            removed.append(candidate)
        return removed, pointer


def _prunable(
    candidate: Path, verdict: Verdict, pointer: ServedPointer | None, cutoff: float
) -> bool:
    """Whether nobody may still name ``candidate`` (neither served nor kept in history:
    the caller's check), whose verdict is ``verdict``: promoted and replaced, decided long
    ago, or unfinished and untouched. With no pointer at all a promoted one stays: a
    repair serves it again."""
    if verdict.outcome is None:  # unfinished and recent: the next run of its data resumes it
        return last_write(candidate) <= min(cutoff, time.time() - UNFINISHED_MIN_DAYS * 86400)
    if verdict.outcome == Outcome.PROMOTED:
        return pointer is not None
    return (verdict.decided_at_s or 0.0) <= cutoff  # a recent one kept for inspection


def _remove(folder: Path, candidate: Path) -> None:
    """Remove a candidate in one step that counts: its rename out of ``candidates/`` (a
    kill during the removal of its files then leaves no half candidate to list)."""
    trash = Path(folder) / PRUNING_FOLDER
    trash.mkdir(exist_ok=True)
    moved = trash / candidate.name
    shutil.rmtree(moved, ignore_errors=True)  # the same name pruned before, killed midway
    os.replace(candidate, moved)
    shutil.rmtree(moved)
