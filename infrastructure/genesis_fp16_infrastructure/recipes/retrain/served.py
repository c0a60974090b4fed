"""The served model: a pointer file naming one candidate's checkpoint, never "the newest file".

An agent's checkpoint folder holds every model it trained, each in a folder of its own,
and one pointer that says which of them Genesis uses::

    <checkpoint_dir>/
        served.json                  {"served": {...}, "history": [{...}, ...]}
        candidates/<id>/             one training run's checkpoints
            candidate.json           its data (digest, records) and request, when it began
            verdict.json             the gate's verdict: promoted, rejected or undecided
            ckpt-0000000120.pt ...

A candidate trains in its own folder; the pointer changes only when one is promoted, and
is rewritten atomically (:func:`~genesis_fp16_infrastructure.agent_folder.files.write_json`:
a reader finds the old pointer or the new one, never none), by one writer at a time:
every read-and-write-back holds ``served.json.lock`` (:func:`update_pointer`), so an
operator's ``model promote`` racing the daemon's promotion or pruning is never undone.
``history`` keeps the models served before, newest first, for ``genesis-fp16 model
rollback``.

This module reads and writes JSON only (no torch): the daemon's up-to-date check and the
``model`` command use it without importing torch.

>>> pointer = read_pointer(folder)  # doctest: +SKIP
>>> pointer.served["id"], served_checkpoint(folder)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CANDIDATE_META as CANDIDATE_META_FILE
from genesis_fp16_infrastructure.agent_folder.layout import POINTER_LOCK as POINTER_LOCK_FILE
from genesis_fp16_infrastructure.agent_folder.layout import (
    VERDICT,
)
from genesis_fp16_infrastructure.agent_folder.lock import take_lock
from genesis_fp16_infrastructure.agent_folder.served_pointer import (
    ServedPointer,
    ServedPointerError,
    candidates_dir,
    read_pointer,
    write_pointer,
)

POINTER_LOCK = POINTER_LOCK_FILE.name  # the flock every writer of the pointer holds
CANDIDATE_META = CANDIDATE_META_FILE.name
VERDICT_NAME = VERDICT.name
UNFINISHED_MIN_DAYS = 1.0  # an unfinished candidate untouched this long is pruned
_CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")  # CheckpointManager's, without torch


# One writer at a time: an flock conflicts between two descriptors even in one process, so
# threads of one process (the daemon's jobs) are ordered by a process lock first, and a
# thread that holds the pointer's lock may take it again (prune holds it around update).
_THREAD_LOCK = threading.RLock()
_HELD: dict[str, int] = {}  # lock file -> depth, only touched under _THREAD_LOCK


@contextmanager
def pointer_lock(folder: Path) -> Iterator[None]:
    """Hold the pointer's lock (``served.json.lock``) until the block ends: every reader
    that writes the pointer back (promotion, rollback, the live watch, pruning, the
    operator's ``model`` commands) does so inside it, so no update is lost. Blocking: the
    holders keep it for one small read and write. The kernel drops it with its holder;
    the same thread may nest it."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    key = str((Path(folder) / POINTER_LOCK).resolve())
    with _THREAD_LOCK:
        if _HELD.get(key):
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        fd = take_lock(Path(key), POINTER_LOCK_FILE)
        try:
            _HELD[key] = 1
            yield
        finally:
            _HELD.pop(key, None)
            os.close(fd)  # closing the descriptor drops the flock


PointerChange = Callable[[ServedPointer | None], ServedPointer | None]


def update_pointer(folder: Path, change: PointerChange) -> ServedPointer | None:
    """Read the pointer, apply ``change`` and write what it returns, all under
    :func:`pointer_lock`. ``change`` gets the current pointer (None: none yet) and returns
    the new one, or the same object (or None) to leave the file untouched; it may raise
    :class:`ServedPointerError` to refuse. Returns the pointer as it now stands."""
    with pointer_lock(folder):
        current = read_pointer(folder)
        new = change(current)
        if new is not None and new is not current:
            write_pointer(folder, new)
            return new
        return current


def serve(
    folder: Path,
    entry: Mapping[str, Any],
    how: str,
    keep: int | None = None,
    pin: Mapping[str, Any] | None = None,
    unless_pinned: bool = False,
) -> bool:
    """Make ``entry`` (a candidate's, see :func:`candidate_entry`) the served model; the
    model served until now goes first in the history, which keeps ``keep`` entries.
    ``pin``: the operator's pin to set (None keeps the pointer's pin as it is);
    ``unless_pinned``: leave a pinned pointer as it is (one read under the lock decides).
    Returns whether ``entry`` is served now."""
    held = False

    def change(current: ServedPointer | None) -> ServedPointer | None:
        nonlocal held
        if unless_pinned and current is not None and current.pinned is not None:
            held = True
            return current
        history = [] if current is None else [current.served, *current.history]
        history = [h for h in history if h.get("id") != entry.get("id")]
        if keep is not None:
            history = history[:keep]
        served = {**entry, "how": how, "served_at": _now()}
        pinned = dict(pin) if pin is not None else (current.pinned if current else None)
        return ServedPointer(served, history, pinned)

    update_pointer(folder, change)
    return not held


def rollback(
    folder: Path,
    pin: Mapping[str, Any] | None = None,
    verdict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Serve the model served before the current one again; returns its entry. ``pin``: as
    in :func:`serve`. The model rolled back from gets the verdict ``rolled_back``, with
    ``verdict``'s keys (a reason and its figures) added."""
    dropped: dict[str, Any] = {}

    def change(current: ServedPointer | None) -> ServedPointer:
        if current is None:
            raise ServedPointerError(f"{str(folder)!r} serves no model yet: nothing to roll back")
        if not current.history:
            raise ServedPointerError(
                f"{str(folder)!r} serves {current.served.get('id')!r} and kept no earlier model"
            )
        previous = current.history[0]
        if not (Path(folder) / previous["checkpoint"]).is_file():
            raise ServedPointerError(
                f"the earlier model's checkpoint {previous['checkpoint']!r} is gone"
            )
        dropped.update(current.served)
        served = {**previous, "how": "rollback", "served_at": _now()}
        pinned = dict(pin) if pin is not None else current.pinned
        return ServedPointer(served, current.history[1:], pinned)

    after = update_pointer(folder, change)
    assert after is not None  # change() raises or returns a pointer
    # The model rolled back from is kept like a rejected candidate (inspection, pruning),
    # and the same data does not train it again (retrain.freshness).
    candidate = (Path(folder) / dropped["checkpoint"]).parent
    if (candidate / CANDIDATE_META).is_file():
        old = read_json(candidate / VERDICT_NAME) or {}
        gate_outcome = old.get("gate_outcome", old.get("outcome"))  # what the gate said
        write_verdict(
            candidate,
            {**old, **(verdict or {}), "outcome": "rolled_back", "gate_outcome": gate_outcome},
        )
    return after.served


# Candidates -----------------------------------------------------------------------------


def new_candidate(folder: Path, meta: Mapping[str, Any], shared: str | None = None) -> Path:
    """A fresh candidate folder named by the UTC time and the data digest, with its meta.

    ``shared``: the name every rank of one torchrun job derives alike (they must train
    into one folder); the folder is made by whichever rank comes first, its meta kept."""
    if shared is not None:
        path = candidates_dir(folder) / shared
        path.mkdir(parents=True, exist_ok=True)
        if not (path / CANDIDATE_META).is_file():
            files.write_json(
                path / CANDIDATE_META,
                CANDIDATE_META_FILE,
                {**meta, "id": shared, "created_at": _now()},
            )
        return path
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    digest = str(meta.get("fingerprint", ""))[:8] or "nodata"
    base = candidates_dir(folder) / f"{stamp}-{digest}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    meta = {**meta, "id": path.name, "created_at": _now()}
    files.write_json(path / CANDIDATE_META, CANDIDATE_META_FILE, meta)
    return path


def list_candidates(folder: Path) -> list[Path]:
    """Every candidate folder, oldest first (by the time in its meta, then its name)."""
    root = candidates_dir(folder)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and os.path.lexists(p / CANDIDATE_META)]
    # An unusable meta is set aside (reported) as it is read; its candidate stays listed.
    created = {p: str((read_json(p / CANDIDATE_META) or {}).get("created_at")) for p in found}
    return sorted(found, key=lambda p: (created[p], p.name))


def read_json(path: Path) -> dict[str, Any] | None:
    """A candidate's meta or verdict (``path``'s name says which); None when absent, or
    unusable: set aside as ``<name>.unusable`` and reported (agent_folder.files)."""
    file = {VERDICT_NAME: VERDICT, CANDIDATE_META: CANDIDATE_META_FILE}[Path(path).name]
    return files.load(path, file, _a_dict)


def _a_dict(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TypeError(f"a JSON {type(data).__name__}, not an object")
    return data


def write_verdict(candidate: Path, verdict: Mapping[str, Any]) -> None:
    stamp = {"decided_at": _now(), "decided_at_s": time.time()}
    files.write_json(Path(candidate) / VERDICT_NAME, VERDICT, {**verdict, **stamp})


def newest_checkpoint(candidate: Path) -> Path | None:
    """The candidate's last checkpoint file (its served weights inside), or None."""
    names = sorted(p.name for p in Path(candidate).iterdir() if _CHECKPOINT_NAME.match(p.name))
    return Path(candidate) / names[-1] if names else None


def candidate_entry(folder: Path, candidate: Path, checkpoint: Path) -> dict[str, Any]:
    """The pointer's entry for a candidate: its id, checkpoint (relative to ``folder``),
    data, precision and gate scores, from its meta and verdict files."""
    meta = read_json(Path(candidate) / CANDIDATE_META) or {}
    verdict = read_json(Path(candidate) / VERDICT_NAME) or {}
    return {
        "id": Path(candidate).name,
        "checkpoint": str(Path(checkpoint).resolve().relative_to(Path(folder).resolve())),
        "fingerprint": meta.get("fingerprint"),
        "records": meta.get("records"),
        "precision": verdict.get("precision"),
        "scores": (verdict.get("candidate") or {}),
        "trained_at": meta.get("created_at"),
    }


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder`` (the agent's disk use, as a gauge)."""
    total = 0
    for path in Path(folder).rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue  # removed while walking (pruned, or a temp file renamed)
    return total


def prune(folder: Path, keep_served: int, rejected_days: float) -> list[Path]:
    """Remove candidates the history no longer needs: those neither served nor among the
    last ``keep_served`` served, and rejected or undecided ones older than
    ``rejected_days``, and unfinished ones (no verdict: a run cut short, then its data
    changed, so nothing resumes it) untouched for ``rejected_days`` and at least
    ``UNFINISHED_MIN_DAYS``: a run cut short by its timeout every hour writes to its
    candidate every hour, and must find it there next time. The served one is never
    removed. Returns what was removed."""
    with pointer_lock(folder):  # nothing served meanwhile is removed
        return _prune_locked(folder, keep_served, rejected_days)


def _prune_locked(folder: Path, keep_served: int, rejected_days: float) -> list[Path]:
    def trim(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or len(current.history) <= keep_served:
            return current
        return replace(current, history=current.history[:keep_served])

    pointer = update_pointer(folder, trim)
    kept_ids: set[str] = set()
    if pointer is not None:
        kept_ids = {str(e.get("id")) for e in [pointer.served, *pointer.history]}
    cutoff = time.time() - rejected_days * 86400
    removed = []
    for stale in Path(folder).glob(".up-to-date-*"):  # an up-to-date run killed mid-eval
        if stale.is_dir() and _last_write(stale) < time.time() - UNFINISHED_MIN_DAYS * 86400:
            shutil.rmtree(stale, ignore_errors=True)
    for candidate in list_candidates(folder):
        verdict = read_json(candidate / VERDICT_NAME)
        if candidate.name in kept_ids:
            continue
        if verdict is None:
            if _last_write(candidate) > min(cutoff, time.time() - UNFINISHED_MIN_DAYS * 86400):
                continue  # unfinished and recent: the next run of its data resumes it
            shutil.rmtree(candidate)
            removed.append(candidate)
            continue
        if verdict.get("outcome") != "promoted" and float(verdict.get("decided_at_s", 0)) > cutoff:
            continue  # a recent rejection, kept for inspection
        shutil.rmtree(candidate)
        removed.append(candidate)
    return removed


def _last_write(folder: Path) -> float:
    """The newest modification time of the folder or anything in it."""
    times = [folder.stat().st_mtime]
    times += [path.stat().st_mtime for path in folder.rglob("*") if path.is_file()]
    return max(times)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
