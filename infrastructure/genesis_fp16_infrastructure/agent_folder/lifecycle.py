"""The served model's owner: the pointer (``served.json``), the candidates beside it, and
every transition between them (serve, reject, roll back, pin, unpin, repair, prune), under
one lock. No agent is named here: the retrain recipe, the daemon, the operator's ``model``
command and any plugin's judged runs call these functions, and nothing else writes the
pointer or a verdict.

An agent's checkpoint folder holds every model it trained, each in a folder of its own,
and one pointer that says which of them Genesis uses::

    <checkpoint_dir>/
        served.json                  {"served": {...}, "history": [{...}, ...]}
        candidates/<id>/             one training run's checkpoints
            candidate.json           its data (digest, records) and request, when it began
            verdict.json             the gate's verdict: promoted, rejected, inconclusive, undecided
            ckpt-0000000120.pt ...

A candidate trains in its own folder; the pointer changes only when one is promoted, and
is rewritten atomically (:func:`~genesis_fp16_infrastructure.agent_folder.files.write_json`:
a reader finds the old pointer or the new one, never none), by one writer at a time:
every read-and-write-back holds ``served.json.lock`` (:func:`update_pointer`), so an
operator's ``model promote`` racing the daemon's promotion or pruning is never undone.
``history`` keeps the models served before, newest first, for ``genesis-fp16 model
rollback``. Every reader (the daemon's plan, the prediction API, the ``model`` command)
reads the pointer here, through the hardened reader, and one that cannot be followed
raises :class:`ServedPointerError`, one line that names the file and the command that
repairs it.

A pointer that cannot be followed (unreadable, another version, naming a checkpoint that
is gone) is never guessed past: :func:`set_aside_unusable` renames it
``served.json.unusable-<time>`` (:func:`aside_path`), every reader refuses in one line, and
``genesis-fp16 model promote AGENT ID`` or ``model rollback AGENT`` writes a new one from
the candidates' own records (:func:`repairable_pointer`, :func:`promoted_candidates`).
A manual ``promote`` or ``rollback`` pins the served model (:func:`operator_pin`): the
daemon's gate then holds a better candidate (verdict ``held``) instead of serving it, until
``model unpin`` (:func:`unpin`).

Crash-safe: each transition's one commit point is the pointer's atomic replace, written
last, and it carries what the transition decided: a numbered ``journal`` (the last
``JOURNAL_KEEP`` transitions, ``sequence`` the newest number) holding the verdicts a
promotion or rollback gave (:func:`journaled`). The candidates' ``verdict.json`` files
follow from it (:func:`roll_forward`, at the end of the transition and again at the next
owner call, under the lock), so a kill -9 anywhere leaves the state before or after:
never a ``promoted`` verdict for a model not served, and prune keeps any candidate whose
verdict still disagrees (:func:`disagreeing`) and removes by one rename. The daemon
counts transitions from the journal's numbers, each once, reported by its run or not;
each journal entry is the transition's event too, copied to the agent's outbox in the
same way (``agent_folder.outbox``).
tests/infrastructure/agent_folder/test_lifecycle_kill.py kills every write of each.

JSON only, no torch: the daemon's up-to-date check and the ``model`` command use it
without importing torch. The pointer's record, codec and lock are
:mod:`~genesis_fp16_infrastructure.agent_folder.pointer` (named here too), the records of
candidates and of the journal :mod:`~genesis_fp16_infrastructure.agent_folder.lifecycle_records`.

>>> pointer = read_pointer(folder)  # doctest: +SKIP
>>> pointer.served["id"], served_checkpoint(folder)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files, outbox
from genesis_fp16_infrastructure.agent_folder.files import UnusableStateFile, last_write
from genesis_fp16_infrastructure.agent_folder.files import folder_bytes as folder_bytes
from genesis_fp16_infrastructure.agent_folder.layout import CANDIDATE_META as CANDIDATE_META_FILE
from genesis_fp16_infrastructure.agent_folder.layout import (
    SERVED_POINTER,
    VERDICT,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import CandidateMeta, Verdict
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    JournalEntry as JournalEntry,
)
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ASIDE_NAME as ASIDE_NAME,
)
from genesis_fp16_infrastructure.agent_folder.pointer import (
    POINTER_LOCK as POINTER_LOCK,
)
from genesis_fp16_infrastructure.agent_folder.pointer import (
    POINTER_NAME as POINTER_NAME,
)
from genesis_fp16_infrastructure.agent_folder.pointer import (
    POINTER_VERSION as POINTER_VERSION,
)
from genesis_fp16_infrastructure.agent_folder.pointer import REPAIR as REPAIR
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    ServedPointerError,
    aside_path,
    candidates_dir,
    parse_pointer,
    pointer_lock,
    pointer_path,
    read_pointer,
    served_checkpoint,
    write_pointer,
)
from genesis_fp16_infrastructure.agent_folder.pointer import checkpoint_of as checkpoint_of
from genesis_fp16_infrastructure.agent_folder.pointer import repair_hint as repair_hint
from genesis_fp16_infrastructure.outcome import Outcome

logger = logging.getLogger(__name__)

# Transitions ----------------------------------------------------------------------
CANDIDATE_META = CANDIDATE_META_FILE.name
VERDICT_NAME = VERDICT.name
UNFINISHED_MIN_DAYS = 1.0  # an unfinished candidate untouched this long is pruned
# Inconclusive candidates (issue 62: judged again as records arrive) kept whatever their
# age: the newest two; an older one is pruned as a rejected one is.
INCONCLUSIVE_KEEP = 2
# Transitions the pointer remembers: enough for the daemon to count each one between two
# of its runs (a run and a few operator commands), each entry ~1-5 KB (a gate verdict).
JOURNAL_KEEP = 16
PRUNING_FOLDER = ".pruning"  # a candidate moved here (one rename) is removed, then or later
_CHECKPOINT_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")  # CheckpointManager's, without torch


PointerChange = Callable[[ServedPointer | None], ServedPointer | None]


def update_pointer(folder: Path, change: PointerChange) -> ServedPointer | None:
    """Read the pointer, apply ``change`` and write what it returns, all under
    :func:`pointer_lock`. ``change`` gets the current pointer (None: none yet) and returns
    the new one, or the same object (or None) to leave the file untouched; it may raise
    :class:`ServedPointerError` to refuse. Returns the pointer as it now stands."""
    with pointer_lock(folder):
        outbox.announce_verdicts(folder)  # a killed verdict writer's event, left staged
        current = read_pointer(folder)
        if current is not None:
            roll_forward(folder, current)  # what a transition killed midway decided
            outbox.announce_journal(folder, current.journal, committed_now=False)  # likewise
        new = change(current)
        if new is not None and new is not current:
            if current is not None and new.sequence < current.sequence:
                # Built afresh (a caller's ServedPointer(...)): the journal goes on.
                new = replace(new, sequence=current.sequence, journal=current.journal)
            _commit(folder, new)
            return new
        return current


def _commit(folder: Path, new: ServedPointer) -> None:
    """The transition's one commit point, then its journal's verdicts and events."""
    write_pointer(folder, new)
    roll_forward(folder, new)
    outbox.announce_journal(folder, new.journal, committed_now=True)


def journaled(
    current: ServedPointer | None,
    new: ServedPointer,
    kind: str,
    verdicts: Mapping[str, Mapping[str, Any]] | None = None,
    dropped: Any = None,
    reason: str | None = None,
) -> ServedPointer:
    """``new`` with the transition that made it from ``current`` appended to its journal
    under the next sequence number: ``kind`` (serve's ``how``, ``rollback``, ``unpin``,
    ``trim``, ``repair``), the verdicts it decided (candidate id -> verdict, written to
    the candidates after the pointer: :func:`roll_forward`), and what a rollback or a trim
    ``dropped`` and why."""
    sequence = (current.sequence if current is not None else 0) + 1
    decided = {
        k: Verdict.from_json({**v, "journal_seq": sequence}) for k, v in (verdicts or {}).items()
    }
    entry = JournalEntry(
        seq=sequence, kind=kind, at=_now(), at_s=time.time(), served=new.served.get("id"),
        pinned=new.pinned, verdicts=decided, dropped=dropped, reason=reason,
    )  # fmt: skip
    earlier = current.journal if current is not None else []
    return replace(new, sequence=sequence, journal=[*earlier, entry][-JOURNAL_KEEP:])


def decided_verdicts(pointer: ServedPointer) -> dict[str, Verdict]:
    """The verdict each candidate the journal names was last given (id -> verdict, with
    its ``journal_seq``): what its ``verdict.json`` must say."""
    decided: dict[str, Verdict] = {}
    for entry in pointer.journal:
        for ident, verdict in entry.verdicts.items():
            plain = Path(ident).name == ident and ident not in ("", ".", "..")
            if plain and verdict.journal_seq is not None:
                decided[ident] = verdict  # a hand-edited one without its number: ignored
    return decided


def disagreeing(folder: Path, pointer: ServedPointer) -> list[str]:
    """The kept candidates whose verdict file says other than the journal decided (a
    transition killed between its pointer and its verdicts): what prune never removes and
    :func:`roll_forward` rewrites."""
    found = []
    for ident, verdict in decided_verdicts(pointer).items():
        candidate = candidates_dir(folder) / ident
        if not (candidate / CANDIDATE_META).is_file():
            continue  # pruned since, or never here
        said = read_verdict(candidate).journal_seq
        if said is None or verdict.journal_seq is None or said < verdict.journal_seq:
            found.append(ident)
    return found


def roll_forward(folder: Path, pointer: ServedPointer) -> list[str]:
    """Write the verdicts the pointer's journal decided and the candidates do not say yet
    (the pointer is written first: a kill between leaves them to this call). Callers
    hold :func:`pointer_lock`. Returns the candidates whose verdict it wrote."""
    decided = decided_verdicts(pointer)
    written = disagreeing(folder, pointer)
    for ident in written:
        path = candidates_dir(folder) / ident / VERDICT_NAME
        files.write_json(path, VERDICT, decided[ident].to_json())
    return written


def serve(
    folder: Path,
    entry: Mapping[str, Any],
    how: str,
    keep: int | None = None,
    pin: Mapping[str, Any] | None = None,
    unless_pinned: bool = False,
    verdict: Mapping[str, Any] | None = None,
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
        history = [] if current is None else [current.served, *current.history]
        history = [h for h in history if h.get("id") != entry.get("id")]
        if keep is not None:
            history = history[:keep]
        served = {**entry, "how": how, "served_at": _now()}
        pinned = dict(pin) if pin is not None else (current.pinned if current else None)
        new = ServedPointer(served, history, pinned)
        stamped = None if verdict is None else {str(entry.get("id")): _stamped(verdict)}
        return journaled(current, new, how, stamped)

    update_pointer(folder, change)
    return not held


def rollback(
    folder: Path,
    pin: Mapping[str, Any] | None = None,
    verdict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Serve the model served before the current one again; returns its entry. ``pin``: as
    in :func:`serve`. The model rolled back from gets the verdict ``rolled_back``, with
    ``verdict``'s keys (a reason and its figures) added: carried by the pointer, which is
    written first (:func:`roll_forward`), so that a kill between the two never leaves
    the dropped model ``promoted`` and unserved, for prune to remove."""

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
        served = {**previous, "how": "rollback", "served_at": _now()}
        pinned = dict(pin) if pin is not None else current.pinned
        new = ServedPointer(served, current.history[1:], pinned)
        dropped = current.served
        reason = (verdict or {}).get("reason")
        decided = _rolled_back_verdict(folder, dropped, verdict)
        return journaled(
            current, new, "rollback", decided, dropped=dropped.get("id"), reason=reason
        )

    after = update_pointer(folder, change)
    assert after is not None  # change() raises or returns a pointer
    return after.served


def _rolled_back_verdict(
    folder: Path, dropped: Mapping[str, Any], verdict: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """The dropped model's new verdict (by its candidate's id), kept like a rejected
    candidate's (inspection, pruning) so that the same data does not train it again
    (retrain.freshness); none when it is no candidate of this folder."""
    candidate = (Path(folder) / str(dropped["checkpoint"])).parent
    if not (candidate / CANDIDATE_META).is_file():
        return {}
    old = read_verdict(candidate)
    gate_outcome = old.gate_outcome or old.outcome  # what the gate said
    new = {**old.to_json(), **(verdict or {})}
    new.update(outcome=Outcome.ROLLED_BACK, gate_outcome=gate_outcome)
    return {candidate.name: _stamped(new)}


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
    created = {p: str(read_meta(p).created_at) for p in found}
    return sorted(found, key=lambda p: (created[p], p.name))


def read_json(path: Path) -> dict[str, Any] | None:
    """A candidate's meta or verdict (``path``'s name says which); None when absent, or
    unusable: set aside as ``<name>.unusable-*`` and reported (agent_folder.files)."""
    file = {VERDICT_NAME: VERDICT, CANDIDATE_META: CANDIDATE_META_FILE}[Path(path).name]
    return files.load(path, file, files.json_object)


def read_verdict(candidate: Path) -> Verdict:
    """The candidate's verdict; one without an outcome (``Verdict()``) while it has none
    (training), or when its file is unusable: set aside and reported (agent_folder.files)."""
    found = files.load(Path(candidate) / VERDICT_NAME, VERDICT, Verdict.from_json)
    return Verdict() if found is None else found


def read_meta(candidate: Path) -> CandidateMeta:
    """The candidate's meta (its data and request); empty when absent or unusable (set
    aside and reported, as :func:`read_verdict`)."""
    found = files.load(
        Path(candidate) / CANDIDATE_META, CANDIDATE_META_FILE, CandidateMeta.from_json
    )
    return CandidateMeta() if found is None else found


def write_verdict(candidate: Path, verdict: Mapping[str, Any]) -> None:
    """A verdict no transition of the pointer carries (rejected, held, undecided), then a
    rejection's or hold's event (staged before it: ``outbox.verdict_announced``).
    A promotion's and a rollback's go through the pointer (serve, rollback)."""
    stamped = _stamped(verdict)
    with outbox.verdict_announced(candidate, stamped):  # in the outbox before it is logged
        files.write_json(Path(candidate) / VERDICT_NAME, VERDICT, stamped)


def _stamped(verdict: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in verdict.items() if k != "journal_seq"}
    return {**kept, "decided_at": _now(), "decided_at_s": time.time()}


def newest_checkpoint(candidate: Path) -> Path | None:
    """The candidate's last checkpoint file (its served weights inside), or None."""
    names = sorted(p.name for p in Path(candidate).iterdir() if _CHECKPOINT_NAME.match(p.name))
    return Path(candidate) / names[-1] if names else None


def candidate_entry(
    folder: Path, candidate: Path, checkpoint: Path, verdict: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The pointer's entry for a candidate: its id, checkpoint (relative to ``folder``),
    data, precision and gate scores, from its meta and ``verdict`` (None: its verdict
    file; the gate's promotion passes the verdict it has not written yet)."""
    meta = read_meta(candidate)
    judged = read_verdict(candidate) if verdict is None else Verdict.from_json(verdict)
    return {
        "id": Path(candidate).name,
        "checkpoint": str(Path(checkpoint).resolve().relative_to(Path(folder).resolve())),
        "fingerprint": meta.fingerprint,
        "records": meta.records,
        "precision": judged.precision,
        "scores": judged.candidate or {},
        "trained_at": meta.created_at,
    }


def prune(folder: Path, keep_served: int, rejected_days: float) -> list[Path]:
    """Remove candidates neither served nor among the last ``keep_served`` served:
    rejected, undecided or inconclusive ones (but the newest ``INCONCLUSIVE_KEEP``
    inconclusive) older than ``rejected_days``, unfinished ones (no verdict) untouched
    for ``rejected_days`` and ``UNFINISHED_MIN_DAYS`` (a run cut short by its timeout
    every hour must find its candidate next time). Returns what was removed."""
    return prune_and_read(folder, keep_served, rejected_days)[0]


def prune_and_read(
    folder: Path, keep_served: int, rejected_days: float
) -> tuple[list[Path], ServedPointer | None]:
    """:func:`prune`, and the pointer as it stands after it (None: nothing served), read
    once under the same lock: the daemon counts the journal from it without a second read."""
    with pointer_lock(folder):  # nothing served meanwhile is removed
        return _prune_locked(folder, keep_served, rejected_days)


def _prune_locked(
    folder: Path, keep_served: int, rejected_days: float
) -> tuple[list[Path], ServedPointer | None]:
    def trim(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or len(current.history) <= keep_served:
            return current
        dropped = [e.get("id") for e in current.history[keep_served:]]
        trimmed = replace(current, history=current.history[:keep_served])
        return journaled(current, trimmed, "trim", dropped=dropped)

    pointer = update_pointer(folder, trim)  # rolls forward what a killed transition decided
    _empty_pruning(folder)
    kept_ids: set[str] = set()
    if pointer is not None:
        kept_ids = {str(e.get("id")) for e in [pointer.served, *pointer.history]}
        kept_ids |= set(disagreeing(folder, pointer))  # a verdict not yet rolled forward
    kept_ids |= set(_newest_inconclusive(folder))
    cutoff = time.time() - rejected_days * 86400
    removed = []
    for stale in Path(folder).glob(".up-to-date-*"):  # an up-to-date run killed mid-eval
        if stale.is_dir() and last_write(stale) < time.time() - UNFINISHED_MIN_DAYS * 86400:
            shutil.rmtree(stale, ignore_errors=True)
    for candidate in list_candidates(folder):
        if candidate.name in kept_ids or not _prunable(candidate, pointer, cutoff):
            continue
        _remove(folder, candidate)
        removed.append(candidate)
    return removed, pointer


def _prunable(candidate: Path, pointer: ServedPointer | None, cutoff: float) -> bool:
    """Whether nobody may still name ``candidate`` (neither served nor kept in history:
    the caller's check): promoted and replaced, decided long ago, or unfinished and
    untouched. With no pointer at all a promoted one stays: a repair serves it again."""
    verdict = read_verdict(candidate)
    if verdict.outcome is None:  # unfinished and recent: the next run of its data resumes it
        return last_write(candidate) <= min(cutoff, time.time() - UNFINISHED_MIN_DAYS * 86400)
    if verdict.outcome == Outcome.PROMOTED:
        return pointer is not None
    return (verdict.decided_at_s or 0.0) <= cutoff  # a recent one kept for inspection


def _newest_inconclusive(folder: Path) -> list[str]:
    """The newest ``INCONCLUSIVE_KEEP`` candidates whose verdict is ``inconclusive``."""
    verdicts = [(c.name, read_verdict(c)) for c in list_candidates(folder)]
    return [n for n, v in verdicts if v.outcome == Outcome.INCONCLUSIVE][-INCONCLUSIVE_KEEP:]


def _remove(folder: Path, candidate: Path) -> None:
    """Remove a candidate in one step that counts: its rename out of ``candidates/`` (a
    kill during the removal of its files then leaves no half candidate to list)."""
    trash = Path(folder) / PRUNING_FOLDER
    trash.mkdir(exist_ok=True)
    moved = trash / candidate.name
    shutil.rmtree(moved, ignore_errors=True)  # the same name pruned before, killed midway
    os.replace(candidate, moved)
    shutil.rmtree(moved)


def _empty_pruning(folder: Path) -> None:
    """What a prune killed midway left in ``.pruning``: removed (nobody names it)."""
    trash = Path(folder) / PRUNING_FOLDER
    if trash.is_dir():
        shutil.rmtree(trash, ignore_errors=True)


# Repairs and the operator's pin --------------------------------------------------


def operator_pin(command: str) -> dict[str, Any]:
    """The pin an operator's command sets: which command, and when (UTC)."""
    return {"by": command, "at": _now()}


def unpin(folder: Path) -> ServedPointer | None:
    """Drop the operator's pin (the daemon's gate may replace the served model again);
    returns the pointer as it now stands (None: nothing served)."""

    def change(current: ServedPointer | None) -> ServedPointer | None:
        if current is None or current.pinned is None:
            return current
        return journaled(current, replace(current, pinned=None), "unpin")

    return update_pointer(folder, change)


def serve_unless_pinned(
    folder: Path, entry: dict[str, Any], how: str, verdict: Mapping[str, Any] | None = None
) -> bool:
    """The gate's promotion (:func:`serve`), unless the pointer is pinned *now* (an operator's
    ``model promote`` while the candidate trained wins). True: served; False: held."""
    return serve(folder, entry, how, unless_pinned=True, verdict=verdict)  # one read, locked


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
        verdict = read_verdict(candidate)
        checkpoint = newest_checkpoint(candidate)
        if verdict.outcome != Outcome.PROMOTED or checkpoint is None:
            continue
        found.append((verdict.decided_at_s or 0.0, served_entry(folder, candidate)))
    return [entry for _, entry in sorted(found, key=lambda pair: -pair[0]) if entry is not None]


def served_entry(folder: Path, candidate: Path) -> dict[str, Any] | None:
    """A kept candidate's pointer entry, from its own records: the checkpoint its verdict
    names (the newest file where the verdict names none: written before it did), and for
    final_fit=whole the split run's model the gate judged. None: it holds no checkpoint."""
    named = Path(candidate) / (read_verdict(candidate).checkpoint or "-")
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
        _commit(folder, journaled(current, ServedPointer(served, history, dict(pin)), "repair"))
        return True


def roll_back_by_hand(folder: Path, pin: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``model rollback``: serve the model served before, pinned; returns its entry and
    whether it repaired an unusable pointer (then: the old history's first intact model,
    else the newest candidate the gate promoted, the one most likely served before)."""
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
        _commit(folder, journaled(current, ServedPointer(served, choices[1:], dict(pin)), "repair"))
        return served, True


def _current(folder: Path) -> tuple[ServedPointer | None, bool]:
    """The pointer as a repair sees it, and whether it is usable (None and True: none yet)."""
    try:
        served_checkpoint(folder)
        return read_pointer(folder), True
    except ServedPointerError:
        return repairable_pointer(folder), False


def _set_aside_if_there(folder: Path) -> None:
    """Keep the unusable pointer for the post-mortem before a repair replaces it: a copy
    (the pointer stays until the repair's one atomic replace: a kill between leaves the
    state before); a folder, FIFO or link at its name is moved, as any in a write's way."""
    path = pointer_path(folder)
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


def _intact(folder: Path, entry: dict[str, Any]) -> bool:
    return (Path(folder) / str(entry.get("checkpoint") or "-")).is_file()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
