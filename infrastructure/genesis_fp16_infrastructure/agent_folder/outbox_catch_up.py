"""The outbox's catch-up: what the served-model lifecycle owes the agent's outbox
(agent_folder.outbox) and the pass that copies it. A pointer transition's journal entry
and a rejection's or a hold's verdict each become an event; this module decides which
the outbox lacks and writes them, read once and decided under the outbox's lock, then
written in one ordered pass after the writes that decide them.

Why a kill -9 cannot lose one of these events: each is owed by a durable record written
before anyone is told (the journal entry, in the fsynced ``served.json`` of its
transition; a verdict's event, staged before its verdict file), and every owner call
catches up what that record owes and the outbox lacks. An event's id is a hash of what
it announces, so a copy made twice is one event, and the ids pruned are remembered in
``outbox.json`` so a catch-up never copies one back. Where each is written, and what a
kill -9 does:

- A pointer transition (serve, rollback, unpin, repair: ``transitions``, ``repair``) is committed by
  one atomic, fsynced replace of ``served.json`` whose numbered journal says what it
  decided: that journal entry is the event, made durable in the transition's own step.
  It is copied here under the pointer's lock before the transition returns
  (:func:`announce_journal`), its id a hash of the entry, so a copy made twice is one
  event. A kill (or a power cut) between the pointer and the copy is mended by the next
  owner call: every transition, the daemon's prune after each run and its delivery
  thread at start-up copy what the journal holds and the outbox lacks. No transition is
  lost; none is announced that did not happen (a refused one writes no journal entry).
- A rejection or a hold (``candidates.write_verdict``): its event, its id a hash of what
  it announces (agent, candidate, outcome and the verdict's own decision time: held then
  rejected are two events, one verdict released twice is one), is staged in ``staged/``
  before the candidate's verdict file is written and moved into the outbox by one rename
  after it, the outbox's lock held throughout (:func:`verdict_announced`; a
  transaction's commit makes the same three writes in its one ordered pass:
  :func:`catch_up`), so before any log line or metric says so. A staged event is a
  killed writer's (a live one holds the lock), and the next owner call (where the
  journal's copies are made: :func:`announce_verdicts`) or verdict writer settles it by
  what the verdict file says: moved in if it says that verdict (a kill after the file),
  discarded if not (a kill before it). Never twice, never one pruned meanwhile; a
  verdict of a state folder from before this was never staged and is never announced.
  With nothing staged a catch-up is one listing of an empty folder, whatever the
  candidates kept.

Against a power cut, a transition's event is in the fsynced journal; a staged verdict
event is not fsynced (agent_folder.outbox says why no event's first write is): a power
cut within a second of it can keep a rejection's fsynced verdict file and lose its event.

Standard library only, as the outbox: the retrain recipe (in a run's child process), the
operator's ``model`` command and the daemon all announce here.

>>> import tempfile
>>> from genesis_fp16_infrastructure.agent_folder.lifecycle_records import JournalEntry
>>> from genesis_fp16_infrastructure.agent_folder.outbox import read_events
>>> agent_folder = Path(tempfile.mkdtemp()) / "agents" / "my_agent"
>>> entry = JournalEntry(seq=1, kind="gate", at_s=1.0, served="c1")
>>> ids = announce_journal(agent_folder / "checkpoints", [entry], committed_now=True)
>>> ids == [journal_event_id("my_agent", entry)], catch_up(agent_folder / "checkpoints", [entry])
(True, [])
>>> [(e.id in ids, e.kind) for e in read_events(agent_folder)]
[(True, 'promote')]
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import (
    CANDIDATES_FOLDER,
    CHECKPOINTS_FOLDER,
    OUTBOX_EVENT,
    OUTBOX_FOLDER,
    OUTBOX_STAGED_FOLDER,
    OUTBOX_STATE,
    VERDICT,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    JournalEntry,
    Outcome,
    Verdict,
)
from genesis_fp16_infrastructure.agent_folder.outbox import (
    EVENT_NAME,
    OutboxState,
    kept_state,
    new_event,
    outbox_lock,
    parse_event,
    parse_state,
    state_path,
)
from genesis_fp16_infrastructure.agent_folder.outbox_event import Event

# The journal's kinds (a serve's ``how``, ``rollback``, ``unpin``, ``repair``) become these
# events; ``trim`` (prune shortening the history) is bookkeeping, never announced.
PROMOTE_HOWS = ("first", "gate", "manual")
UNANNOUNCED = ("trim",)


def agent_folder_of(checkpoint_folder: Path) -> Path | None:
    """The agent folder of a state folder's checkpoint folder
    (``<state>/agents/<agent>/checkpoints``); None for a checkpoint folder elsewhere (a
    library user's own), which has no outbox: nothing is owed there. The lifecycle hands
    the catch-up checkpoint folders; the outbox itself takes agent folders."""
    folder = Path(checkpoint_folder)
    return folder.parent if folder.name == CHECKPOINTS_FOLDER else None


def journal_event_id(agent: str, entry: JournalEntry) -> str:
    """A journal entry's event id: the same whoever copies it, and again after a kill."""
    key = f"{agent}\0{entry.seq}\0{entry.at_s!r}\0{entry.kind}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def announce_journal(
    checkpoint_folder: Path,
    journal: Sequence[JournalEntry],
    committed_now: bool,
    decided: Sequence[Step] = (),
) -> list[str]:
    """Copy the pointer journal's entries the outbox lacks into it, oldest first; the
    caller holds the pointer's lock. A state folder's first outbox takes the journal as it
    stands as already announced (the transitions before events existed), except the newest
    entry when ``committed_now`` (the caller's transition just wrote it). ``decided``: the
    writes that decide what the events announce (a commit's pointer and the verdicts its
    journal decided), written first, in the same ordered pass. Returns the ids written."""
    return _catch_up(checkpoint_folder, False, [Announced(journal, committed_now, decided)])


@dataclass(frozen=True)
class Announced:
    """A journal whose entries the outbox lacks are copied in one catch-up's pass:
    ``verdicts``, a commit's verdict files (candidate, verdict as decided), then
    ``decided``, the writes that decide what the entries announce (its pointer, the
    verdicts its journal decided), written just before them, in that order;
    ``committed_now``: its newest entry was just committed (a first outbox takes the rest
    as history). A verdict that :func:`announces` is written with its own event staged
    before it and moved into the outbox after it (:func:`_verdict_steps`)."""

    journal: Sequence[JournalEntry]
    committed_now: bool = False
    decided: Sequence[Step] = ()
    verdicts: Sequence[tuple[Path, Verdict]] = ()

    def announcing(self) -> bool:
        """Whether one of its verdicts has an event of its own (:func:`announces`)."""
        return any(announces(c, v.outcome) for c, v in self.verdicts)


VERDICT_KINDS: dict[str, str] = {Outcome.REJECTED: "reject", Outcome.HELD: "hold"}
# What a verdict's event carries (its comparisons' details stay in verdict.json).
VERDICT_KEYS = (
    "outcome",
    "reason",
    "precision",
    "served_id",
    "candidate",
    "served",
    "checkpoint",
    "decided_at",
)


def verdict_event_id(agent: str, candidate_id: str, verdict: Mapping[str, Json]) -> str:
    """A verdict's event id: the same whoever copies it, and again after a kill; another
    for another verdict of the same candidate (held, then rejected), which has its own
    decision time (``decided_at_s``, stamped by ``candidates.write_verdict``)."""
    when = verdict.get("decided_at_s", verdict.get("decided_at"))
    key = f"verdict\0{agent}\0{candidate_id}\0{verdict.get('outcome')}\0{when!r}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# A verdict's event is staged before its verdict file is written and released into the
# outbox after it, the outbox's lock held throughout (one fsync of the verdict file): a
# staged event a catch-up finds is a dead writer's, released if the verdict file says
# what it announces, else discarded. So a catch-up is one listing of an empty folder.


def announces(candidate: Path, outcome: str | None) -> bool:
    """Whether a verdict ``outcome`` of ``candidate`` has an event of its own, staged and
    released around its file (:func:`verdict_announced`): a rejection's or a hold's, in a
    state folder."""
    return (
        str(outcome) in VERDICT_KINDS and agent_folder_of(Path(candidate).parent.parent) is not None
    )


@contextmanager
def verdict_announced(candidate: Path, verdict: Mapping[str, Json]) -> Iterator[None]:
    """Around the write of ``verdict`` (as its file will hold it) to ``candidate`` (a
    state folder's ``<checkpoints>/candidates/<id>``), under the outbox's lock: a
    rejection's or a hold's event is staged before, and moved into the outbox once the
    block wrote the file; a block that raises leaves it staged, for the next catch-up to
    release or discard by what the file says. Any other verdict (a promotion's and a
    rollback's are the pointer journal's) or folder: nothing."""
    agent_folder = agent_folder_of(Path(candidate).parent.parent)
    kind = VERDICT_KINDS.get(str(verdict.get("outcome")))
    if agent_folder is None or kind is None:
        yield
        return
    with outbox_lock(agent_folder) as lock:
        staged = stage_verdict(agent_folder, lock, Path(candidate).name, kind, verdict)
        yield
        release_verdict(staged)


def stage_verdict(
    agent_folder: Path, lock: int, ident: str, kind: str, verdict: Mapping[str, Json]
) -> Path:
    """Write the ``kind`` event announcing ``verdict`` of the candidate ``ident`` to
    ``outbox/staged/`` (the caller holds ``lock``, the outbox's); returns its file."""
    steps, _ = _owed(agent_folder, lock, True, [], [])  # a dead writer's, by its file
    event = _staged_event(agent_folder, ident, kind, verdict)
    made = new_event(agent_folder, lock, kind, event.data, event.event_id, event.folder)
    files.write_in_order([*steps, made])
    return made.path


def _staged_event(
    agent_folder: Path, ident: str, kind: str, verdict: Mapping[str, Json]
) -> NewEvent:
    """The ``kind`` event announcing ``verdict`` of the candidate ``ident``, to write to
    ``outbox/staged/`` (made there: the folder, under the outbox's lock)."""
    data = {"candidate_id": ident, **{k: verdict[k] for k in VERDICT_KEYS if k in verdict}}
    event_id = verdict_event_id(agent_folder.name, ident, verdict)
    staged = agent_folder / OUTBOX_FOLDER / OUTBOX_STAGED_FOLDER
    staged.mkdir(exist_ok=True)
    return NewEvent(kind, data, event_id, staged)


def _staged_path(agent_folder: Path, event: NewEvent) -> Path:
    """Where the staged ``event`` is written (``outbox.new_event``'s file name)."""
    return (event.folder or agent_folder / OUTBOX_FOLDER) / f"{event.event_id}.json"


def _released(staged: Path) -> files.Move:
    """The staged event's move into the outbox (none if a copy is there already)."""
    return files.Move(staged, staged.parent.parent / staged.name)


def release_verdict(staged: Path) -> str:
    """Move the staged event into the outbox (one rename; none if a copy is there
    already); returns its id."""
    files.write_in_order([_released(staged)])
    return staged.stem


def announce_verdicts(checkpoint_folder: Path) -> list[str]:
    """Settle the verdict events a killed writer left staged: each whose candidate's
    verdict file says what it announces is moved into the outbox (under a new order
    number, unless the outbox holds it or pruned it), the others are discarded: nothing
    announced that was not decided. Without a lock when none is staged (one listing).
    Returns the ids moved."""
    return _catch_up(checkpoint_folder, True, [])


def catch_up(
    checkpoint_folder: Path,
    found: Sequence[JournalEntry] | None,
    rolled: Mapping[str, Verdict] | None = None,
    committed: Announced | None = None,
    rolled_writes: Sequence[Step] = (),
) -> list[str]:
    """A transaction's one pass into the outbox, under the pointer's lock (the module
    docstring of :mod:`.transaction` says why its order is the order of two passes):
    first ``rolled_writes``, the verdicts the settle rolls forward (``rolled``, by
    candidate id: taken as their files say, not read); then what a killed writer left
    the outbox lacking, when the transaction settled (``found``: the pointer's journal as
    it found it; None: not settled): the verdict events left staged, each settled by its
    candidate's verdict file, then that journal's events; then the commit's
    (``committed``: its verdicts, a rejection's or a hold's with its own event staged
    before and moved in after, then its other writes, then its journal's events).
    Returns the ids of the journal's and the settled events written, in that order."""
    settled = [] if found is None else [Announced(found)]
    rounds = settled if committed is None else [*settled, committed]
    # A commit that stages an event settles what a dead writer left staged first, as
    # every staging does (stage_verdict).
    staged = found is not None or (committed is not None and committed.announcing())
    return _catch_up(checkpoint_folder, staged, rounds, rolled, list(rolled_writes))


def write_announced(candidate: Path, verdict: Verdict) -> None:
    """``verdict`` (as decided: stamped) written to ``candidate``, a rejection's or a
    hold's event staged before and released after (:func:`verdict_announced`)."""
    decided = verdict.to_json()
    with verdict_announced(candidate, decided):  # in the outbox before it is logged
        files.write_json(VERDICT.at(candidate), VERDICT, decided)


Step = files.Write | files.Remove | files.Move


def _catch_up(
    checkpoint_folder: Path,
    staged: bool,
    rounds: Sequence[Announced],
    rolled: Mapping[str, Verdict] | None = None,
    first: Sequence[Step] = (),
) -> list[str]:
    """The events the outbox lacks, in one ordered pass: ``first`` (the settle's
    verdicts, ``rolled``: taken as their files say), the events a killed writer left
    staged (when ``staged``), then each round's writes and its journal's events. Without
    the lock when no event is owed (one listing of ``staged/``, one stat per journal
    entry); else under it, read and decided (:func:`_owed`) before anything is written."""
    agent_folder = agent_folder_of(checkpoint_folder)
    owed = None if agent_folder is None else _owes(agent_folder, rounds, staged)
    written: list[str] = []
    with ExitStack() as held:
        if agent_folder is not None and owed is not None:  # read and decided under the lock
            lock = held.enter_context(outbox_lock(agent_folder))
            made, written = _owed(agent_folder, lock, staged, rounds, owed, rolled)
            steps = [*first, *made]
        else:  # no verdict with an event of its own
            steps = [*first, *(s for r in rounds for s in _plain_writes(r))]
        if steps:  # no call to write nothing
            files.write_in_order(steps)
    return written


Owed = tuple[list[tuple[str, JournalEntry]], list[tuple[str, JournalEntry]]]


def _owes(agent_folder: Path, rounds: Sequence[Announced], staged: bool) -> list[Owed] | None:
    """Each round's journal's announced entries with their event ids, and those the
    outbox lacks; None when nothing is owed (no entry missing, none staged when
    ``staged``)."""
    agent, root = agent_folder.name, os.fspath(agent_folder / OUTBOX_FOLDER)  # plain strings:
    # pathlib's parsing cost more than the stats themselves, on every transition
    owed: list[Owed] = []
    for announced in rounds:
        journal = announced.journal
        entries = [(journal_event_id(agent, e), e) for e in journal if e.kind not in UNANNOUNCED]
        # At most transitions.JOURNAL_KEEP entries, one stat each; all there: nothing to
        # take the lock for (an event file is only ever added, or pruned and named in
        # outbox.json).
        missing = [(i, e) for i, e in entries if not os.path.lexists(f"{root}/{i}.json")]
        owed.append((entries, missing))
    if (
        not any(m for _, m in owed)
        and not (staged and _any_staged(f"{root}/{OUTBOX_STAGED_FOLDER}"))
        and not any(r.announcing() for r in rounds)
    ):
        return None
    return owed


def _any_staged(staged: str) -> bool:
    """Whether ``staged/`` holds an event or a killed staging's temp file (files set
    aside, reported when they were, hold nothing up)."""
    try:
        names = os.listdir(staged)
    except OSError:
        return False
    return any(EVENT_NAME.match(n) or n.startswith(".tmp-") for n in names)


@dataclass(frozen=True)
class _Found:
    """What a catch-up needs of the folder, read in one pass under the outbox's lock:
    each entry of ``staged/`` (sorted) with the event it holds (None: a killed staging's
    temp file, or no event: set aside when unusable), the verdict file of each candidate
    those events name (None: no such candidate or verdict), the outbox's state, and the
    ids asked for that the outbox holds already."""

    staged: list[tuple[Path, Event | None]]
    said: dict[str, Verdict | None]
    state: OutboxState | None
    present: set[str]


def _read(
    agent_folder: Path,
    staged: bool,
    ids: Iterable[str],
    rolled: Mapping[str, Verdict] | None = None,
) -> _Found:
    """:class:`_Found` (the caller holds the outbox's lock: what is staged is a dead
    writer's; a live one holds the lock); ``rolled``: verdicts about to be written, taken
    as their files' (not read)."""
    root = agent_folder / OUTBOX_FOLDER
    folder, kept = (
        root / OUTBOX_STAGED_FOLDER,
        agent_folder / CHECKPOINTS_FOLDER / CANDIDATES_FOLDER,
    )
    try:
        names = sorted(os.listdir(folder)) if staged else []
    except OSError:
        names = []
    paths = [folder / n for n in names if EVENT_NAME.match(n)]
    read = files.load_each(paths, OUTBOX_EVENT, parse_event) if paths else []
    events = dict(zip(paths, read, strict=True))
    named = {str(e.data.get("candidate_id")) for e in events.values() if e is not None}
    plain = [n for n in sorted(named) if Path(n).name == n and n not in ("", ".", "..")]
    said: dict[str, Verdict | None] = {n: v for n, v in (rolled or {}).items() if n in named}
    unread = [n for n in plain if n not in said]
    said_paths = [kept / n / VERDICT.name for n in unread]
    verdicts = files.load_each(said_paths, VERDICT, _verdict) if said_paths else []
    said.update(zip(unread, verdicts, strict=True))
    state = files.load(root / OUTBOX_STATE.name, OUTBOX_STATE, parse_state)
    asked = [*(e.id for e in events.values() if e is not None), *ids]
    return _Found(
        staged=[(folder / n, events.get(folder / n)) for n in names],
        said=said,
        state=state,
        present={i for i in asked if os.path.lexists(root / f"{i}.json")},
    )


def _verdict(_path: Path, data: Any) -> Verdict:
    return Verdict.from_json(data)


def _owed(
    agent_folder: Path,
    lock: int,
    staged: bool,
    rounds: Sequence[Announced],
    owed: Sequence[Owed],
    rolled: Mapping[str, Verdict] | None = None,
) -> tuple[list[Step], list[str]]:
    """Under the outbox's ``lock``: what the folder holds read once (:func:`_read`), then
    the writes, in their order, and the ids they announce. What a killed writer left
    staged, settled (when ``staged``: :func:`_settled`); then each round's writes
    and its journal's events the outbox lacks (``owed``: :func:`_owes`, one per round),
    as a pass of its own after the one before would find them: after the first outbox's
    state when there is none yet (the journal's announced entries taken as history, but
    the newest when ``committed_now``). ``rolled``: verdicts the caller wrote first,
    taken as their candidates' files. Every write is decided first; the events are made
    last, in the pass's order, so their order numbers follow it."""
    found = _read(agent_folder, staged, [i for _, m in owed for i, _ in m], rolled)
    planned, written = _settled(agent_folder.name, found)
    kept, present = found.state, found.present
    for announced, (entries, missing) in zip(rounds, owed, strict=True):
        planned.extend(_round_writes(agent_folder, announced))
        # What an earlier round wrote is there now, as a second pass would find it.
        lacking = [(i, e) for i, e in missing if i not in present and i not in written]
        if lacking and kept is None:  # the first outbox: earlier transitions are history
            before = entries[:-1] if announced.committed_now else entries
            kept = kept_state(OutboxState(pruned=[i for i, _ in before], dropped=0))
            planned.append(files.Write(state_path(agent_folder), OUTBOX_STATE, kept))
        pruned = set() if kept is None else set(kept["pruned"])
        for event_id, entry in lacking:
            if event_id not in pruned:
                kind = "promote" if entry.kind in PROMOTE_HOWS else entry.kind
                data = {k: v for k, v in entry.to_json().items() if k != "at_s"}
                planned.append(NewEvent(kind, data, event_id))
                written.append(event_id)
    # The events made last, in the pass's order: their order numbers follow it.
    made = (
        new_event(agent_folder, lock, p.kind, p.data, p.event_id, p.folder)
        if isinstance(p, NewEvent)
        else p
        for p in planned
    )
    return list(made), written


def _settled(agent: str, found: _Found) -> tuple[list[Step | NewEvent], list[str]]:
    """What a killed writer left staged (``found``, read under the outbox's lock), settled:
    each event moved in when its candidate's verdict file says what it announces and the
    outbox neither holds nor pruned it, then removed (a killed staging's temp file removed
    too; what is no event left, set aside when read). Returns the writes and the ids."""
    state = found.state or OutboxState(pruned=[], dropped=0)
    planned: list[Step | NewEvent] = []
    written: list[str] = []
    for path, event in found.staged:
        if path.name.startswith(".tmp-"):  # a writer killed before its staged file's rename
            planned.append(files.Remove(path))
        if event is None:
            continue
        ident = str(event.data.get("candidate_id"))
        said = found.said.get(ident)
        decided = said is not None and event.id == verdict_event_id(agent, ident, said.to_json())
        if decided and event.id not in state["pruned"] and event.id not in found.present:
            planned.append(NewEvent(event.kind, event.data, event.id))
            written.append(event.id)
        planned.append(files.Remove(path))
    return planned, written


@dataclass(frozen=True)
class NewEvent:
    """An event a pass writes (in ``folder``: the outbox when None), made
    (``outbox.new_event``, under the next order number) once the pass's writes are all
    decided."""

    kind: str
    data: Mapping[str, Json]
    event_id: str
    folder: Path | None = None


def _plain_writes(announced: Announced) -> list[Step]:
    """A round's writes before its journal's events when none of its verdicts has an
    event of its own (no lock taken): its verdicts' files, then ``decided``."""
    verdicts = [files.Write(VERDICT.at(c), VERDICT, v.to_json()) for c, v in announced.verdicts]
    return [*verdicts, *announced.decided]


def _round_writes(agent_folder: Path, announced: Announced) -> list[Step | NewEvent]:
    """A round's writes before its journal's events (the outbox's lock held): each of its
    verdicts' files, in order, a rejection's or a hold's (:func:`announces`) with its
    event staged before it and moved into the outbox after it, as
    :func:`verdict_announced` writes one on its own; then ``decided``."""
    steps: list[Step | NewEvent] = []
    for candidate, verdict in announced.verdicts:
        decided = verdict.to_json()
        write = files.Write(VERDICT.at(candidate), VERDICT, decided)
        kind = VERDICT_KINDS.get(str(verdict.outcome))
        if kind is None or not announces(candidate, verdict.outcome):
            steps.append(write)
            continue
        event = _staged_event(agent_folder, Path(candidate).name, kind, decided)
        steps += [event, write, _released(_staged_path(agent_folder, event))]
    return [*steps, *announced.decided]
