"""A verdict's event: staged before its verdict file, released after it, under an id made
of what it announces. A writer killed between the two has its event released by the next
owner call if the verdict file says it, discarded if not; verdicts of a state folder
from before are never announced; a pruned event is never copied back; a catch-up with
nothing staged reads no file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from genesis_fp16_infrastructure.agent_folder import (
    candidates,
    files,
    outbox,
    outbox_catch_up,
    transitions,
)
from genesis_fp16_infrastructure.agent_folder.layout import VERDICT

AGENT = "se_darwin"


class Killed(BaseException):
    """Stands for a SIGKILL at that point (the real kill: test_lifecycle_kill.py)."""


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    agent_folder = tmp_path / "agents" / AGENT
    return agent_folder, agent_folder / "checkpoints"


def _candidate(folder: Path, digest: str) -> Path:
    path = candidates.new_candidate(folder, {"fingerprint": digest, "records": 10})
    (path / "ckpt-0000000005.pt").write_bytes(b"weights " + digest.encode())
    return path


def _verdict(candidate: Path) -> dict[str, Any]:
    return json.loads(VERDICT.at(candidate).read_text())


def _catch_ups(folder: Path) -> None:
    """The owner calls that catch up: the daemon's recovery and prune after a run, and
    the recovery the delivery thread's start runs."""
    transitions.recover(folder)
    candidates.prune(folder, keep_served=5, rejected_days=7)
    transitions.recover(folder)


def _staged(agent_folder: Path) -> list[str]:
    staged = outbox.outbox_of(agent_folder) / "staged"
    return sorted(p.name for p in staged.iterdir()) if staged.is_dir() else []


def _killed_before_release(
    monkeypatch: pytest.MonkeyPatch, candidate: Path, **verdict: Any
) -> None:
    """write_verdict killed after its verdict file, before its event's release."""

    def killed(staged: Path) -> str:
        raise Killed  # the outbox's lock drops as the kernel drops a killed process's flock

    with monkeypatch.context() as patch:
        patch.setattr(outbox_catch_up, "release_verdict", killed)
        with pytest.raises(Killed):
            candidates.write_verdict(candidate, verdict)


def test_a_verdict_whose_event_was_not_released_is_announced_once_by_the_next_owner_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection written with its event staged, not released (the writer killed), is
    announced by the next catch-up, under the id made of its agent, candidate, outcome and
    time, and once whatever the number of catch-ups."""
    agent_folder, folder = _folders(tmp_path)
    rejected = _candidate(folder, "rrrr")
    _killed_before_release(monkeypatch, rejected, outcome="rejected", reason="worse")
    assert outbox.read_events(agent_folder) == [] and len(_staged(agent_folder)) == 1
    for _ in range(3):
        _catch_ups(folder)
    events = outbox.read_events(agent_folder)
    expected = outbox_catch_up.verdict_event_id(AGENT, rejected.name, _verdict(rejected))
    assert [(e.id, e.kind) for e in events] == [(expected, "reject")]
    assert events[0].data["candidate_id"] == rejected.name
    assert events[0].data["reason"] == "worse" and _staged(agent_folder) == []


def test_a_staged_event_whose_verdict_was_not_written_is_discarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer killed after staging its event and before its verdict file reached disk:
    the catch-up discards the event (nothing announced that was not decided), and keeps
    announcing nothing for the candidate's older verdict."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "hhhh")
    candidates.write_verdict(candidate, {"outcome": "held"})
    with monkeypatch.context() as patch:
        patch.setattr(files, "write_json", lambda *args: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            candidates.write_verdict(candidate, {"outcome": "rejected"})
    assert len(_staged(agent_folder)) == 1
    _catch_ups(folder)
    assert [e.kind for e in outbox.read_events(agent_folder)] == ["hold"]
    assert _staged(agent_folder) == [] and _verdict(candidate)["outcome"] == "held"


def test_held_then_rejected_are_two_events_and_one_verdict_released_twice_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two verdicts on one candidate (held, then rejected when judged again) are two
    events; a staged copy of one already in the outbox (a catch-up killed after its
    copy, before removing the staged file) adds none."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "hhhh")
    candidates.write_verdict(candidate, {"outcome": "held", "reason": "pinned"})
    _killed_before_release(monkeypatch, candidate, outcome="rejected", reason="worse")
    [staged] = _staged(agent_folder)
    copy = (outbox.outbox_of(agent_folder) / "staged" / staged).read_text()
    _catch_ups(folder)
    (outbox.outbox_of(agent_folder) / "staged" / staged).write_text(copy)
    _catch_ups(folder)
    events = outbox.read_events(agent_folder)
    assert [e.kind for e in events] == ["hold", "reject"]
    assert events[1].id == outbox_catch_up.verdict_event_id(
        AGENT, candidate.name, _verdict(candidate)
    )
    assert _staged(agent_folder) == []


def test_an_old_state_folder_announces_none_of_its_verdicts(tmp_path: Path) -> None:
    """Verdicts written before the outbox existed (a state folder from before events) are
    history: no catch-up announces them; the next rejection is announced."""
    agent_folder, folder = _folders(tmp_path)
    for digest, outcome in (("aaaa", "rejected"), ("bbbb", "held")):
        candidate = _candidate(folder, digest)
        files.write_json(VERDICT.at(candidate), VERDICT, {"outcome": outcome})
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == []
    new = _candidate(folder, "cccc")
    candidates.write_verdict(new, {"outcome": "rejected"})
    _catch_ups(folder)
    assert [e.data["candidate_id"] for e in outbox.read_events(agent_folder)] == [new.name]


def test_a_pruned_verdict_event_is_not_copied_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection's event released, delivered and pruned from the outbox while a staged
    copy of it stayed behind (a catch-up killed before removing it) is not copied back."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "aaaa")
    _killed_before_release(monkeypatch, candidate, outcome="rejected")
    [staged] = _staged(agent_folder)
    copy = (outbox.outbox_of(agent_folder) / "staged" / staged).read_text()
    _catch_ups(folder)
    [event] = outbox.read_events(agent_folder)
    outbox.update(
        agent_folder, event.id, lambda e: outbox.replace(e, targets={"u": {"status": "delivered"}})
    )
    assert outbox.prune(agent_folder, keep=0, limit=10) == outbox.Pruned(1, 0)
    (outbox.outbox_of(agent_folder) / "staged" / staged).write_text(copy)
    _catch_ups(folder)
    assert outbox.read_events(agent_folder) == [] and _staged(agent_folder) == []


def test_a_catch_up_with_nothing_staged_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With verdicts kept and nothing staged, a catch-up reads no verdict or event file
    (one listing): its cost does not grow with the candidates kept."""
    agent_folder, folder = _folders(tmp_path)
    for n in range(5):
        candidates.write_verdict(_candidate(folder, f"{n:04d}"), {"outcome": "rejected"})
    read: list[str] = []
    real = files.load

    def counted(path: Path, file: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(Path(path).name)
        return real(path, file, *args, **kwargs)

    monkeypatch.setattr(files, "load", counted)
    assert outbox_catch_up.announce_verdicts(folder) == [] and read == []
    assert len(outbox.read_events(agent_folder)) == 5


def test_a_damaged_staged_event_is_set_aside_and_the_rest_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A staged file torn by hand is set aside (reported) and the others settle; a temp
    file of a staging killed midway is removed."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "aaaa")
    _killed_before_release(monkeypatch, candidate, outcome="rejected")
    staged = outbox.outbox_of(agent_folder) / "staged"
    (staged / "0123456789abcdef.json").write_text("{torn")
    (staged / ".tmp-killed.json").write_text("{")
    _catch_ups(folder)
    assert [e.kind for e in outbox.read_events(agent_folder)] == ["reject"]
    [aside] = [p.name for p in staged.iterdir()]
    assert aside.startswith("0123456789abcdef.json.unusable-")
    assert outbox_catch_up.announce_verdicts(folder) == []  # what was set aside holds nothing up


def test_the_next_verdict_of_a_candidate_settles_the_one_a_killed_writer_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection left staged by a killed writer, then a hold written on the same
    candidate before any catch-up ran: the hold's writer settles the rejection first (by
    the verdict file it finds), so both are announced, in that order."""
    agent_folder, folder = _folders(tmp_path)
    candidate = _candidate(folder, "aaaa")
    _killed_before_release(monkeypatch, candidate, outcome="rejected")
    candidates.write_verdict(candidate, {"outcome": "held"})
    assert [e.kind for e in outbox.read_events(agent_folder)] == ["reject", "hold"]
    assert _staged(agent_folder) == []


def test_a_staged_event_is_settled_by_the_verdict_the_settle_rolls_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle reads what is owed before it writes: a staged hold whose candidate the
    journal promoted (the promotion killed after its pointer, the hold's writer before its
    release) is settled by the promoted verdict the settle writes, and discarded, as when
    the roll-forward was written before the outbox was read."""
    agent_folder, folder = _folders(tmp_path)
    held = _candidate(folder, "hhhh")
    real = files.write_in_order

    def pointer_then_killed(steps: Any) -> None:
        steps = list(steps)
        if steps and Path(steps[0].path).name == "served.json":
            real(steps[:1])  # the commit point, then the kill: no verdict rolled forward
            raise Killed
        real(steps)

    with monkeypatch.context() as patch:
        patch.setattr(files, "write_in_order", pointer_then_killed)
        entry = candidates.candidate_entry(folder, held, held / "ckpt-0000000005.pt")
        promoted = {"outcome": "promoted", "reason": "by hand"}
        with pytest.raises(Killed):
            transitions.serve(folder, entry, "manual", verdict=promoted)
    assert not VERDICT.at(held).exists()  # the promotion's verdict not rolled forward
    _killed_before_release(monkeypatch, held, outcome="held", reason="pinned")
    assert _verdict(held)["outcome"] == "held" and len(_staged(agent_folder)) == 1
    transitions.recover(folder)
    assert _verdict(held)["outcome"] == "promoted" and _staged(agent_folder) == []
    # The first outbox takes the journal as history (its promotion unannounced, as ever).
    assert [e.kind for e in outbox.read_events(agent_folder)] == []
