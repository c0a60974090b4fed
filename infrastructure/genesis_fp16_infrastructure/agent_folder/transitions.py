"""The served model's transitions: serve, roll back, pin, unpin, and the journal that
carries each, all under the pointer's one lock. No agent is named here: the daemon, the
operator's ``model`` command and any plugin's judged runs call these functions, and
nothing else writes the pointer. The owner is split by concern, one module each: the
pointer and its lock (:mod:`~genesis_fp16_infrastructure.agent_folder.pointer`), these
transitions and their recovery, the candidates and their pruning
(:mod:`~genesis_fp16_infrastructure.agent_folder.candidates`), and the repairs of an unusable
pointer (:mod:`~genesis_fp16_infrastructure.agent_folder.repair`); the records of
candidates and of the journal are
:mod:`~genesis_fp16_infrastructure.agent_folder.lifecycle_records`.

An agent's checkpoint folder holds every model it trained, each in a folder of its own,
and one pointer that says which of them Genesis uses::

    <checkpoint_dir>/
        served.json                  {"served": {...}, "history": [{...}, ...]}
        candidates/<id>/             one training run's checkpoints

The pointer changes only when a model is promoted, rolled back, pinned or repaired, and
is rewritten atomically (:func:`~genesis_fp16_infrastructure.agent_folder.files.write_json`:
a reader finds the old pointer or the new one, never none), by one writer at a time:
every read-and-write-back holds ``served.json.lock`` (:func:`update_pointer`), so an
operator's ``model promote`` racing the daemon's promotion or pruning is never undone.
``history`` keeps the models served before, newest first, for ``genesis-fp16 model
rollback``. A manual ``promote`` or ``rollback`` pins the served model
(:func:`operator_pin`): the daemon's gate then holds a better candidate (verdict
``held``) instead of serving it, until ``model unpin`` (:func:`unpin`).

Crash-safe: each transition's one commit point is the pointer's atomic replace, written
last, and it carries what the transition decided: a numbered ``journal`` (the last
``JOURNAL_KEEP`` transitions, ``sequence`` the newest number) holding the verdicts a
promotion or rollback gave (:func:`journaled`). The candidates' ``verdict.json`` files
follow from it (:func:`roll_forward`: at the end of the transition, at the next commit,
and at :func:`recover`, under the lock), so a kill -9 anywhere leaves the state before
or after: never a ``promoted`` verdict for a model not served, and prune keeps any
candidate whose verdict still disagrees (:func:`disagreeing`) and removes by one rename.
The daemon counts transitions from the journal's numbers, each once, reported by its run
or not; each journal entry is the transition's event too, copied to the agent's outbox in
the same way (``agent_folder.outbox``). Recovery is an explicit call (:func:`recover`)
at the points that need it; reading the pointer has no side effect.
tests/infrastructure/agent_folder/test_lifecycle_kill.py kills every write of each.

JSON only, no torch: the daemon's up-to-date check and the ``model`` command use it
without importing torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.agent_folder import files, outbox
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import CANDIDATE_META, VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    JournalEntry,
    Outcome,
    Pin,
    ServedEntry,
    Verdict,
    read_verdict,
    stamped,
    utc_now,
)
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    candidates_dir,
    pointer_lock,
    read_pointer,
    write_pointer,
)
from genesis_fp16_infrastructure.errors import ServedPointerError

# Transitions the pointer remembers: enough for the daemon to count each one between two
# of its runs (a run and a few operator commands), each entry ~1-5 KB (a gate verdict).
JOURNAL_KEEP = 16

PointerChange = Callable[[ServedPointer | None], ServedPointer | None]


def update_pointer(
    folder: Path, change: PointerChange, settle_first: bool = False
) -> ServedPointer | None:
    """Read the pointer, apply ``change`` and write what it returns, all under
    :func:`pointer_lock`. ``change`` gets the current pointer (None: none yet) and returns
    the new one, or the same object (or None) to leave the file untouched; it may raise
    :class:`ServedPointerError` to refuse. Returns the pointer as it now stands. It
    recovers nothing before unless ``settle_first`` (then :func:`recover`'s work, on the
    same one read of the pointer); its commit rolls forward and announces the whole
    journal it writes, what an earlier transition killed midway left included."""
    with pointer_lock(folder):
        current = _settle(folder) if settle_first else read_pointer(folder)
        new = change(current)
        if new is not None and new is not current:
            if current is not None and new.sequence < current.sequence:
                # Built afresh (a caller's ServedPointer(...)): the journal goes on.
                new = replace(new, sequence=current.sequence, journal=current.journal)
            commit(folder, new)
            return new
        return current


def recover(folder: Path) -> ServedPointer | None:
    """Finish, under :func:`pointer_lock`, what a writer killed midway left: the verdict
    events staged and not released (``outbox.announce_verdicts``), the verdicts the
    pointer's journal decided and the candidates do not say yet (:func:`roll_forward`),
    and the journal's events the outbox lacks. An explicit call, never a read's side
    effect: the daemon's start-up and the end of each of its runs (killed or not), the
    start of a judged run, the operator's ``model`` commands. Returns the pointer as it
    stands (None: none yet); one that cannot be read raises :class:`ServedPointerError`,
    the staged events settled first."""
    with pointer_lock(folder):
        return _settle(folder)


def _settle(folder: Path) -> ServedPointer | None:
    """:func:`recover`'s work, its caller holding the lock; the pointer read once."""
    outbox.announce_verdicts(folder)  # a killed verdict writer's event, left staged
    current = read_pointer(folder)
    if current is not None:
        roll_forward(folder, current)  # what a transition killed midway decided
        outbox.announce_journal(folder, current.journal, committed_now=False)  # likewise
    return current


def commit(folder: Path, new: ServedPointer) -> None:
    """The transition's one commit point, then its journal's verdicts and events."""
    write_pointer(folder, new)
    roll_forward(folder, new)
    outbox.announce_journal(folder, new.journal, committed_now=True)


def journaled(
    current: ServedPointer | None,
    new: ServedPointer,
    kind: str,
    verdicts: Mapping[str, Verdict] | None = None,
    dropped: str | list[str | None] | None = None,
    reason: str | None = None,
) -> ServedPointer:
    """``new`` with the transition that made it from ``current`` appended to its journal
    under the next sequence number: ``kind`` (serve's ``how``, ``rollback``, ``unpin``,
    ``trim``, ``repair``), the verdicts it decided (candidate id -> verdict, written to
    the candidates after the pointer: :func:`roll_forward`), and what a rollback or a trim
    ``dropped`` and why."""
    sequence = (current.sequence if current is not None else 0) + 1
    decided = {
        k: msgspec.structs.replace(v, journal_seq=sequence) for k, v in (verdicts or {}).items()
    }
    entry = JournalEntry(
        seq=sequence, kind=kind, at=utc_now(), at_s=time.time(), served=new.served.id,
        pinned=new.pinned, verdicts=decided, dropped=dropped, reason=reason,
    )  # fmt: skip
    earlier = current.journal if current is not None else []
    return replace(new, sequence=sequence, journal=[*earlier, entry][-JOURNAL_KEEP:])


def disagreeing(folder: Path, pointer: ServedPointer) -> dict[str, Verdict]:
    """The kept candidates whose verdict file says other than the journal decided (a
    transition killed between its pointer and its verdicts), each with the verdict the
    journal last gave it (its ``journal_seq`` set): what prune never removes and
    :func:`roll_forward` writes."""
    decided: dict[str, Verdict] = {}
    for entry in pointer.journal:
        for ident, verdict in entry.verdicts.items():
            plain = Path(ident).name == ident and ident not in ("", ".", "..")
            if plain and verdict.journal_seq is not None:
                decided[ident] = verdict  # a hand-edited one without its number: ignored
    found: dict[str, Verdict] = {}
    for ident, verdict in decided.items():
        candidate = candidates_dir(folder) / ident
        if not CANDIDATE_META.at(candidate).is_file():
            continue  # pruned since, or never here
        said = read_verdict(candidate).journal_seq
        if said is None or verdict.journal_seq is None or said < verdict.journal_seq:
            found[ident] = verdict
    return found


def roll_forward(folder: Path, pointer: ServedPointer) -> list[str]:
    """Write the verdicts the pointer's journal decided and the candidates do not say yet
    (the pointer is written first: a kill between leaves them to this call). Callers
    hold :func:`pointer_lock`. Returns the candidates whose verdict it wrote."""
    written = disagreeing(folder, pointer)
    for ident, verdict in written.items():
        path = VERDICT.at(candidates_dir(folder) / ident)
        files.write_json(path, VERDICT, verdict.to_json())
    return list(written)


def serve(
    folder: Path,
    entry: ServedEntry,
    how: str,
    keep: int | None = None,
    pin: Pin | None = None,
    unless_pinned: bool = False,
    verdict: Verdict | Mapping[str, Json] | None = None,
) -> bool:
    """Make ``entry`` (a candidate's, see :func:`candidate_entry`) the served model; the
    model served until now goes first in the history, which keeps ``keep`` entries.
    ``pin``: the operator's pin to set (None keeps the pointer's pin as it is);
    ``unless_pinned``: leave a pinned pointer as it is (one read under the lock decides).
    ``verdict``: the gate's verdict of ``entry``'s candidate, carried by the pointer and
    written to the candidate after it (never a ``promoted`` verdict for a model not
    served). Returns whether ``entry`` is served now."""
    held = False

    def change(current: ServedPointer | None) -> ServedPointer | None:
        nonlocal held
        if unless_pinned and current is not None and current.pinned is not None:
            held = True
            return current
        earlier = [] if current is None else [current.served, *current.history]
        history = [h for h in earlier if h.id != entry.id][:keep]  # keep None: all of them
        served = msgspec.structs.replace(entry, how=how, served_at=utc_now())
        pinned = pin if pin is not None else (current.pinned if current else None)
        new = ServedPointer(served, history, pinned)
        decided = None if verdict is None else {str(entry.id): stamped(_verdict(verdict))}
        return journaled(current, new, how, decided)

    update_pointer(folder, change)
    return not held


def rollback(
    folder: Path,
    pin: Pin | None = None,
    verdict: Verdict | Mapping[str, Json] | None = None,
) -> ServedEntry:
    """Serve the model served before the current one again; returns its entry. ``pin``: as
    in :func:`serve`. The model rolled back from gets the verdict ``rolled_back``, with
    ``verdict``'s fields that are set (a reason and its figures) added: carried by the
    pointer, which is written first (:func:`roll_forward`), so that a kill between the
    two never leaves the dropped model ``promoted`` and unserved, for prune to remove."""

    def change(current: ServedPointer | None) -> ServedPointer:
        if current is None:
            raise ServedPointerError(f"{str(folder)!r} serves no model yet: nothing to roll back")
        if not current.history:
            raise ServedPointerError(
                f"{str(folder)!r} serves {current.served.id!r} and kept no earlier model"
            )
        previous = current.history[0]
        if not (Path(folder) / str(previous.checkpoint)).is_file():
            raise ServedPointerError(
                f"the earlier model's checkpoint {previous.checkpoint!r} is gone"
            )
        served = msgspec.structs.replace(previous, how="rollback", served_at=utc_now())
        pinned = pin if pin is not None else current.pinned
        new = ServedPointer(served, current.history[1:], pinned)
        dropped = current.served
        given = None if verdict is None else _verdict(verdict)
        reason = None if given is None else given.reason
        decided = _rolled_back_verdict(folder, dropped, given)
        return journaled(current, new, "rollback", decided, dropped=dropped.id, reason=reason)

    after = update_pointer(folder, change)
    assert after is not None  # change() raises or returns a pointer
    return after.served


def _rolled_back_verdict(
    folder: Path, dropped: ServedEntry, verdict: Verdict | None
) -> dict[str, Verdict]:
    """The dropped model's new verdict (by its candidate's id), kept like a rejected
    candidate's (inspection, pruning) so that the same data does not train it again
    (retrain.freshness); none when it is no candidate of this folder."""
    candidate = (Path(folder) / str(dropped.checkpoint)).parent
    if not CANDIDATE_META.at(candidate).is_file():
        return {}
    old = read_verdict(candidate)
    gate_outcome = old.gate_outcome or old.outcome  # what the gate said
    new = Verdict.from_json({**old.to_json(), **({} if verdict is None else verdict.to_json())})
    new = msgspec.structs.replace(new, outcome=Outcome.ROLLED_BACK, gate_outcome=gate_outcome)
    return {candidate.name: stamped(new)}


def _verdict(verdict: Verdict | Mapping[str, Json]) -> Verdict:
    """A verdict given as its record, or as its JSON (``ValueError`` when it is not one)."""
    return verdict if isinstance(verdict, Verdict) else Verdict.from_json(verdict)


def operator_pin(command: str) -> Pin:
    """The pin an operator's command sets: which command, and when (UTC)."""
    return Pin(by=command, at=utc_now())


def unpin(folder: Path) -> ServedPointer | None:
    """Drop the operator's pin (the daemon's gate may replace the served model again);
    returns the pointer as it now stands (None: nothing served)."""

    def change(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or current.pinned is None:
            return current
        return journaled(current, replace(current, pinned=None), "unpin")

    return update_pointer(folder, change)
