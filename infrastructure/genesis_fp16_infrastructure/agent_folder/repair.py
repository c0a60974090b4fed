"""Repairs of the served-model pointer: one that cannot be followed (unreadable, another
version, naming a checkpoint that is gone) is never guessed past: :func:`set_aside_unusable`
renames it ``served.json.unusable-<time>``, every reader refuses in one line, and the
operator's ``model promote AGENT ID`` (:func:`serve_by_hand`) or ``model rollback AGENT``
(:func:`roll_back_by_hand`) writes a new one, from what the unusable one still says
(:func:`repairable_pointer`) or the candidates' own records
(:func:`~genesis_fp16_infrastructure.agent_folder.candidates.promoted_candidates`).
Each is one atomic replace of the pointer, under its lock, as every transition's.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.candidates import promoted_candidates, utc_now
from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Pin, ServedEntry, Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    aside_path,
    checkpoint_of,
    parse_pointer,
    pointer_lock,
    read_pointer,
    served_checkpoint,
)
from genesis_fp16_infrastructure.agent_folder.transaction import (
    Transaction,
    journaled,
    transaction,
)
from genesis_fp16_infrastructure.errors import ServedPointerError

logger = logging.getLogger(__name__)


def set_aside_unusable(folder: Path) -> tuple[str | None, Path | None]:
    """Check the pointer as every loader reads it; an unreadable, wrong-version or dangling
    one is renamed ``served.json.unusable-<time>`` (under the lock): no reader guesses, a
    repair starts clean. Returns (why it is unusable, where it was set aside now): (None,
    None) when usable or absent; (why, None) when set aside before, not repaired since."""
    with pointer_lock(folder):
        try:
            served_checkpoint(folder)
            return None, None
        except ServedPointerError as exc:
            why = str(exc)
        path = SERVED_POINTER.at(folder)
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
    except ServedPointerError:  # the file there failed this same read: the one set aside
        aside = aside_path(folder)
    try:
        return parse_pointer(aside) if aside.is_file() else None
    except ServedPointerError:
        return None


def serve_by_hand(folder: Path, entry: ServedEntry, pin: Pin) -> bool:
    """``model promote``: serve ``entry`` and pin it, over a usable pointer or in place of
    an unusable one (set aside; a dangling one's history is kept). True: it repaired one."""
    with transaction(folder, unusable_ok=True) as tx:
        if not _intact(folder, entry):  # pruned since the command found it, before this lock
            raise ServedPointerError(f"no candidate {entry.id!r} with its checkpoint any more")
        current, usable = _current(tx)
        if usable:
            tx.serve(entry, "manual", pin=pin)
            return False
        _set_aside_if_there(folder)
        earlier = [] if current is None else [current.served, *current.history]
        history = [e for e in earlier if e.id != entry.id and _intact(folder, e)]
        served = msgspec.structs.replace(entry, how="manual", served_at=utc_now())
        tx.stage(journaled(current, ServedPointer(served, history, pin), "repair"))
        return True


def roll_back_by_hand(folder: Path, pin: Pin) -> tuple[ServedEntry, bool]:
    """``model rollback``: serve the model served before, pinned; returns its entry and
    whether it repaired an unusable pointer (then: the old history's first intact model,
    else the newest candidate the gate promoted, the one most likely served before)."""
    with transaction(folder, unusable_ok=True) as tx:
        current, usable = _current(tx)
        if usable:
            return tx.rollback(pin, Verdict(reason="operator")), False
        choices = [] if current is None else [e for e in current.history if _intact(folder, e)]
        if not choices:
            gone = current.served.id if current is not None else None
            choices = [e for e in promoted_candidates(folder) if e.id != gone]
        if not choices:
            raise ServedPointerError(
                f"{str(folder)!r}: the served-model pointer is unusable and no promoted "
                "candidate with its checkpoint is kept: `genesis-fp16 model list` shows "
                "what is, `genesis-fp16 model promote AGENT ID` serves one"
            )
        _set_aside_if_there(folder)
        served = msgspec.structs.replace(choices[0], how="rollback", served_at=utc_now())
        tx.stage(journaled(current, ServedPointer(served, choices[1:], pin), "repair"))
        return served, True


def _current(tx: Transaction) -> tuple[ServedPointer | None, bool]:
    """The pointer as a repair sees it, and whether it is usable (None and True: none yet)."""
    pointer = tx.before  # read once, by the transaction
    try:
        if tx.unusable is not None:
            raise tx.unusable
        if pointer is not None:
            checkpoint_of(tx.folder, pointer)  # ServedPointerError: its checkpoint is gone
        return pointer, True
    except ServedPointerError:
        return repairable_pointer(tx.folder), False


def _set_aside_if_there(folder: Path) -> None:
    """Keep the unusable pointer for the post-mortem before a repair replaces it: a copy
    (the pointer stays until the repair's one atomic replace: a kill between leaves the
    state before); a folder, FIFO or link at its name is moved, as any in a write's way."""
    path = SERVED_POINTER.at(folder)
    why = f"{path}: replaced by the operator's repair"
    try:
        data = files.read_bytes(path, SERVED_POINTER.limit)
    except UnusableStateFile:
        files.set_aside(path, SERVED_POINTER, why)
        return
    if data is not None:
        copy = files.free_aside_path(path)  # a name of its own: never over earlier evidence
        files.write_bytes(copy, SERVED_POINTER, data)
        files.bound_asides(Path(folder))
        logger.warning("unusable served-model pointer copied to %s: %s", copy, why)


def _intact(folder: Path, entry: ServedEntry) -> bool:
    return (Path(folder) / (entry.checkpoint or "-")).is_file()
