"""Repairs of the served-model pointer, and the operator's pin.

A pointer that cannot be followed (unreadable, another version, naming a checkpoint that
is gone) is never guessed past: :func:`set_aside_unusable` renames it
``served.json.unusable``, every reader then refuses in one line naming the repair, and
``genesis-fp16 model promote AGENT ID`` or ``model rollback AGENT`` writes a new one from
the candidates' own records (:func:`repairable_pointer`, :func:`promoted_candidates`).

A manual ``promote`` or ``rollback`` pins the served model (:func:`operator_pin`): the
daemon's gate then holds a better candidate (verdict ``held``) instead of serving it, until
``model unpin`` (:func:`unpin`).

>>> why, moved = set_aside_unusable(folder)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.served_pointer import (
    ServedPointer,
    ServedPointerError,
    aside_path,
    parse_pointer,
    pointer_path,
    read_pointer,
    served_checkpoint,
    write_pointer,
)
from genesis_fp16_infrastructure.recipes.retrain.served import (
    VERDICT_NAME,
    candidate_entry,
    list_candidates,
    newest_checkpoint,
    pointer_lock,
    read_json,
    rollback,
    serve,
    update_pointer,
)


def operator_pin(command: str) -> dict[str, Any]:
    """The pin an operator's command sets: which command, and when (UTC)."""
    return {"by": command, "at": _now()}


def unpin(folder: Path) -> ServedPointer | None:
    """Drop the operator's pin (the daemon's gate may replace the served model again);
    returns the pointer as it now stands (None: nothing served)."""

    def change(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or current.pinned is None:
            return current
        return replace(current, pinned=None)

    return update_pointer(folder, change)


def serve_unless_pinned(folder: Path, entry: dict[str, Any], how: str) -> bool:
    """The gate's promotion: serve ``entry`` unless the pointer is pinned *now* (an
    operator's ``model promote`` that landed while the candidate trained wins). True:
    served; False: held by the pin."""
    return serve(folder, entry, how, unless_pinned=True)  # one read, under the lock


def set_aside_unusable(folder: Path) -> tuple[str | None, Path | None]:
    """Check the pointer the way every loader reads it; an unreadable, wrong-version or
    dangling one is renamed ``served.json.unusable`` (under the pointer's lock), so that
    no reader guesses and a repair starts clean. Returns (why it is unusable, where it
    was set aside now): (None, None) when usable or absent; (why, None) when it was set
    aside before and not repaired since."""
    with pointer_lock(folder):
        try:
            served_checkpoint(folder)
            return None, None
        except ServedPointerError as exc:
            why = str(exc)
        path = pointer_path(folder)
        if not path.exists() and not path.is_symlink():
            return why, None
        moved = files.set_aside(path, SERVED_POINTER, why)  # a folder or link: moved, not followed
        if moved.aside is None:
            raise OSError(moved.why)
        return why, moved.aside


def repairable_pointer(folder: Path) -> ServedPointer | None:
    """The pointer for a repair: the usable one; else what the unusable one still says
    (a dangling pointer keeps its history); else None (rebuilt from candidates)."""
    try:
        return read_pointer(folder)
    except ServedPointerError:
        pass
    for path in (pointer_path(folder), aside_path(folder)):
        try:
            if path.is_file():
                return parse_pointer(path)
        except ServedPointerError:
            continue
    return None


def promoted_candidates(folder: Path) -> list[dict[str, Any]]:
    """Pointer entries of the candidates the gate promoted whose checkpoint is intact,
    newest decision first: what a repair rebuilds the served model and history from."""
    found = []
    for candidate in list_candidates(folder):
        verdict = read_json(candidate / VERDICT_NAME) or {}
        checkpoint = newest_checkpoint(candidate)
        if verdict.get("outcome") != "promoted" or checkpoint is None:
            continue
        found.append((float(verdict.get("decided_at_s") or 0.0), served_entry(folder, candidate)))
    return [entry for _, entry in sorted(found, key=lambda pair: -pair[0]) if entry is not None]


def served_entry(folder: Path, candidate: Path) -> dict[str, Any] | None:
    """A kept candidate's pointer entry, from its own records: the checkpoint its verdict
    names (the newest file where the verdict names none: written before it did), and for
    final_fit=whole the split run's model the gate judged. None: it holds no checkpoint."""
    verdict = read_json(Path(candidate) / VERDICT_NAME) or {}
    named = Path(candidate) / str(verdict.get("checkpoint") or "-")
    checkpoint = named if named.is_file() else newest_checkpoint(candidate)
    if checkpoint is None:
        return None
    entry = candidate_entry(folder, candidate, checkpoint)
    split = Path(candidate) / "split"
    judged = newest_checkpoint(split) if split.is_dir() else None
    if judged is not None:
        entry["judged"] = str(judged.resolve().relative_to(Path(folder).resolve()))
    return entry


def serve_by_hand(folder: Path, entry: dict[str, Any], pin: dict[str, Any]) -> bool:
    """``model promote``: serve ``entry`` and pin it, over a usable pointer or in place of
    an unusable one (set aside; a dangling one's history is kept). True: it repaired one."""
    with pointer_lock(folder):
        current, usable = _current(folder)
        if usable:
            serve(folder, entry, "manual", pin=pin)
            return False
        _set_aside_if_there(folder)
        earlier = [] if current is None else [current.served, *current.history]
        history = [e for e in earlier if e.get("id") != entry.get("id") and _intact(folder, e)]
        served = {**entry, "how": "manual", "served_at": _now()}
        write_pointer(folder, ServedPointer(served, history, dict(pin)))
        return True


def roll_back_by_hand(folder: Path, pin: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``model rollback``: serve the model served before this one, pinned; returns its
    entry and whether it repaired an unusable pointer. Over an unusable one it serves the
    first intact model of the old pointer's history, else the newest candidate the gate
    promoted (the candidates' own records): the one most likely served before."""
    with pointer_lock(folder):
        current, usable = _current(folder)
        if usable:
            return rollback(folder, pin=pin, verdict={"reason": "operator"}), False
        choices = [] if current is None else [e for e in current.history if _intact(folder, e)]
        if not choices:
            gone = current.served.get("id") if current is not None else None
            choices = [e for e in promoted_candidates(folder) if e.get("id") != gone]
        if not choices:
            raise ServedPointerError(
                f"{str(folder)!r}: the served-model pointer is unusable and no promoted "
                "candidate with its checkpoint is kept: `genesis-fp16 model list` shows "
                "what is, `genesis-fp16 model promote AGENT ID` serves one"
            )
        _set_aside_if_there(folder)
        served = {**choices[0], "how": "rollback", "served_at": _now()}
        write_pointer(folder, ServedPointer(served, choices[1:], dict(pin)))
        return served, True


def _current(folder: Path) -> tuple[ServedPointer | None, bool]:
    """The pointer as a repair sees it, and whether it is usable (None and True: none yet)."""
    try:
        served_checkpoint(folder)
        return read_pointer(folder), True
    except ServedPointerError:
        return repairable_pointer(folder), False


def _set_aside_if_there(folder: Path) -> None:
    path = pointer_path(folder)
    if path.exists() or path.is_symlink():
        files.set_aside(path, SERVED_POINTER, f"{path}: replaced by the operator's repair")


def _intact(folder: Path, entry: dict[str, Any]) -> bool:
    return (Path(folder) / str(entry.get("checkpoint") or "-")).is_file()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
