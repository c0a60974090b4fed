"""The event outbox: every transition of the served model written before it returns, in
order, once, bounded, and a damaged file set aside instead of holding the agent up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import (
    candidates,
    outbox,
    pointer,
    repair,
    transitions,
)
from genesis_fp16_infrastructure.errors import ServedPointerError


def _folders(tmp_path: Path, agent: str = "se_darwin") -> tuple[Path, Path]:
    agent_folder = tmp_path / "agents" / agent
    return agent_folder, agent_folder / "checkpoints"


def _candidate(folder: Path, digest: str, outcome: str | None = None) -> Path:
    path = candidates.new_candidate(folder, {"fingerprint": digest, "records": 10})
    (path / "ckpt-0000000005.pt").write_bytes(b"weights " + digest.encode())
    if outcome is not None:
        candidates.write_verdict(path, {"outcome": outcome, "reason": f"{outcome} by test"})
    return path


def _serve(folder: Path, candidate: Path, how: str = "gate") -> None:
    checkpoint = candidates.newest_checkpoint(candidate)
    assert checkpoint is not None
    entry = candidates.candidate_entry(folder, candidate, checkpoint)
    transitions.serve(folder, entry, how, verdict={"outcome": "promoted"})


def _kinds(agent_folder: Path) -> list[str]:
    return [e.kind for e in outbox.read_events(agent_folder)]


def test_every_transition_is_in_the_outbox_in_order_once(tmp_path: Path) -> None:
    """Promote, reject, promote, hold, rollback, operator promote (pin), unpin: seven
    events in that order, each once, each naming its model; prune's trim is not one."""
    agent_folder, folder = _folders(tmp_path)
    first = _candidate(folder, "aaaa")
    _serve(folder, first, "first")
    _candidate(folder, "rrrr", "rejected")
    second = _candidate(folder, "bbbb")
    _serve(folder, second)
    _candidate(folder, "hhhh", "held")
    transitions.rollback(folder, verdict={"reason": "live_regression"})
    repair.serve_by_hand(
        folder, candidates.served_entry(folder, second) or {}, transitions.operator_pin("t")
    )
    transitions.unpin(folder)
    candidates.prune(folder, keep_served=1, rejected_days=7)  # a trim: no event
    kinds = ["promote", "reject", "promote", "hold", "rollback", "promote", "unpin"]
    assert _kinds(agent_folder) == kinds
    events = outbox.read_events(agent_folder)
    assert len({e.id for e in events}) == 7
    assert events[0].data["served"] == first.name and events[0].data["kind"] == "first"
    assert events[4].data["reason"] == "live_regression"
    assert events[4].data["dropped"] == second.name
    assert events[5].data["pinned"]["by"] == "t" and events[6].data["pinned"] is None
    assert [e.order for e in events] == sorted(e.order for e in events)
    assert all(e.agent == "se_darwin" and e.status == "new" for e in events)


def test_a_transition_killed_before_its_event_is_announced_by_the_next_owner_call(
    tmp_path: Path,
) -> None:
    """A pointer committed without its event (the copy lost to a kill) is announced at the
    next recovery (the daemon's after each run), once; a refused transition announces
    nothing."""
    agent_folder, folder = _folders(tmp_path)
    _serve(folder, _candidate(folder, "aaaa"), "first")
    second = _candidate(folder, "bbbb")
    _serve(folder, second)
    lost = outbox.read_events(agent_folder)[-1]
    lost.path.unlink()  # as if killed between the pointer's write and the event's
    assert _kinds(agent_folder) == ["promote"]
    candidates.prune(folder, keep_served=5, rejected_days=7)  # prunes: recovers nothing
    assert _kinds(agent_folder) == ["promote"]
    transitions.recover(folder)  # the daemon's after each run
    events = outbox.read_events(agent_folder)
    assert [e.id for e in events][-1] == lost.id and len(events) == 2
    transitions.recover(folder)
    candidates.prune(folder, keep_served=5, rejected_days=7)
    transitions.unpin(folder)  # not pinned: no transition
    with pytest.raises(ServedPointerError):
        transitions.rollback(tmp_path / "agents" / "other" / "checkpoints")
    assert len(outbox.read_events(agent_folder)) == 2
    assert not (tmp_path / "agents" / "other" / "outbox").exists()


def test_the_first_outbox_does_not_announce_older_history(tmp_path: Path) -> None:
    """A state folder from before the outbox: its journal's earlier transitions are not
    sent as new; the first transition after is."""
    agent_folder, folder = _folders(tmp_path)
    _serve(folder, _candidate(folder, "aaaa"), "first")
    _serve(folder, _candidate(folder, "bbbb"))
    for path in outbox.outbox_of(agent_folder).iterdir():
        path.unlink()
    transitions.rollback(folder)
    assert _kinds(agent_folder) == ["rollback"]


def test_a_folder_outside_a_state_folder_has_no_outbox(tmp_path: Path) -> None:
    """A library user's own checkpoint folder (not ``agents/<agent>/checkpoints``) gets
    no outbox beside it."""
    folder = tmp_path / "my_models"
    _serve(folder, _candidate(folder, "aaaa", "rejected"), "first")
    assert pointer.read_pointer(folder) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_models"]


def test_prune_keeps_undelivered_and_counts_what_it_drops(tmp_path: Path) -> None:
    """Delivered events beyond ``keep`` go; undelivered ones stay up to ``limit``, past
    which the oldest are dropped and counted, never silently."""
    agent_folder = tmp_path / "agents" / "a"
    ids = [outbox.record(agent_folder, "demotion", {"n": n}) for n in range(6)]
    for event_id in ids[:3]:
        outbox.update(
            agent_folder,
            event_id,
            lambda e: outbox.replace(e, targets={"u": outbox.Target(status="delivered")}),
        )
    assert outbox.prune(agent_folder, keep=1, limit=10) == outbox.Pruned(2, 0)
    assert [e.id for e in outbox.read_events(agent_folder)] == ids[2:]
    assert outbox.prune(agent_folder, keep=1, limit=2) == outbox.Pruned(0, 2)
    assert [e.id for e in outbox.read_events(agent_folder)] == [ids[2], ids[5]]
    state = outbox.read_state(agent_folder)
    assert state is not None and state["dropped"] == 2 and set(ids[:2]) <= set(state["pruned"])


@pytest.mark.parametrize("damage", ["corrupt", "empty", "not_utf8", "folder", "wrong_id"])
def test_a_damaged_event_is_set_aside_and_the_next_one_read(tmp_path: Path, damage: str) -> None:
    """An event file damaged by hand is set aside as ``<name>.unusable-*`` and the agent's
    later events are still read and written."""
    agent_folder = tmp_path / "agents" / "a"
    first = outbox.record(agent_folder, "demotion", {})
    path = outbox.find(agent_folder, first)
    assert path is not None
    if damage == "folder":
        path.unlink()
        path.mkdir()
    else:
        text = {"corrupt": b"{half", "empty": b"", "not_utf8": b"\xff\xfe"}.get(damage)
        if text is None:
            data = json.loads(path.read_text())
            text = json.dumps({**data, "id": "0" * 16}).encode()
        path.write_bytes(text)
    second = outbox.record(agent_folder, "fault_bundle", {})
    assert [e.id for e in outbox.read_events(agent_folder)] == [second]
    assert list(outbox.outbox_of(agent_folder).glob("*.unusable-*"))


def test_an_event_file_as_written_before_its_records_were_typed_reads_and_writes_the_same(
    tmp_path: Path,
) -> None:
    """An event's receivers and delivery log as the daemon wrote them as plain objects
    read as Target and Attempt records and write back the same JSON; a receiver a hand
    left keys out of reads as a new one's, and a log line that is no object is left out."""
    agent_folder = tmp_path / "agents" / "a"
    event_id = outbox.record(agent_folder, "demotion", {"from": "fp16", "to": "bf16"})
    path = outbox.find(agent_folder, event_id)
    assert path is not None
    data = json.loads(path.read_text())
    targets = {
        "http://r/1": {"status": "delivered", "attempts": 2, "next_at_s": 5.0,
                       "delivered_at_s": 7.5},
        "http://r/2": {"status": "pending", "attempts": 1, "next_at_s": 9.0},
    }  # fmt: skip
    attempts = [
        {"url": "http://r/1", "at": "2026-11-29T00:00:00Z", "at_s": 1.0, "status": "failed",
         "code": 500, "error": "HTTP 500"},
        {"url": "http://r/1", "at": "2026-11-29T00:00:02Z", "at_s": 2.0,
         "status": "delivered", "code": 200, "error": None},
    ]  # fmt: skip
    path.write_text(json.dumps({**data, "targets": targets, "attempts": attempts}))
    (event,) = outbox.read_events(agent_folder)
    assert (event.targets or {})["http://r/1"] == outbox.Target("delivered", 2, 5.0, 7.5)
    assert event.attempts[0].code == 500 and event.status == "pending"
    written = event.to_json()
    assert written["targets"] == targets and written["attempts"] == attempts
    assert written["data"] == {"from": "fp16", "to": "bf16"} == event.body()["data"]
    by_hand = {**data, "targets": {"u": {"status": "pending"}}, "attempts": [3, {"url": "u"}]}
    path.write_text(json.dumps(by_hand))
    (event,) = outbox.read_events(agent_folder)
    assert event.targets == {"u": outbox.Target()} and event.attempts == (outbox.Attempt("u"),)
