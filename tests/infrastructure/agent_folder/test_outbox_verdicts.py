"""The verdicts' catch-up: a rejection or a hold whose event a kill lost is announced by
the next owner call, once, under an id made of what it announces; the verdicts of a state
folder's first outbox are history; a pruned event is never copied back; a catch-up reads
only the verdict files that changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16_infrastructure.agent_folder import files, lifecycle, outbox
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT

AGENT = "se_darwin"


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    agent_folder = tmp_path / "agents" / AGENT
    return agent_folder, agent_folder / "checkpoints"


def _candidate(folder: Path, digest: str) -> Path:
    path = lifecycle.new_candidate(folder, {"fingerprint": digest, "records": 10})
    (path / "ckpt-0000000005.pt").write_bytes(b"weights " + digest.encode())
    return path


def _verdict(candidate: Path) -> dict[str, Any]:
    return json.loads((candidate / lifecycle.VERDICT_NAME).read_text())


def _catch_ups(folder: Path) -> None:
    """The owner calls that catch up: the daemon's prune after a run, and a transition
    (here one that changes nothing, as the delivery thread's start runs it)."""
    lifecycle.prune(folder, keep_served=5, rejected_days=7)
    lifecycle.update_pointer(folder, lambda current: current)


def _lose_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts written as if killed right after their file: no event."""
    monkeypatch.setattr(outbox, "announce_verdict", lambda candidate, verdict: None)


def test_a_verdict_whose_event_was_lost_is_announced_once_by_the_next_owner_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection written without its event (the writer killed between) is announced by
    the next catch-up, under the id made of its agent, candidate, outcome and time, and
    once whatever the number of catch-ups."""
    agent_folder, folder = _folders(tmp_path)
    rejected = _candidate(folder, "rrrr")
    with monkeypatch.context() as patch:
        _lose_events(patch)
        lifecycle.write_verdict(rejected, {"outcome": "rejected", "reason": "worse"})
    assert outbox.read_events(agent_folder) == []
    for _ in range(3):
        _catch_ups(folder)
    events = outbox.read_events(agent_folder)
    expected = outbox.verdict_event_id(AGENT, rejected.name, _verdict(rejected))
    assert [(e.id, e.kind) for e in events] == [(expected, "reject")]
    assert events[0].data["candidate_id"] == rejected.name
    assert events[0].data["reason"] == "worse"


def test_held_then_rejected_are_two_events_and_one_verdict_copied_twice_is_one(
    tmp_path: Path,
) -> None:
    """Two verdicts on one candidate (held, then rejected when judged again) are two
    events; announcing the verdict on file again, as a catch-up would, adds none."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "hhhh")
    lifecycle.write_verdict(candidate, {"outcome": "held", "reason": "pinned"})
    lifecycle.write_verdict(candidate, {"outcome": "rejected", "reason": "worse"})
    outbox.announce_verdict(candidate, _verdict(candidate))
    _catch_ups(folder)
    events = outbox.read_events(agent_folder)
    assert [e.kind for e in events] == ["hold", "reject"]
    assert len({e.id for e in events}) == 2
    assert events[1].id == outbox.verdict_event_id(AGENT, candidate.name, _verdict(candidate))


def test_an_old_state_folder_announces_none_of_its_verdicts(tmp_path: Path) -> None:
    """Verdicts written before the outbox existed (a state folder from before events) or
    announced before their ids were made of what they say (an outbox without
    verdicts_seen.json) are history; the next rejection is announced."""
    agent_folder, folder = _folders(tmp_path)
    for digest, outcome in (("aaaa", "rejected"), ("bbbb", "held")):
        candidate = _candidate(folder, digest)
        files.write_json(candidate / lifecycle.VERDICT_NAME, VERDICT, {"outcome": outcome})
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == []
    older = _candidate(folder, "cccc")
    files.write_json(older / lifecycle.VERDICT_NAME, VERDICT, {"outcome": "rejected"})
    outbox.record(agent_folder, "reject", {"candidate_id": older.name})  # a random id
    outbox.outbox_of(agent_folder).joinpath("verdicts_seen.json").unlink()
    _catch_ups(folder)
    assert [e.data["candidate_id"] for e in outbox.read_events(agent_folder)] == [older.name]
    new = _candidate(folder, "dddd")
    lifecycle.write_verdict(new, {"outcome": "rejected"})
    _catch_ups(folder)
    assert [e.data["candidate_id"] for e in outbox.read_events(agent_folder)][1:] == [new.name]


def test_the_first_verdict_of_a_fresh_state_folder_is_caught_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a state folder with no outbox yet, the first verdict's writer makes the outbox
    remember the verdicts before it: a kill after its file still gets it announced."""
    agent_folder, folder = _folders(tmp_path)
    first = _candidate(folder, "aaaa")
    with monkeypatch.context() as patch:
        _lose_events(patch)
        lifecycle.write_verdict(first, {"outcome": "held"})
    _catch_ups(folder)
    assert [e.kind for e in outbox.read_events(agent_folder)] == ["hold"]


def _delivered(agent_folder: Path, event_id: str) -> None:
    outbox.update(
        agent_folder,
        event_id,
        lambda e: outbox.replace(e, targets={"u": {"status": "delivered"}}),
    )


def test_a_pruned_verdict_event_is_not_copied_back(tmp_path: Path) -> None:
    """A delivered rejection pruned from the outbox stays pruned: whether a catch-up saw
    its verdict before the prune (even once outbox.json's list of pruned ids forgot it)
    or not (its id is in that list)."""
    agent_folder, folder = _folders(tmp_path)
    seen_first, pruned_first = _candidate(folder, "aaaa"), _candidate(folder, "bbbb")
    lifecycle.write_verdict(seen_first, {"outcome": "rejected"})
    _catch_ups(folder)
    lifecycle.write_verdict(pruned_first, {"outcome": "rejected"})
    for event in outbox.read_events(agent_folder):
        _delivered(agent_folder, event.id)
    assert outbox.prune(agent_folder, keep=0, limit=10) == outbox.Pruned(2, 0)
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == []
    state = outbox.read_state(agent_folder)
    assert state is not None
    forgot = [f"{n:016x}" for n in range(outbox.KEEP_PRUNED_IDS)]
    outbox.write_state(agent_folder, {**state, "pruned": [*state["pruned"], *forgot]})
    same = _verdict(seen_first)  # written again as it was (a copied state folder): re-read
    files.write_json(seen_first / lifecycle.VERDICT_NAME, VERDICT, same)
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == []


def test_a_catch_up_reads_only_the_verdict_files_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing changed a catch-up reads no verdict file (a stat each); after one
    verdict is written, it reads that one."""
    _, folder = _folders(tmp_path)
    candidates = [_candidate(folder, f"{n:04d}") for n in range(5)]
    for candidate in candidates:
        lifecycle.write_verdict(candidate, {"outcome": "rejected"})
    outbox.announce_verdicts(folder)
    read: list[str] = []
    real = files.load

    def counted(path: Path, file: Any, *args: Any, **kwargs: Any) -> Any:
        if file is VERDICT:
            read.append(Path(path).parent.name)
        return real(path, file, *args, **kwargs)

    monkeypatch.setattr(files, "load", counted)
    assert outbox.announce_verdicts(folder) == [] and read == []
    lifecycle.write_verdict(candidates[2], {"outcome": "held"})
    outbox.announce_verdicts(folder)
    assert read == [candidates[2].name]


def test_a_damaged_record_of_verdicts_seen_is_set_aside_and_announces_nothing_old(
    tmp_path: Path,
) -> None:
    """A verdicts_seen.json torn by hand is set aside (reported) and the verdicts then
    there are taken as history: no flood of old announcements."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "aaaa")
    lifecycle.write_verdict(candidate, {"outcome": "rejected"})
    [event] = outbox.read_events(agent_folder)
    event.path.unlink()
    (outbox.outbox_of(agent_folder) / "verdicts_seen.json").write_text("{torn")
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == []
    assert list(outbox.outbox_of(agent_folder).glob("verdicts_seen.json.unusable-*"))
