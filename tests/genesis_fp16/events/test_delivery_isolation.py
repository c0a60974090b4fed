"""No receiver and no agent's outbox stalls another's deliveries (issue 69): real loopback
receivers beside a good one, a full disk under one agent, a flood of events in one
agent's outbox, and a wall clock stepped back an hour."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webhook_receiver import RawReceiver, Receiver

from genesis_fp16.events import delivery
from genesis_fp16.events.delivery import Deliverer, DeliveryConfig, DeliveryThread
from genesis_fp16_infrastructure.agent_folder import files, outbox

SECRET = b"isolation-test-secret"
WITHIN_S = 5.0  # the bound: an event reaches the good receiver this soon after it is made
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Running:
    """A started DeliveryThread over ``state`` and ``urls``, stopped by :meth:`stop`."""

    def __init__(self, state: Path, urls: tuple[str, ...], **config: Any) -> None:
        settings = DeliveryConfig(state, urls, SECRET, **config)
        self.thread = DeliveryThread(Deliverer(lambda: settings))
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop(30.0)


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for found in started:
        found.stop()


def _made(state: Path, agent: str, made: dict[str, float]) -> str:
    """Record one event of ``agent``, noting when it was made (monotonic)."""
    event_id = outbox.record(state / "agents" / agent, "promote", {"agent": agent})
    made[event_id] = time.monotonic()
    return event_id


def _late(receiver: Receiver, made: dict[str, float]) -> dict[str, float]:
    """Each event of ``made`` that reached ``receiver`` more than WITHIN_S after it was
    made, with its delay (first arrival)."""
    first: dict[str, float] = {}
    for got in receiver.received:
        first.setdefault(got.event["id"], got.at)
    delays = {i: first[i] - at for i, at in made.items()}
    return {i: round(d, 2) for i, d in delays.items() if d > WITHIN_S}


def test_a_dripping_a_non_http_and_a_redirecting_receiver_cost_a_good_one_nothing(
    tmp_path: Path, receiver: Receiver, running: list[Running]
) -> None:
    """Beside a receiver that answers a byte a second, one that answers something not
    HTTP and one that answers 301, the good receiver gets every event of two agents
    within 5 s of its making, in order per agent; the bad ones' events stay pending."""
    drip = RawReceiver(OK, drip=1.0)
    not_http = RawReceiver(b"hello, I am not HTTP\r\n\r\n")
    moved = RawReceiver(b"HTTP/1.1 301 Moved\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")
    try:
        urls = (drip.url, not_http.url, moved.url, receiver.url)
        running.append(Running(tmp_path, urls, timeout=10.0))
        made: dict[str, float] = {}
        order: dict[str, list[str]] = {"a": [], "b": []}
        for _ in range(3):
            for agent in order:
                order[agent].append(_made(tmp_path, agent, made))
            time.sleep(1.0)
        receiver.wait_for(lambda: set(made) <= {e["id"] for e in receiver.events()}, "all", 120)
        assert _late(receiver, made) == {}
        for agent, ids in order.items():
            assert [e["id"] for e in receiver.events() if e["agent"] == agent] == ids
        assert set(moved.lines) == {"POST /hook HTTP/1.1"}  # the redirect never followed
        running.pop().stop()
        for agent in order:
            for event in outbox.read_events(tmp_path / "agents" / agent):
                targets = event.targets or {}
                assert targets[receiver.url].status == "delivered"
                assert {targets[u].status for u in urls[:3]} == {"pending"}
    finally:
        for server in (drip, not_http, moved):
            server.close()


def test_a_full_disk_under_one_agent_costs_another_nothing_and_posts_nothing_twice(
    tmp_path: Path, receiver: Receiver, running: list[Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent a's outbox refuses every delivery outcome (ENOSPC after the post): agent b's
    events arrive within 5 s each all the same, and a's event is posted once, not every
    second; once the disk has room, its file says delivered, still posted once."""
    full = os.fspath(outbox.outbox_of(tmp_path / "agents" / "a"))
    write_json = files.write_json

    def no_space(path: Path, file: files.StateFile, data: Any) -> None:
        if os.fspath(path).startswith(full) and data.get("attempts"):
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(path))
        write_json(path, file, data)

    monkeypatch.setattr(files, "write_json", no_space)
    running.append(Running(tmp_path, (receiver.url,)))
    made: dict[str, float] = {}
    stuck = outbox.record(tmp_path / "agents" / "a", "promote", {})
    for _ in range(3):
        _made(tmp_path, "b", made)
        time.sleep(1.0)
    receiver.wait_for(lambda: set(made) <= {e["id"] for e in receiver.events()}, "b's", 120)
    assert _late(receiver, made) == {}
    time.sleep(3.0)  # retried every second, it would be posted 3 more times by now
    assert [e["id"] for e in receiver.events()].count(stuck) == 1
    (event,) = outbox.read_events(tmp_path / "agents" / "a")
    assert event.status == "pending"  # the outcome is not written yet
    monkeypatch.setattr(files, "write_json", write_json)
    receiver.wait_for(
        lambda: outbox.read_events(tmp_path / "agents" / "a")[0].status == "delivered",
        "a's outcome written once the disk has room",
        120,
    )
    assert [e["id"] for e in receiver.events()].count(stuck) == 1


FLOOD_SHM_BYTES = 2**30  # the free memory /dev/shm must have for the flood to go there


@pytest.fixture
def memory_state(tmp_path: Path) -> Iterator[Path]:
    """A state folder in memory (tmpfs, /dev/shm) where there is one, else under tmp_path.

    The flood's 100,000 files are created and removed whoever removes them (the prune,
    pytest). On this sandbox's ext4 (online discard) each removal of a file with data
    costs about 1-3 ms of disk, minutes for the flood; in memory, the same outbox code
    and the same files cost seconds. benchmarks/event_outbox_flood.py runs the flood on
    disk."""
    shm = Path("/dev/shm")
    usable = shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)
    # The flood holds about 400 MB there (a page a file); a container's /dev/shm is often
    # 64 MB: too small, the flood goes to disk.
    if not usable or shutil.disk_usage(shm).free < FLOOD_SHM_BYTES:
        yield tmp_path / "state"
        return
    folder = Path(tempfile.mkdtemp(prefix="gfp16-flood-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _flood(state: Path, agent: str, count: int) -> None:
    """``count`` events in ``agent``'s outbox as its writer leaves them (not handled yet),
    written directly: outbox.record's lock per event would take minutes."""
    root = outbox.outbox_of(state / "agents" / agent)
    root.mkdir(parents=True)
    for n in range(count):
        event_id = f"f{n:015x}"
        event = {
            "version": outbox.VERSION,
            "id": event_id,
            "agent": agent,
            "kind": "promote",
            "at": "2026-11-26T00:00:00Z",
            "at_s": 1.0,
            "order": n + 1,
            "data": {"n": n},
            "targets": None,
            "attempts": [],
        }
        (root / f"{event_id}.json").write_text(json.dumps(event))


@pytest.mark.slow
def test_a_flood_in_one_agents_outbox_costs_another_nothing(
    memory_state: Path, receiver: Receiver, running: list[Running]
) -> None:
    """100,000 events in agent a's outbox (ten times the undelivered bound, so a's worker
    also prunes): agent b's events arrive within 5 s of their making all the same
    (benchmarks/event_outbox_flood.py times it under load, on disk)."""
    state = memory_state
    _flood(state, "a", 100_000)
    running.append(Running(state, (receiver.url,), keep=1000))
    made: dict[str, float] = {}
    for _ in range(4):
        _made(state, "b", made)
        time.sleep(1.0)
    receiver.wait_for(lambda: set(made) <= {e["id"] for e in receiver.events()}, "b's", 120)
    assert _late(receiver, made) == {}
    # a's worker pruned its outbox to the bound: counted, then its files removed; the
    # test stops it after that, not in its middle
    a = state / "agents" / "a"
    receiver.wait_for(
        lambda: (outbox.read_state(a) or {}).get("dropped") == 90_000, "a's outbox pruned", 300
    )
    receiver.wait_for(lambda: len(outbox.event_names(a)) <= 10_000, "a's files removed", 300)


def test_a_flooded_outbox_is_read_a_batch_a_turn_while_another_agent_is_served(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pass over two agents, a holding three batches of unread events: a's files are
    read at most READ_BATCH at a time, and b's event is delivered in that same pass; a's
    events follow, oldest first, once all of a's files are read."""
    monkeypatch.setattr(delivery, "READ_BATCH", 100)  # smaller batches, the same code
    monkeypatch.setattr(delivery, "ADDRESS_BATCH", 10)
    count = 3 * delivery.READ_BATCH
    _flood(tmp_path, "a", count)
    read: list[Path] = []
    read_event = outbox.read_event

    def counted(path: Path) -> outbox.Event | None:
        read.append(path)
        return read_event(path)

    monkeypatch.setattr(outbox, "read_event", counted)
    (b_id,) = [outbox.record(tmp_path / "agents" / "b", "promote", {})]
    settings = DeliveryConfig(tmp_path, (receiver.url,), SECRET, keep=10 * count)
    deliverer = Deliverer(lambda: settings)
    wait = deliverer.step()
    assert sum(p.parent.parent.name == "a" for p in read) <= delivery.READ_BATCH
    assert [e["id"] for e in receiver.events()] == [b_id]
    assert wait == 0.0  # a's files are left to read: the next turn at once
    deadline = time.monotonic() + 300
    while len(receiver.events()) < 11 and time.monotonic() < deadline:
        deliverer.step()
    got = [e["data"]["n"] for e in receiver.events() if e["agent"] == "a"]
    assert got[:10] == list(range(10))  # a's oldest first, once all its files were read


def test_a_wall_clock_stepped_back_an_hour_does_not_delay_a_retry(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused attempt backs off 1 s; the wall clock then steps back an hour and the
    receiver comes back: the event is delivered within seconds, not an hour. A new
    deliverer (a restart) reading the retry time the old wall clock wrote waits at most
    one capped backoff."""
    real = time.time
    receiver.down()
    (first,) = [outbox.record(tmp_path / "agents" / "a", "promote", {})]
    settings = DeliveryConfig(tmp_path, (receiver.url,), SECRET, backoff_max=3.0)
    deliverer = Deliverer(lambda: settings, clock=lambda: time.time(), rand=lambda: 1.0)
    assert deliverer.step() is not None  # refused: backing off
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
    receiver.up()
    deadline = real() + 30.0
    while not receiver.events() and real() < deadline:
        deliverer.step()
        time.sleep(0.1)
    assert [e["id"] for e in receiver.events()] == [first]

    receiver.down()
    monkeypatch.setattr(time, "time", real)
    (second,) = [outbox.record(tmp_path / "agents" / "a", "promote", {})]
    assert deliverer.step() is not None  # refused, its retry time written on the real clock
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
    receiver.up()
    restarted = Deliverer(lambda: settings, clock=lambda: time.time(), rand=lambda: 1.0)
    deadline = real() + 30.0
    while len(receiver.events()) < 2 and real() < deadline:
        restarted.step()
        time.sleep(0.1)
    assert [e["id"] for e in receiver.events()] == [first, second]
