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

- A pointer transition (serve, rollback, unpin, repair) and a rejection or a hold: their
  events are what the lifecycle's durable records owe the outbox, copied by the catch-up
  (agent_folder.outbox_catch_up, which says why a kill -9 cannot lose one): written
  through :func:`new_event` under this outbox's lock, in its ordered pass.
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
it) is fsynced.

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

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.agent_folder.layout import (
    OUTBOX_EVENT,
    OUTBOX_FOLDER,
    OUTBOX_LOCK,
    OUTBOX_STATE,
)
from genesis_fp16_infrastructure.agent_folder.lock import take_lock
from genesis_fp16_infrastructure.agent_folder.outbox_event import VERSION as VERSION
from genesis_fp16_infrastructure.agent_folder.outbox_event import Attempt as Attempt
from genesis_fp16_infrastructure.agent_folder.outbox_event import Event
from genesis_fp16_infrastructure.agent_folder.outbox_event import Target as Target

KEEP_PRUNED_IDS = 256  # journal events pruned, remembered so that no catch-up copies them back
ATTEMPTS_KEPT = 50  # each event's delivery log: the newest attempts
# An event's file name: its id (what the catch-up's listing of ``staged/`` matches too).
EVENT_NAME = re.compile(r"^(?P<id>[0-9a-f]{16})\.json$")


def outbox_of(agent_folder: Path) -> Path:
    return Path(agent_folder) / OUTBOX_FOLDER


@contextmanager
def outbox_lock(agent_folder: Path) -> Iterator[int]:
    """Hold the outbox's flock (its descriptor: the file holds the last order number
    given): held for one small write, never across a delivery. Taken after the pointer's
    lock where both are held, never before it."""
    path = outbox_of(agent_folder) / OUTBOX_LOCK.name  # its folder made by take_lock
    fd = take_lock(path, OUTBOX_LOCK)
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
    """Write one new event (:func:`new_event`); returns its id."""
    files.write_in_order([new_event(agent_folder, lock, kind, data, event_id, folder)])
    return event_id


def new_event(
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


class OutboxState(TypedDict):
    """``outbox.json``, as its JSON object: the ids of the journal events pruned (the
    newest ``KEEP_PRUNED_IDS``: no catch-up copies them back), and the count of events
    dropped undelivered."""

    pruned: list[str]
    dropped: int


def state_path(agent_folder: Path) -> Path:
    """``outbox.json``'s path (a catch-up writes the first one in its ordered pass)."""
    return outbox_of(agent_folder) / OUTBOX_STATE.name


def read_state(agent_folder: Path) -> OutboxState | None:
    """``outbox.json``: the ids of journal events pruned, and the count of events dropped
    undelivered; None when there is none (or it was unusable: set aside, reported)."""
    return files.load(state_path(agent_folder), OUTBOX_STATE, parse_state)


def write_state(agent_folder: Path, state: OutboxState) -> OutboxState:
    kept = kept_state(state)
    files.write_json(state_path(agent_folder), OUTBOX_STATE, kept)
    return kept


def kept_state(state: OutboxState) -> OutboxState:
    """The state as written: the newest ``KEEP_PRUNED_IDS`` ids pruned."""
    return OutboxState(
        pruned=list(state["pruned"])[-KEEP_PRUNED_IDS:], dropped=int(state["dropped"])
    )


def parse_state(data: Any) -> OutboxState:
    if not isinstance(data.get("pruned"), list) or not isinstance(data.get("dropped"), int):
        raise TypeError("an outbox state needs 'pruned' (a list) and 'dropped' (a number)")
    return OutboxState(pruned=[str(i) for i in data["pruned"]], dropped=data["dropped"])


def event_names(agent_folder: Path) -> list[str]:
    """The event files' names (their ids), in no order: the order is in each file."""
    try:
        found = os.listdir(outbox_of(agent_folder))
    except FileNotFoundError:
        return []
    return [name for name in found if EVENT_NAME.match(name)]


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
    return files.load(Path(path), OUTBOX_EVENT, lambda data: parse_event(Path(path), data))


def parse_event(path: Path, data: Any) -> Event:
    """The event a file holds; an attempt that is no object (a hand's) left out."""
    found = EVENT_NAME.match(path.name)
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
    return path if EVENT_NAME.match(path.name) and os.path.lexists(path) else None


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
