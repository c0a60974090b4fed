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
every read-and-write-back holds ``served.json.lock``, in one transaction
(:mod:`~genesis_fp16_infrastructure.agent_folder.transaction`: each function here is
one), so an
operator's ``model promote`` racing the daemon's promotion or pruning is never undone.
``history`` keeps the models served before, newest first, for ``genesis-fp16 model
rollback``. A manual ``promote`` or ``rollback`` pins the served model
(:func:`operator_pin`): the daemon's gate then holds a better candidate (verdict
``held``) instead of serving it, until ``model unpin`` (:func:`unpin`).

Crash-safe: each transition's one commit point is the pointer's atomic replace, written
last, and it carries what the transition decided: a numbered ``journal`` (the last
``JOURNAL_KEEP`` transitions, ``sequence`` the newest number) holding the verdicts a
promotion or rollback gave (:func:`journaled`). The candidates' ``verdict.json`` files
follow from it (at the end of the transition, and when the next transaction settles
what a kill left, under the lock: ``transaction.settle``), so a kill -9 anywhere leaves
the state before or after: never a ``promoted`` verdict for a model not served, and prune keeps any
candidate whose verdict still disagrees (:func:`disagreeing`) and removes by one rename.
The daemon counts transitions by the journal's numbers, each once: a run's as it reports
them (what its transactions committed), the journal's own for those no run reported (a
run killed after its commit, another process's); each journal entry is the transition's
event too, copied to the agent's outbox in the same way (``agent_folder.outbox``).
Recovery is an explicit call (:func:`recover`) at the points that need it; reading the
pointer has no side effect.
tests/infrastructure/agent_folder/test_lifecycle_kill.py kills every write of each.

JSON only, no torch: the daemon's up-to-date check and the ``model`` command use it
without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    Pin,
    ServedEntry,
    Verdict,
    utc_now,
)
from genesis_fp16_infrastructure.agent_folder.pointer import ServedPointer
from genesis_fp16_infrastructure.agent_folder.transaction import (
    JOURNAL_KEEP as JOURNAL_KEEP,
)
from genesis_fp16_infrastructure.agent_folder.transaction import (
    disagreeing as disagreeing,
)
from genesis_fp16_infrastructure.agent_folder.transaction import (
    journaled as journaled,
)
from genesis_fp16_infrastructure.agent_folder.transaction import transaction


def recover(folder: Path) -> ServedPointer | None:
    """Finish, under the pointer's lock, what a writer killed midway left: the verdicts
    the pointer's journal decided and the candidates do not say yet (``transaction.settle``),
    then the verdict events staged and not released and the journal's events the outbox
    lacks (``outbox_catch_up.catch_up``): a transaction that stages nothing. An
    explicit call, never a read's side effect: the daemon's start-up and the end of each
    of its runs (killed or not), the start of a judged run, the operator's ``model``
    commands. Returns the pointer as it stands (None: none yet); one that cannot be read
    raises :class:`ServedPointerError`, the staged events settled first."""
    with transaction(folder) as tx:
        return tx.before


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
    with transaction(folder) as tx:
        return tx.serve(entry, how, keep, pin, unless_pinned, verdict)


def rollback(
    folder: Path,
    pin: Pin | None = None,
    verdict: Verdict | Mapping[str, Json] | None = None,
) -> ServedEntry:
    """Serve the model served before the current one again; returns its entry. ``pin``: as
    in :func:`serve`. The model rolled back from gets the verdict ``rolled_back``, with
    ``verdict``'s fields that are set (a reason and its figures) added: carried by the
    pointer, which is written first (``transaction.settle``), so that a kill between the
    two never leaves the dropped model ``promoted`` and unserved, for prune to remove."""
    with transaction(folder) as tx:
        return tx.rollback(pin, verdict)


def operator_pin(command: str) -> Pin:
    """The pin an operator's command sets: which command, and when (UTC)."""
    return Pin(by=command, at=utc_now())


def unpin(folder: Path) -> ServedPointer | None:
    """Drop the operator's pin (the daemon's gate may replace the served model again);
    returns the pointer as it now stands (None: nothing served)."""
    with transaction(folder) as tx:
        return tx.unpin()
