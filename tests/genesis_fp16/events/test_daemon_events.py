"""The real daemon with se_darwin on its own data: its first promotion, then the operator's
pin and unpin, reach a loopback receiver signed, in order, listed by `events list` and
sent again by `events redeliver`, which refuses a bad id in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env
from se_darwin_daemon import AGENT, model_command, se_darwin_env, write_pool
from webhook_receiver import Receiver

from genesis_fp16.events import posting
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.data.synthetic import generate_pool

SECRET = "daemon-test-secret"


def _events(daemon: DaemonProcess, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 events ...` against the daemon's state folder and receiver."""
    env = {"GENESIS_FP16_EVENTS_URLS": url, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "events", *args],
        cwd=daemon.workdir,
        env=daemon_env(env, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _kinds(receiver: Receiver) -> list[str]:
    return [e["kind"] for e in receiver.events() if e["agent"] == AGENT]


@pytest.mark.slow
def test_a_promotion_pin_and_unpin_reach_the_receiver_signed_and_in_order(
    daemon_factory: DaemonFactory, tmp_path: Path, receiver: Receiver
) -> None:
    """se_darwin's first model is announced as a promotion, signed with the secret and
    keyed by its id, naming the model the pointer serves; `model promote` (pin) and
    `model unpin` follow in order; the undelivered gauge is 0; `events list` shows them
    delivered; `events redeliver` sends one again under the same key; bad ids: exit 2."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "se_darwin.json", generate_pool(300, seed=4))
    urls = {"GENESIS_FP16_EVENTS_URLS": receiver.url, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    daemon = daemon_factory(se_darwin_env(pool, **urls), fixtures=False)
    receiver.wait_for(lambda: "promote" in _kinds(receiver), "the first promotion", 240)
    first = receiver.received[0]
    assert first.signed_by(SECRET.encode()) and not first.signed_by(b"not the secret")
    assert first.headers[posting.IDEMPOTENCY_HEADER] == first.event["id"]
    pointer = read_pointer(daemon.state_dir / "agents" / AGENT / "checkpoints")
    assert pointer is not None and first.event["data"]["served"] == pointer.served.id

    assert model_command(daemon, "promote", AGENT, pointer.served.id).returncode == 0
    assert model_command(daemon, "unpin", AGENT).returncode == 0
    receiver.wait_for(lambda: _kinds(receiver)[-2:] == ["promote", "unpin"], "pin, unpin", 60)
    pinned = [e for e in receiver.events() if e["kind"] == "promote"][-1]
    assert pinned["data"]["pinned"]["by"] == "model promote"
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_events_undelivered", agent=AGENT) == 0,
        "no event undelivered",
        60,
    )

    listed = json.loads(_events(daemon, receiver.url, "list", "--json").stdout)
    assert [e["id"] for e in listed] == [e["id"] for e in receiver.events()]
    assert {e["status"] for e in listed} == {"delivered"}
    assert first.event["id"] in _events(daemon, receiver.url, "list").stdout
    again = _events(daemon, receiver.url, "redeliver", first.event["id"])
    assert again.returncode == 0, again.stderr
    assert receiver.received[-1].headers[posting.IDEMPOTENCY_HEADER] == first.event["id"]
    for bad in ("nothex", "0123456789abcdef"):
        refused = _events(daemon, receiver.url, "redeliver", bad)
        assert refused.returncode == 2 and refused.stdout == ""
        assert len(refused.stderr.strip().splitlines()) == 1 and bad in refused.stderr
