"""One transaction on an agent's served model, as a database commits once: the pointer's
lock taken once, what a killed writer left settled once, every change staged, one commit.

::

    with transaction(folder) as tx:      # lock, then settle (the pointer read once)
        tx.serve(entry, "gate", unless_pinned=True)
        tx.verdict(candidate, report)    # staged: nothing written yet
    tx.done                              # Committed: what the commit wrote and queued

Inside the block serve, rollback, unpin, the watch's figures, a repair's pointer, a
verdict and a prune only stage what they decide; :attr:`Transaction.pointer` is the
pointer as staged so far, and nothing of it is on disk.

The settle, under the lock before the block, reads what a killed writer left and writes
nothing: the verdicts the pointer's journal decided and the candidates do not say yet (a
transition killed between its pointer and its verdicts), and what the outbox lacks (a
verdict event left staged, a journal entry not copied). The block reads those candidates
as the settle leaves them (:meth:`Transaction.verdict_of`: a rollback overlays the
dropped model's verdict, a prune keeps or removes by it). The commit, still under the
lock, writes in this order, each write durable before the next:

1. what the settle rolls forward: those verdicts, then each verdict event a killed writer
   left staged, moved in or discarded by what its candidate's verdict file says once
   they are written, then the events of the journal as the transaction found it;
2. the verdict files no journal carries (rejected, held, undecided), the gate's order:
   its verdict first, then the pointer that serves the model; a rejection's or a hold's
   with its own event staged (``outbox/staged/``) before it and moved into the outbox by
   one rename after it, as a verdict written on its own has its event around it
   (``outbox_catch_up.verdict_announced``);
3. the pointer (``served.json``'s one atomic replace): the transitions' commit point,
   carrying their journal entries and the verdicts they decided;
4. those verdicts, written to their candidates (after the settle, this transaction's
   own, with no file read; else every one the files do not say yet: :func:`disagreeing`);
5. the journal's events, queued in the agent's outbox;
6. the candidates a prune staged, each removed by one rename.

1-5 are one call of ``outbox_catch_up.catch_up``: the outbox's lock taken once, what it
holds read once before its first write, then one ordered pass. It was two passes, the
settle's (1, before the block) and the commit's (2-5), each taking the outbox's lock and
reading the outbox. Why one pass is as safe: the durable writes are the same writes in
the same order, 1 then 2-5; only the block's time now lies before 1, and the block writes
nothing. A kill -9 inside the block leaves the folder as the transaction found it (the
next transaction's settle finds the same leftovers and finishes them), and a kill
between any two writes of the pass leaves a folder a kill of the two passes could leave
at the same write. The outbox's lock is not held across the block; whoever takes it
meanwhile (the daemon's delivery, a catch-up without the pointer's lock) and settles a
staged event finds the verdict file as it is, as it did before the settle's pass, and
this pass reads the outbox again under its own lock before deciding anything. A block
that raises (a refused rollback, an error) writes nothing it staged: the pass writes 1
alone, and the folder is left as the transaction found it, settled.

A kill between any two writes leaves what the next transaction's settle finishes (the
module docstring of :mod:`~genesis_fp16_infrastructure.agent_folder.transitions` says
why each is safe). :attr:`Transaction.done` (a :class:`Committed`) says what was done.

JSON only, no torch.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.agent_folder import files, outbox_catch_up
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import (
    CANDIDATE_META,
    CANDIDATES_FOLDER,
    SERVED_POINTER,
    VERDICT,
)
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
    LockedPointer,
    ServedPointer,
    locked_pointer,
)
from genesis_fp16_infrastructure.errors import ServedPointerError

# Transitions the pointer remembers: enough for the daemon to count each one between two
# of its runs (a run and a few operator commands), each entry ~1-5 KB (a gate verdict).
JOURNAL_KEEP = 16
PRUNING_FOLDER = ".pruning"  # a candidate moved here (one rename) is removed, then or later
# What the transactions of the innermost :func:`recording` committed (per thread and task).
_RECORDED: ContextVar[list[Committed] | None] = ContextVar("committed", default=None)


@dataclass(frozen=True)
class Committed:
    """What one transaction did: the pointer as it found it (settled) and as it left it,
    the journal entries it committed (oldest first: each a transition the daemon counts),
    the candidates whose verdict file it wrote, the events it queued in the outbox (its
    journal's, and what it settled of a killed writer's), and the candidates it pruned.
    A transaction that staged nothing commits nothing: ``before is after``."""

    before: ServedPointer | None
    after: ServedPointer | None
    entries: tuple[JournalEntry, ...] = ()
    verdicts: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    removed: tuple[Path, ...] = ()


class Transaction:
    """The changes of one :func:`transaction`, staged until it commits (module docstring).
    ``before``: the pointer as the transaction found it, settled (None: none yet, or an
    unusable one a repair tolerates: ``unusable`` then says why)."""

    def __init__(
        self,
        folder: Path,
        before: ServedPointer | None,
        settled_through: int | None,
        settled: Settled | None,
        unusable: ServedPointerError | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.before = before
        self.unusable = unusable
        self.done: Committed | None = None
        self._pointer = before
        # The journal numbers already rolled forward by the settle (None: not settled).
        self._settled = settled_through is not None
        self._settled_through = settled_through or 0
        self._found = settled  # what the settle rolls forward, written first in the one pass
        self._verdicts: dict[Path, Verdict] = {}  # each as decided (stamped), to write
        self._removals: list[Path] | None = None  # None: no prune staged
        self._sweep: list[Path] = []

    @property
    def pointer(self) -> ServedPointer | None:
        """The pointer as staged so far (``before`` until something is staged)."""
        return self._pointer

    def stage(self, new: ServedPointer | None) -> ServedPointer | None:
        """Stage ``new`` as the pointer the commit writes; None, or the staged pointer
        itself, changes nothing. A pointer built afresh (a caller's ``ServedPointer(...)``,
        its sequence behind) keeps the journal going. Returns the pointer as staged."""
        current = self._pointer
        if new is None or new is current:
            return current
        if current is not None and new.sequence < current.sequence:
            new = replace(new, sequence=current.sequence, journal=current.journal)
        self._pointer = new
        return new

    def serve(
        self,
        entry: ServedEntry,
        how: str,
        keep: int | None = None,
        pin: Pin | None = None,
        unless_pinned: bool = False,
        verdict: Verdict | Mapping[str, Json] | None = None,
    ) -> bool:
        """Stage ``entry`` served (``transitions.serve`` says what each argument does);
        returns whether it will be (False: a pin held it, ``unless_pinned``)."""
        current = self._pointer
        if unless_pinned and current is not None and current.pinned is not None:
            return False
        earlier = [] if current is None else [current.served, *current.history]
        history = [h for h in earlier if h.id != entry.id][:keep]  # keep None: all of them
        served = msgspec.structs.replace(entry, how=how, served_at=utc_now())
        pinned = pin if pin is not None else (current.pinned if current else None)
        decided = None if verdict is None else {str(entry.id): stamped(as_verdict(verdict))}
        self.stage(journaled(current, ServedPointer(served, history, pinned), how, decided))
        return True

    def rollback(
        self, pin: Pin | None = None, verdict: Verdict | Mapping[str, Json] | None = None
    ) -> ServedEntry:
        """Stage the model served before served again (``transitions.rollback``); returns
        its entry. :class:`ServedPointerError` when there is none to serve."""
        current, folder = self._pointer, self.folder
        if current is None:
            raise ServedPointerError(f"{str(folder)!r} serves no model yet: nothing to roll back")
        if not current.history:
            raise ServedPointerError(
                f"{str(folder)!r} serves {current.served.id!r} and kept no earlier model"
            )
        previous = current.history[0]
        if not (folder / str(previous.checkpoint)).is_file():
            raise ServedPointerError(
                f"the earlier model's checkpoint {previous.checkpoint!r} is gone"
            )
        served = msgspec.structs.replace(previous, how="rollback", served_at=utc_now())
        pinned = pin if pin is not None else current.pinned
        new = ServedPointer(served, current.history[1:], pinned)
        dropped = current.served
        given = None if verdict is None else as_verdict(verdict)
        reason = None if given is None else given.reason
        decided = _rolled_back_verdict(folder, dropped, given, self.verdict_of)
        self.stage(journaled(current, new, "rollback", decided, dropped=dropped.id, reason=reason))
        return served

    def unpin(self) -> ServedPointer | None:
        """Stage the operator's pin dropped (nothing when none is set)."""
        current = self._pointer
        if current is None or current.pinned is None:
            return current
        return self.stage(journaled(current, replace(current, pinned=None), "unpin"))

    def trim(self, keep_served: int) -> ServedPointer | None:
        """Stage the history cut to its last ``keep_served`` models (a ``trim``)."""
        current = self._pointer
        if current is None or len(current.history) <= keep_served:
            return current
        dropped = [e.id for e in current.history[keep_served:]]
        trimmed = replace(current, history=current.history[:keep_served])
        return self.stage(journaled(current, trimmed, "trim", dropped=dropped))

    def verdict_of(self, candidate: Path) -> Verdict:
        """``candidate``'s verdict as the settle leaves it: the one the journal decided
        that its file does not say yet (written first by the commit), else its file's
        (``read_verdict``)."""
        rolled = {} if self._found is None else self._found[1]
        pending = rolled.get(Path(candidate).name)
        if pending is not None and Path(candidate).parent == self.folder / CANDIDATES_FOLDER:
            return pending
        return read_verdict(candidate)

    def disagreeing(self, pointer: ServedPointer) -> dict[str, Verdict]:
        """:func:`disagreeing` of ``pointer`` as the folder will be once the settle's
        verdicts are written (:meth:`verdict_of`)."""
        return disagreeing(self.folder, pointer, self.verdict_of)

    def record_live(self, served: ServedEntry) -> None:
        """Stage the served entry with the live watch's figures (no journal entry: the
        figures are no transition)."""
        assert self._pointer is not None
        self.stage(replace(self._pointer, served=served))

    def verdict(self, candidate: Path, verdict: Verdict | Mapping[str, Json]) -> None:
        """Stage a verdict no transition carries (rejected, held, undecided, the gate's
        own), written before the pointer (:func:`write_verdict`); a later one for the
        same candidate replaces it. Its record (or its JSON: ``ValueError`` in one line, here,
        when it is not one), stamped as decided now: the commit writes it as it is."""
        self._verdicts[Path(candidate)] = stamped(as_verdict(verdict))

    def prune(self, removals: list[Path], sweep: list[Path] | None = None) -> None:
        """Stage ``removals`` (candidate folders), removed after the pointer, with what a
        prune killed midway left in ``.pruning`` and the folders in ``sweep`` (a killed
        run's leftovers nobody names)."""
        self._removals, self._sweep = list(removals), list(sweep or [])

    def commit(self) -> Committed:
        """Write what was staged, in the module docstring's order; called once, by
        :func:`transaction`, under its lock."""
        done = self._finish(discard=False)
        assert done is not None
        return done

    def abandon(self) -> None:
        """The block raised: nothing it staged is written, what the settle owes the outbox
        is queued all the same (the folder stays as the transaction found it, settled),
        and nothing is committed."""
        self._finish(discard=True)

    def _finish(self, discard: bool) -> Committed | None:
        """:meth:`commit`, or with ``discard`` :meth:`abandon` (None: nothing committed)."""
        assert self.done is None, "a transaction commits once"
        if discard:
            self._pointer, self._verdicts, self._removals = self.before, {}, None
        verdicts = list(self._verdicts.items())  # each with its event, if it has one
        writes: list[files.Write] = []  # the pointer, then the verdicts its journal decided
        new, entries, decided = self._pointer, [], []
        changed = new is not None and new is not self.before
        journal: list[JournalEntry] = []  # what the outbox is to hold: none when unchanged
        if new is not None and changed:
            entries = [e for e in new.journal if e.seq > self._settled_through]
            rolled = self._rolled_forward(new, entries)
            pointer = files.Write(SERVED_POINTER.at(self.folder), SERVED_POINTER, new.to_json())
            writes = [pointer, *_verdict_writes(self.folder, rolled)]
            journal, decided = new.journal, list(rolled)
        # What the settle owes the outbox, then the staged verdicts, the pointer and its
        # verdicts, then the journal's events: one ordered pass (the outbox's lock taken,
        # and what it holds read, first).
        committed = None
        if writes or verdicts:
            committed = outbox_catch_up.Announced(journal, changed, writes, verdicts)
        events = self._caught_up(committed)
        removed = [] if self._removals is None else self._remove_all()
        if discard:
            return None
        written = [c.name for c in self._verdicts] + decided
        self.done = Committed(
            self.before, new, tuple(entries), tuple(written), tuple(events), tuple(removed)
        )
        recorded = _RECORDED.get()
        if recorded is not None:
            recorded.append(self.done)
        return self.done

    def _caught_up(self, committed: outbox_catch_up.Announced | None) -> list[str]:
        """The transaction's one pass into the outbox (``outbox_catch_up.catch_up``):
        what the settle owes it, then ``committed``; none when there is nothing to write
        nor to settle. Returns the ids queued."""
        if self._found is None and committed is None:
            return []
        found, rolled = (None, None) if self._found is None else self._found
        writes = [] if rolled is None else _verdict_writes(self.folder, rolled)
        return outbox_catch_up.catch_up(self.folder, found, rolled, committed, writes)

    def _rolled_forward(
        self, new: ServedPointer, entries: list[JournalEntry]
    ) -> dict[str, Verdict]:
        """The verdicts the committed journal decided, to write to their candidates right
        after the pointer: after a settle, those of this transaction's own ``entries``
        alone, each newer than any verdict file (no file read); unsettled, every one the
        files do not say yet (:func:`disagreeing`)."""
        if not self._settled:
            return disagreeing(self.folder, new)
        kept = self.folder / CANDIDATES_FOLDER
        return {
            ident: verdict
            for entry in entries
            for ident, verdict in entry.verdicts.items()
            if _plain(ident) and CANDIDATE_META.at(kept / ident).is_file()
        }

    def _remove_all(self) -> list[Path]:
        """A prune's removals: what a prune killed midway left in ``.pruning`` (nobody
        names it), the swept folders, then each candidate by :func:`_remove`."""
        shutil.rmtree(self.folder / PRUNING_FOLDER, ignore_errors=True)
        for stale in self._sweep:
            shutil.rmtree(stale, ignore_errors=True)
        for candidate in self._removals or []:
            _remove(self.folder, candidate)
        return list(self._removals or [])


@contextmanager
def transaction(
    folder: Path, settle: bool = True, unusable_ok: bool = False
) -> Iterator[Transaction]:
    """One transaction on ``folder``'s served model (module docstring): the pointer's
    lock held throughout, what a killed writer left settled once (:func:`settle`;
    ``settle=False``: the pointer only read), the block's staged changes committed when
    it ends, nothing when it raises. A pointer that cannot be read raises
    :class:`ServedPointerError` (the staged events settled first), unless
    ``unusable_ok`` (a repair's): then ``before`` is None and ``unusable`` says why.

    >>> import tempfile
    >>> from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
    >>> folder = Path(tempfile.mkdtemp())
    >>> with transaction(folder) as tx:
    ...     tx.serve(ServedEntry(id="m1", checkpoint="m1.pt"), "manual")
    True
    >>> [(e.seq, e.kind, e.served) for e in tx.done.entries]
    [(1, 'manual', 'm1')]
    """
    with locked_pointer(folder) as read:
        tx = _begin(Path(folder), read, settle)
        try:
            if tx.unusable is not None and not unusable_ok:
                raise tx.unusable
            yield tx
        except BaseException:
            tx.abandon()  # a kill -9 runs no line: then the next transaction's settle does
            raise
        tx.commit()


@contextmanager
def recording() -> Iterator[list[Committed]]:
    """Every transaction committed inside the block (in this thread), in commit order:
    what a judged run did, whichever of its phases committed it, returned with its
    result (``TrainResult.transitions``) for the daemon to count. A transaction that
    raised committed nothing and is not in it.

    >>> import tempfile
    >>> from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
    >>> folder = Path(tempfile.mkdtemp())
    >>> with recording() as committed:
    ...     with transaction(folder) as tx:
    ...         _ = tx.serve(ServedEntry(id="m1", checkpoint="m1.pt"), "first")
    >>> [(e.seq, e.kind) for done in committed for e in done.entries]
    [(1, 'first')]
    """
    committed: list[Committed] = []
    token = _RECORDED.set(committed)
    try:
        yield committed
    finally:
        _RECORDED.reset(token)


def _begin(folder: Path, read: LockedPointer, settle_first: bool) -> Transaction:
    """The transaction as it starts, from the pointer read once under the lock: what a
    killed writer left settled when asked (:func:`settle`); a pointer that cannot be read
    gives a transaction without one (``unusable`` says why: :func:`transaction` refuses
    it unless a repair asks)."""
    current = read.pointer
    settled = settle(folder, current) if settle_first else None
    if read.unusable is not None:
        return Transaction(folder, None, None, settled, unusable=read.unusable)
    if not settle_first:
        return Transaction(folder, current, None, settled)
    return Transaction(folder, current, 0 if current is None else current.sequence, settled)


# What a settle leaves the commit's one outbox pass: the pointer's journal as the
# transaction found it, and the verdicts the settle rolled forward (by candidate id).
Settled = tuple[list[JournalEntry], dict[str, Verdict]]


def settle(folder: Path, current: ServedPointer | None) -> Settled:
    """What a transition killed midway left, to roll forward (the caller holds the lock):
    the verdicts ``current``'s journal decided and the candidates do not say yet
    (:func:`disagreeing`: the pointer is written first, so a kill between leaves them
    here), and what the outbox lacks (the verdict events left staged, settled by what
    those verdicts say; the journal's events). Nothing is written here: the commit's one
    pass writes them first (the module docstring says why that is the old order), and
    the block reads those candidates as they will be (:meth:`Transaction.verdict_of`).
    ``current`` None: no pointer (none yet, or one that cannot be read), the staged
    events alone."""
    decided = {} if current is None else disagreeing(folder, current)
    return ([] if current is None else current.journal), decided


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
    the candidates after the pointer: :func:`settle`), and what a rollback or a trim
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


def disagreeing(
    folder: Path, pointer: ServedPointer, verdict_of: Callable[[Path], Verdict] = read_verdict
) -> dict[str, Verdict]:
    """The kept candidates whose verdict file says other than the journal decided (a
    transition killed between its pointer and its verdicts), each with the verdict the
    journal last gave it (its ``journal_seq`` set): what prune never removes and
    :func:`settle` writes. ``verdict_of``: how a candidate's verdict is read (a
    transaction's: as its settle leaves it)."""
    decided: dict[str, Verdict] = {}
    for entry in pointer.journal:
        for ident, verdict in entry.verdicts.items():
            if _plain(ident) and verdict.journal_seq is not None:
                decided[ident] = verdict  # a hand-edited one without its number: ignored
    found: dict[str, Verdict] = {}
    for ident, verdict in decided.items():
        candidate = Path(folder) / CANDIDATES_FOLDER / ident
        if not CANDIDATE_META.at(candidate).is_file():
            continue  # pruned since, or never here
        said = verdict_of(candidate).journal_seq
        if said is None or verdict.journal_seq is None or said < verdict.journal_seq:
            found[ident] = verdict
    return found


def _plain(ident: str) -> bool:
    """Whether a journal's candidate id names a folder of ``candidates/`` (a hand-edited
    one naming a path elsewhere does not)."""
    return Path(ident).name == ident and ident not in ("", ".", "..")


def _verdict_writes(folder: Path, decided: Mapping[str, Verdict]) -> list[files.Write]:
    """Each verdict of ``decided`` (candidate id -> verdict) as the write of its
    candidate's ``verdict.json``."""
    kept = Path(folder) / CANDIDATES_FOLDER
    return [files.Write(VERDICT.at(kept / i), VERDICT, v.to_json()) for i, v in decided.items()]


def write_verdict(candidate: Path, verdict: Verdict | Mapping[str, Json]) -> None:
    """A verdict no transition of the pointer carries (rejected, held, undecided), then a
    rejection's or hold's event (staged before it: ``outbox_catch_up.write_announced``).
    A promotion's and a rollback's go through the pointer (serve, rollback). ``verdict``:
    the gate's report's JSON and what its writer adds (read as a :class:`Verdict`:
    ``ValueError`` in one line when it is not one)."""
    outbox_catch_up.write_announced(candidate, stamped(as_verdict(verdict)))


def as_verdict(verdict: Verdict | Mapping[str, Json]) -> Verdict:
    """A verdict given as its record, or as its JSON (``ValueError`` when it is not one)."""
    return verdict if isinstance(verdict, Verdict) else Verdict.from_json(verdict)


def _rolled_back_verdict(
    folder: Path,
    dropped: ServedEntry,
    verdict: Verdict | None,
    verdict_of: Callable[[Path], Verdict] = read_verdict,
) -> dict[str, Verdict]:
    """The dropped model's new verdict (by its candidate's id), kept like a rejected
    candidate's (inspection, pruning) so that the same data does not train it again
    (retrain.freshness); none when it is no candidate of this folder."""
    candidate = (Path(folder) / str(dropped.checkpoint)).parent
    if not CANDIDATE_META.at(candidate).is_file():
        return {}
    old = verdict_of(candidate)  # as the settle leaves it
    gate_outcome = old.gate_outcome or old.outcome  # what the gate said
    new = old if verdict is None else old.overlaid(verdict)
    new = msgspec.structs.replace(new, outcome=Outcome.ROLLED_BACK, gate_outcome=gate_outcome)
    return {candidate.name: stamped(new)}


def _remove(folder: Path, candidate: Path) -> None:
    """Remove a candidate in one step that counts: its rename out of ``candidates/`` (a
    kill during the removal of its files then leaves no half candidate to list)."""
    trash = Path(folder) / PRUNING_FOLDER
    trash.mkdir(exist_ok=True)
    moved = trash / candidate.name
    shutil.rmtree(moved, ignore_errors=True)  # the same name pruned before, killed midway
    os.replace(candidate, moved)
    shutil.rmtree(moved)
