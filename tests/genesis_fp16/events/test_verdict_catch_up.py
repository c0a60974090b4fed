"""A rejection whose writer was killed (SIGKILL) between its verdict file and its event is
announced by the daemon's start-up catch-up: the real daemon posts it to a loopback
receiver under the id made of what it announces, once, across restarts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, daemon_env
from se_darwin_daemon import AGENT, se_darwin_env, write_pool
from webhook_receiver import Receiver

from genesis_fp16.events.delivery import catch_up
from genesis_fp16_infrastructure.agent_folder import candidates, outbox, outbox_catch_up
from genesis_fp16_infrastructure.data.synthetic import generate_pool

# The infrastructure's kill child: runs the gate's rejection, SIGKILLs itself after step N.
KILL_CHILD = Path(__file__).parents[2] / "infrastructure/agent_folder/lifecycle_kill_child.py"
SECRET = "verdict-test-secret"


def _gate_reject(ck: Path, candidate: Path, kill_after: int) -> subprocess.CompletedProcess[str]:
    roles = ck.parents[2] / "roles.json"
    roles.write_text(json.dumps({"checkpoints": str(ck), "fresh": candidate.name}))
    command = [sys.executable, str(KILL_CHILD), str(roles), "gate_reject", str(kill_after)]
    env = daemon_env({}, fixtures=False)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _killed_rejection(state: Path) -> tuple[Path, str]:
    """A candidate of se_darwin's folder rejected by the gate's writer killed after its
    verdict file and before its event (the first of its durable steps after which the
    folder says so); returns the candidate and the id its event must have."""
    ck = state / "agents" / AGENT / "checkpoints"
    for kill_after in range(1, 30):
        fingerprint = f"{kill_after:08d}"
        candidate = candidates.new_candidate(ck, {"fingerprint": fingerprint, "records": 10})
        (candidate / "ckpt-0000000005.pt").write_bytes(b"weights")
        killed = _gate_reject(ck, candidate, kill_after)
        assert killed.returncode == -signal.SIGKILL, (kill_after, killed.stderr[-3000:])
        verdict = candidates.read_verdict(candidate).to_json()
        if verdict:
            assert verdict["outcome"] == "rejected"
            assert outbox.read_events(ck.parent) == []  # the kill came before its event
            return candidate, outbox_catch_up.verdict_event_id(AGENT, candidate.name, verdict)
    raise AssertionError("no kill of the gate's rejection left its verdict without its event")


def test_the_start_up_catch_up_announces_a_killed_rejection_once(tmp_path: Path) -> None:
    """The delivery thread's start-up catch-up, run three times (three restarts), writes
    the killed rejection's event once, under the id made of what it announces."""
    state = tmp_path / "state"
    candidate, event_id = _killed_rejection(state)
    for _ in range(3):
        catch_up(state)
    events = outbox.read_events(state / "agents" / AGENT)
    assert [(e.id, e.kind, e.data["candidate_id"]) for e in events] == [
        (event_id, "reject", candidate.name)
    ]


def _reject_ids(receiver: Receiver) -> list[str]:
    return [e["id"] for e in receiver.events() if e["kind"] == "reject"]


@pytest.mark.slow
def test_the_daemon_posts_a_killed_rejection_once_across_restarts(
    daemon_factory: DaemonFactory, tmp_path: Path, receiver: Receiver
) -> None:
    """The real daemon, started on se_darwin's folder where the gate's writer was killed
    between a rejection's verdict file and its event, posts that rejection to the
    receiver under its id; started again, it writes and posts no second one."""
    candidate, event_id = _killed_rejection(tmp_path / "state")
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "se_darwin.json", generate_pool(300, seed=4))
    urls = {"GENESIS_FP16_EVENTS_URLS": receiver.url, "GENESIS_FP16_EVENTS_SECRET": SECRET}
    env = se_darwin_env(pool, **urls)
    daemon = daemon_factory(env, fixtures=False)
    receiver.wait_for(lambda: event_id in _reject_ids(receiver), "the caught-up rejection", 120)
    [posted] = [e for e in receiver.events() if e["id"] == event_id]
    assert posted["data"]["candidate_id"] == candidate.name
    daemon.stop()
    again = daemon_factory(env, fixtures=False)
    again.wait_for(
        lambda: again.sample("genesis_fp16_events_undelivered", agent=AGENT) == 0,
        "a delivery pass after the start-up catch-up",
        120,
    )
    rejects = [
        e for e in outbox.read_events(again.state_dir / "agents" / AGENT) if e.kind == "reject"
    ]
    assert [e.id for e in rejects] == [event_id]
    assert _reject_ids(receiver) == [event_id]
