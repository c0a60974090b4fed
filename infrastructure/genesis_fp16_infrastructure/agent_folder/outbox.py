"""The agent's event outbox: every promotion, rejection, hold, rollback, pin, unpin,
repair, demotion and fault bundle, written durably in the agent's folder before the
action is reported done, then delivered at least once by the daemon
(``genesis_fp16.events``), each delivery attempt logged in the event's own file, as
GitHub logs its webhook deliveries::

    <state_dir>/agents/<agent>/outbox/
        .lock              the outbox's flock; it holds the last order number given
        <id>.json          one event (16 hex digits: its id, the receivers' idempotency
                           key), its order, its receivers and its delivery log
        outbox.json        ids of journal events pruned, events dropped undelivered
        staged/<id>.json   a rejection's or hold's event while its verdict file is written

Each event carries an order number (nanoseconds, strictly increasing per agent, given
under the lock), which orders the agent's events for delivery.

Where the event is written, and what a kill -9 does:

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
  after it, the outbox's lock held throughout (:func:`verdict_announced`), so before any
  log line or metric says so. A staged event is a killed writer's (a live one holds the
  lock), and the next owner call (where the journal's copies are made:
  :func:`announce_verdicts`) or verdict writer settles it by what the verdict file says:
  moved in if it says that verdict (a kill after the file), discarded if not (a kill
  before it). Never twice, never one pruned meanwhile; a verdict of a state folder from
  before this was never staged and is never announced. With nothing staged a catch-up
  is one listing of an empty folder, whatever the candidates kept.
- A demotion and a fault bundle (the daemon's record of a run): the event is written
  right after the record it announces and before any log line or metric says so
  (:func:`record`). A kill between the two writes (microseconds) loses that one
  announcement (no journal, no record a catch-up reads); it never announces what did not
  happen.

An event's first write is atomic (a temp file renamed) but not fsynced: an fsync costs
4-16 ms on the 2-core test machine, more than the 5 ms a transition may add
(benchmarks/event_outbox.py). A killed process's writes are in the page cache all the
same; against a power cut, a transition's event is in the fsynced journal, and the
daemon's first write of every event (addressing it to the receivers, within a second of
it) is fsynced. A staged verdict event is not: a power cut within that second can keep a
rejection's fsynced verdict file and lose its event.

The outbox is bounded by the daemon (:func:`prune`): delivered events beyond the newest
``keep`` are removed; undelivered ones are never removed silently: past ``limit`` events
the oldest undelivered are dropped, counted in ``outbox.json`` and reported.

Standard library only: the retrain recipe (in a run's child process), the operator's
``model`` command and the daemon all write here.

>>> import tempfile
>>> agent_folder = Path(tempfile.mkdtemp()) / "agents" / "my_agent"
>>> event_id = record(agent_folder, "demotion", {"from": "fp16", "to": "bf16"})
>>> [(e.id == event_id, e.kind, e.status) for e in read_events(agent_folder)]
[(True, 'demotion', 'new')]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import (
    CANDIDATES_FOLDER,
    CHECKPOINTS_FOLDER,
    OUTBOX_EVENT,
    OUTBOX_FOLDER,
    OUTBOX_LOCK,
    OUTBOX_STAGED_FOLDER,
    OUTBOX_STATE,
    VERDICT,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import (
    JournalEntry,
    Outcome,
    Verdict,
)
from genesis_fp16_infrastructure.agent_folder.lock import take_lock
from genesis_fp16_infrastructure.agent_folder.outbox_event import VERSION as VERSION
from genesis_fp16_infrastructure.agent_folder.outbox_event import Attempt as Attempt
from genesis_fp16_infrastructure.agent_folder.outbox_event import Event
from genesis_fp16_infrastructure.agent_folder.outbox_event import Target as Target

# The journal's kinds (a serve's ``how``, ``rollback``, ``unpin``, ``repair``) become these
# events; ``trim`` (prune shortening the history) is bookkeeping, never announced.
PROMOTE_HOWS = ("first", "gate", "manual")
UNANNOUNCED = ("trim",)
KEEP_PRUNED_IDS = 256  # journal events pruned, remembered so that no catch-up copies them back
ATTEMPTS_KEPT = 50  # each event's delivery log: the newest attempts
_EVENT_NAME = re.compile(r"^(?P<id>[0-9a-f]{16})\.json$")


def outbox_of(agent_folder: Path) -> Path:
    return Path(agent_folder) / OUTBOX_FOLDER


def agent_folder_of(checkpoint_folder: Path) -> Path | None:
    """The agent folder of a state folder's checkpoint folder
    (``<state>/agents/<agent>/checkpoints``); None for a checkpoint folder elsewhere (a
    library user's own), which has no outbox."""
    folder = Path(checkpoint_folder)
    return folder.parent if folder.name == CHECKPOINTS_FOLDER else None


@contextmanager
def outbox_lock(agent_folder: Path) -> Iterator[int]:
    """Hold the outbox's flock (its descriptor: the file holds the last order number
    given): held for one small write, never across a delivery. Taken after the pointer's
    lock where both are held, never before it."""
    fd = take_lock(outbox_of(agent_folder) / OUTBOX_LOCK.name, OUTBOX_LOCK)
    try:
        yield fd
    finally:
        os.close(fd)


def record(agent_folder: Path, kind: str, data: Mapping[str, Json]) -> str:
    """Write one event (fsynced, atomic) under a random id and return the id."""
    with outbox_lock(agent_folder) as lock:
        return _write_new(agent_folder, lock, kind, data, uuid.uuid4().hex[:16])


def _next_order(lock: int) -> int:
    """The next order number: the clock's nanoseconds, past the last one given (kept in
    the lock file, which only the lock's holder reads or writes)."""
    said = os.pread(lock, 32, 0).decode("ascii", "replace").strip()
    order = max(time.time_ns(), (int(said) if said.isdigit() else 0) + 1)
    os.pwrite(lock, f"{order:023d}\n".encode(), 0)
    return order


def _write_new(
    agent_folder: Path,
    lock: int,
    kind: str,
    data: Mapping[str, Json],
    event_id: str,
    folder: Path | None = None,
) -> str:
    """Write one new event (:func:`_new_event`); returns its id."""
    files.write_in_order([_new_event(agent_folder, lock, kind, data, event_id, folder)])
    return event_id


def _new_event(
    agent_folder: Path,
    lock: int,
    kind: str,
    data: Mapping[str, Json],
    event_id: str,
    folder: Path | None = None,
) -> files.Write:
    """The event's file, under the next order number (the caller holds ``lock``), in the
    outbox (``folder``: elsewhere, a verdict's event staged), to be written atomically (a
    temp file renamed: a reader finds all of it or nothing) without an fsync (the module
    docstring says why and what covers it)."""
    order, now = _next_order(lock), time.time()
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    path = (folder or outbox_of(agent_folder)) / f"{event_id}.json"
    agent = Path(agent_folder).name
    event = Event(event_id, agent, kind, at, now, order, dict(data), None, (), path)
    text = json.dumps(event.to_json(), sort_keys=True).encode()
    return files.Write(path, OUTBOX_EVENT, text, sync=False)


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
    return _catch_up(checkpoint_folder, journal, committed_now, False, decided)


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
    data = {"candidate_id": ident, **{k: verdict[k] for k in VERDICT_KEYS if k in verdict}}
    event_id = verdict_event_id(agent_folder.name, ident, verdict)
    staged = outbox_of(agent_folder) / OUTBOX_STAGED_FOLDER
    staged.mkdir(exist_ok=True)
    steps, _ = _owed(agent_folder, lock, True, [], [], False)  # a dead writer's, by its file
    files.write_in_order([*steps, _new_event(agent_folder, lock, kind, data, event_id, staged)])
    return staged / f"{event_id}.json"


def release_verdict(staged: Path) -> str:
    """Move the staged event into the outbox (one rename; none if a copy is there
    already); returns its id."""
    final = staged.parent.parent / staged.name
    if os.path.lexists(final):
        staged.unlink(missing_ok=True)
    else:
        os.replace(staged, final)
    return staged.stem


def announce_verdicts(checkpoint_folder: Path) -> list[str]:
    """Settle the verdict events a killed writer left staged: each whose candidate's
    verdict file says what it announces is moved into the outbox (under a new order
    number, unless the outbox holds it or pruned it), the others are discarded: nothing
    announced that was not decided. Without a lock when none is staged (one listing).
    Returns the ids moved."""
    return _catch_up(checkpoint_folder, (), False, staged=True)


def catch_up(
    checkpoint_folder: Path,
    journal: Sequence[JournalEntry],
    decided: Sequence[Step] = (),
    rolled: Mapping[str, Verdict] | None = None,
) -> list[str]:
    """What a killed writer left the outbox lacking, as a transaction settles it under
    the pointer's lock: the verdict events left staged (:func:`announce_verdicts`), then
    the pointer journal's events (:func:`announce_journal`; ``journal``: the pointer's as
    the transaction found it), under one lock of the outbox, read in one pass.
    ``decided``: the settle's own writes (the verdicts the journal decided and the
    candidates do not say yet), written first in the same ordered pass; ``rolled``: those
    verdicts by candidate id, what their files say once written (a staged event is
    settled by them, not by the files as read). Returns the ids written, in that order."""
    return _catch_up(checkpoint_folder, journal, False, True, decided, rolled)


Step = files.Write | files.Remove


def _catch_up(
    checkpoint_folder: Path,
    journal: Sequence[JournalEntry],
    committed_now: bool,
    staged: bool,
    decided: Sequence[Step] = (),
    rolled: Mapping[str, Verdict] | None = None,
) -> list[str]:
    """``decided`` (the caller's writes), then the events the outbox lacks: those a
    killed writer left staged (when ``staged``; ``rolled``: verdicts ``decided`` writes),
    then the journal's; all in one ordered pass. Without the lock when no event is owed
    (one listing of ``staged/``, one stat per journal entry); else under it, read and
    decided (:func:`_owed`) before anything is written."""
    agent_folder = agent_folder_of(checkpoint_folder)
    owed = None if agent_folder is None else _owes(agent_folder, journal, staged)
    steps: list[Step] = []
    written: list[str] = []
    with ExitStack() as held:
        if agent_folder is not None and owed is not None:  # read and decided under the lock
            lock = held.enter_context(outbox_lock(agent_folder))
            steps, written = _owed(agent_folder, lock, staged, *owed, committed_now, rolled)
        if decided or steps:  # no call to write nothing
            files.write_in_order([*decided, *steps])
    return written


Owed = tuple[list[tuple[str, JournalEntry]], list[tuple[str, JournalEntry]]]


def _owes(agent_folder: Path, journal: Sequence[JournalEntry], staged: bool) -> Owed | None:
    """The journal's announced entries with their event ids, and those the outbox lacks;
    None when nothing is owed (no entry missing, none staged when ``staged``)."""
    agent, root = agent_folder.name, os.fspath(outbox_of(agent_folder))  # plain strings:
    # pathlib's parsing cost more than the stats themselves, on every transition
    entries = [(journal_event_id(agent, e), e) for e in journal if e.kind not in UNANNOUNCED]
    # At most transitions.JOURNAL_KEEP entries, one stat each; all there: nothing to take
    # the lock for (an event file is only ever added, or pruned and named in outbox.json).
    missing = [(i, e) for i, e in entries if not os.path.lexists(f"{root}/{i}.json")]
    if not missing and not (staged and _any_staged(f"{root}/{OUTBOX_STAGED_FOLDER}")):
        return None
    return entries, missing


def _any_staged(staged: str) -> bool:
    """Whether ``staged/`` holds an event or a killed staging's temp file (files set
    aside, reported when they were, hold nothing up)."""
    try:
        names = os.listdir(staged)
    except OSError:
        return False
    return any(_EVENT_NAME.match(n) or n.startswith(".tmp-") for n in names)


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
    root = outbox_of(agent_folder)
    folder, kept = (
        root / OUTBOX_STAGED_FOLDER,
        agent_folder / CHECKPOINTS_FOLDER / CANDIDATES_FOLDER,
    )
    try:
        names = sorted(os.listdir(folder)) if staged else []
    except OSError:
        names = []
    paths = [folder / n for n in names if _EVENT_NAME.match(n)]
    read = files.load_each(paths, OUTBOX_EVENT, _event) if paths else []
    events = dict(zip(paths, read, strict=True))
    named = {str(e.data.get("candidate_id")) for e in events.values() if e is not None}
    plain = [n for n in sorted(named) if Path(n).name == n and n not in ("", ".", "..")]
    said: dict[str, Verdict | None] = {n: v for n, v in (rolled or {}).items() if n in named}
    unread = [n for n in plain if n not in said]
    said_paths = [kept / n / VERDICT.name for n in unread]
    verdicts = files.load_each(said_paths, VERDICT, _verdict) if said_paths else []
    said.update(zip(unread, verdicts, strict=True))
    state = files.load(root / OUTBOX_STATE.name, OUTBOX_STATE, _state)
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
    entries: Sequence[tuple[str, JournalEntry]],
    missing: Sequence[tuple[str, JournalEntry]],
    committed_now: bool,
    rolled: Mapping[str, Verdict] | None = None,
) -> tuple[list[Step], list[str]]:
    """Under the outbox's ``lock``: what the folder holds read once (:func:`_read`), then
    the writes the outbox lacks, in their order, and the ids they announce. Each staged
    event (when ``staged``) is moved in when its candidate's verdict file says what it
    announces and the outbox neither holds nor pruned it, then removed (a killed
    staging's temp file removed too; what is no event left, set aside when read); then
    the journal's ``missing`` events, after the first outbox's state (``entries``, the
    journal's announced ones, taken as history but the newest when ``committed_now``).
    ``rolled``: verdicts the caller writes first, taken as their candidates' files."""
    found = _read(agent_folder, staged, [i for i, _ in missing], rolled)
    state = found.state or OutboxState(pruned=[], dropped=0)
    steps: list[Step] = []
    written: list[str] = []
    for path, event in found.staged:
        if path.name.startswith(".tmp-"):  # a writer killed before its staged file's rename
            steps.append(files.Remove(path))
        if event is None:
            continue
        ident = str(event.data.get("candidate_id"))
        said = found.said.get(ident)
        decided = said is not None and event.id == verdict_event_id(
            agent_folder.name, ident, said.to_json()
        )
        if decided and event.id not in state["pruned"] and event.id not in found.present:
            steps.append(_new_event(agent_folder, lock, event.kind, event.data, event.id))
            written.append(event.id)
        steps.append(files.Remove(path))
    if missing and found.state is None:  # the first outbox: earlier transitions are history
        before = entries[:-1] if committed_now else entries
        state = _kept(OutboxState(pruned=[i for i, _ in before], dropped=0))
        steps.append(files.Write(_state_path(agent_folder), OUTBOX_STATE, state))
    for event_id, entry in missing:
        if event_id in state["pruned"] or event_id in found.present:
            continue
        kind = "promote" if entry.kind in PROMOTE_HOWS else entry.kind
        data = {k: v for k, v in entry.to_json().items() if k != "at_s"}
        steps.append(_new_event(agent_folder, lock, kind, data, event_id))
        written.append(event_id)
    return steps, written


class OutboxState(TypedDict):
    """``outbox.json``, as its JSON object: the ids of the journal events pruned (the
    newest ``KEEP_PRUNED_IDS``: no catch-up copies them back), and the count of events
    dropped undelivered."""

    pruned: list[str]
    dropped: int


def _state_path(agent_folder: Path) -> Path:
    return outbox_of(agent_folder) / OUTBOX_STATE.name


def read_state(agent_folder: Path) -> OutboxState | None:
    """``outbox.json``: the ids of journal events pruned, and the count of events dropped
    undelivered; None when there is none (or it was unusable: set aside, reported)."""
    return files.load(_state_path(agent_folder), OUTBOX_STATE, _state)


def write_state(agent_folder: Path, state: OutboxState) -> OutboxState:
    kept = _kept(state)
    files.write_json(_state_path(agent_folder), OUTBOX_STATE, kept)
    return kept


def _kept(state: OutboxState) -> OutboxState:
    """The state as written: the newest ``KEEP_PRUNED_IDS`` ids pruned."""
    return OutboxState(
        pruned=list(state["pruned"])[-KEEP_PRUNED_IDS:], dropped=int(state["dropped"])
    )


def _state(data: Any) -> OutboxState:
    if not isinstance(data.get("pruned"), list) or not isinstance(data.get("dropped"), int):
        raise TypeError("an outbox state needs 'pruned' (a list) and 'dropped' (a number)")
    return OutboxState(pruned=[str(i) for i in data["pruned"]], dropped=data["dropped"])


def event_names(agent_folder: Path) -> list[str]:
    """The event files' names (their ids), in no order: the order is in each file."""
    try:
        found = os.listdir(outbox_of(agent_folder))
    except FileNotFoundError:
        return []
    return [name for name in found if _EVENT_NAME.match(name)]


def _path(agent_folder: Path, event_id: str) -> Path:
    return outbox_of(agent_folder) / f"{event_id}.json"


def read_events(agent_folder: Path) -> list[Event]:
    """The agent's events, oldest first. An unusable file (torn by hand, not JSON, not an
    event) is set aside as ``<name>.unusable-*`` and reported (agent_folder.files), so the
    agent's later events are not held behind it."""
    events = []
    for name in event_names(agent_folder):
        event = read_event(outbox_of(agent_folder) / name)
        if event is not None:
            events.append(event)
    return sorted(events, key=lambda e: (e.order, e.id))


def read_event(path: Path) -> Event | None:
    return files.load(Path(path), OUTBOX_EVENT, lambda data: _event(Path(path), data))


def _event(path: Path, data: Any) -> Event:
    """The event a file holds; an attempt that is no object (a hand's) left out."""
    found = _EVENT_NAME.match(path.name)
    if found is None or data.get("id") != found["id"]:
        raise ValueError("not an outbox event named by its id")
    if isinstance(attempts := data.get("attempts"), list):
        data = {**data, "attempts": [a for a in attempts if isinstance(a, dict)]}
    return replace(Event.from_json(data), path=path)


Change = Callable[[Event], Event | None]


def update(agent_folder: Path, event_id: str, change: Change) -> Event | None:
    """Re-read the event ``event_id`` under the outbox's lock, apply ``change`` (None:
    leave it) and write what it returns back atomically; returns the event as it now
    stands (None: no such event, pruned meanwhile)."""
    with outbox_lock(agent_folder):
        path = find(agent_folder, event_id)
        current = None if path is None else read_event(path)
        if current is None:
            return None
        new = change(current)
        if new is None:
            return current
        if len(new.attempts) > ATTEMPTS_KEPT:
            new = replace(new, attempts=new.attempts[-ATTEMPTS_KEPT:])
        files.write_json(current.path, OUTBOX_EVENT, new.to_json())
        return new


def find(agent_folder: Path, event_id: str) -> Path | None:
    """The file of ``event_id`` in the agent's outbox, or None."""
    path = _path(agent_folder, event_id)
    return path if _EVENT_NAME.match(path.name) and os.path.lexists(path) else None


@dataclass(frozen=True)
class Pruned:
    removed: int  # delivered (or unsent) events past ``keep``
    dropped: int  # undelivered events past ``limit``, now counted in outbox.json


def prune(agent_folder: Path, keep: int, limit: int) -> Pruned:
    """Bound the outbox: the newest ``keep`` handled events stay (delivered, or unsent for
    want of a receiver), older ones are removed; undelivered ones stay unless the outbox
    holds more than ``limit`` events, when the oldest are dropped and counted."""
    with outbox_lock(agent_folder):
        events = read_events(agent_folder)
        done = [e for e in events if not e.undelivered]
        remove = done[: max(0, len(done) - keep)]
        waiting = [e for e in events if e.undelivered]
        over = max(0, len(events) - len(remove) - limit)
        drop = waiting[:over]
        if not remove and not drop:
            return Pruned(0, 0)
        state = read_state(agent_folder) or OutboxState(pruned=[], dropped=0)
        # Ids first: a kill after this write and before the removals removes nothing twice.
        state["pruned"] = [*state["pruned"], *(e.id for e in [*remove, *drop])]
        state["dropped"] += len(drop)
        write_state(agent_folder, state)
        for event in [*remove, *drop]:
            event.path.unlink(missing_ok=True)
        return Pruned(len(remove), len(drop))


@dataclass(frozen=True)
class Outbox:
    """One agent's outbox, as the daemon's delivery and the ``events`` command use it
    (``AgentFolder.outbox``): the module's functions on the agent folder ``agent_folder``.

    >>> import tempfile
    >>> box = Outbox(Path(tempfile.mkdtemp()) / "agents" / "my_agent")
    >>> event_id = box.record("demotion", {"from": "fp16", "to": "bf16"})
    >>> [(e.id == event_id, e.kind) for e in box.read_events()], box.find("0" * 16)
    ([(True, 'demotion')], None)
    """

    agent_folder: Path

    @property
    def root(self) -> Path:
        """The outbox's folder (``<agent folder>/outbox``): there may be none yet."""
        return outbox_of(self.agent_folder)

    def record(self, kind: str, data: Mapping[str, Json]) -> str:
        return record(self.agent_folder, kind, data)

    def event_names(self) -> list[str]:
        return event_names(self.agent_folder)

    def read_events(self) -> list[Event]:
        return read_events(self.agent_folder)

    def read_event(self, path: Path) -> Event | None:
        """The event in the file ``path`` of this outbox (one of :attr:`root`'s)."""
        return read_event(path)

    def read_state(self) -> OutboxState | None:
        return read_state(self.agent_folder)

    def find(self, event_id: str) -> Path | None:
        return find(self.agent_folder, event_id)

    def update(self, event_id: str, change: Change) -> Event | None:
        return update(self.agent_folder, event_id, change)

    def prune(self, keep: int, limit: int) -> Pruned:
        return prune(self.agent_folder, keep, limit)
