"""kill -9 at 30 random points around delivery: no event lost, every duplicate carries
the same idempotency key, each agent's events first arrive in order, no file torn."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import daemon_env
from webhook_receiver import Receiver

from genesis_fp16.events import posting
from genesis_fp16_infrastructure.agent_folder import outbox

SECRET = "kill-test-secret"
CHILD = Path(__file__).with_name("delivery_child.py")
KILLS = 30
AGENTS = ("se_darwin", "rlhf_ppo")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    found.delay = 0.05  # each post takes a while: a kill often lands while one is in flight
    yield found
    found.close()


def _start(state: Path, url: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(state), url, SECRET],
        env=daemon_env({}, fixtures=False),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def _record(state: Path, count: int, ids: dict[str, list[str]]) -> None:
    for agent in AGENTS:
        for _ in range(count):
            ids[agent].append(outbox.record(state / "agents" / agent, "promote", {}))


def _all_delivered(state: Path) -> bool:
    events = [e for agent in AGENTS for e in outbox.read_events(state / "agents" / agent)]
    return all(e.status == "delivered" for e in events)


@pytest.mark.slow
def test_kill_9_around_delivery_loses_nothing_and_duplicates_only_by_key(
    tmp_path: Path, receiver: Receiver
) -> None:
    """30 SIGKILLs of the delivering process at random moments (new events written as it
    runs), each followed by a restart: every event reaches the receiver, any event
    received twice carries its own id as the key both times, each agent's events first
    arrive in the order written, and every event file still reads as delivered."""
    rng = random.Random(62)
    state = tmp_path / "state"
    ids: dict[str, list[str]] = {agent: [] for agent in AGENTS}
    _record(state, 20, ids)
    in_flight = 0
    for _ in range(KILLS):
        child = _start(state, receiver.url)
        _record(state, 2, ids)  # written while it delivers: the writer and it take turns
        time.sleep(rng.uniform(0.0, 0.25))
        in_flight += receiver.in_flight > 0
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    child = _start(state, receiver.url)
    try:
        expected = {i for agent_ids in ids.values() for i in agent_ids}
        receiver.wait_for(lambda: expected <= {e["id"] for e in receiver.events()}, "all", 180)
        # the receiver records an event before it answers; the child marks it delivered
        # after the answer: wait for the files too, or the last kill lands between the two
        receiver.wait_for(lambda: _all_delivered(state), "every file marked delivered", 60)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    for got in receiver.received:
        assert got.headers[posting.IDEMPOTENCY_HEADER] == got.event["id"]
        assert got.signed_by(SECRET.encode())
    received = receiver.events()
    for agent in AGENTS:
        firsts = list(dict.fromkeys(e["id"] for e in received if e["agent"] == agent))
        assert firsts == ids[agent]
    events = [e for agent in AGENTS for e in outbox.read_events(state / "agents" / agent)]
    assert len(events) == len(expected) and {e.status for e in events} == {"delivered"}
    assert not list(state.rglob("*.unusable-*"))
    assert in_flight >= 1, "no kill landed while a post was in flight"
    duplicates = len(received) - len(expected)
    print(f"kills={KILLS} in_flight={in_flight} events={len(expected)} duplicates={duplicates}")
