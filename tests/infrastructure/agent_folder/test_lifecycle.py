"""The served-model pointer: atomic, never guessed, rolled back, and a bounded history."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from genesis_fp16_infrastructure.agent_folder import (
    candidates,
    files,
    lifecycle_records,
    transitions,
)
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER, VERDICT
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Pin, Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import (
    ServedPointer,
    read_pointer,
    served_checkpoint,
    write_pointer,
)
from genesis_fp16_infrastructure.agent_folder.transaction import transaction
from genesis_fp16_infrastructure.errors import ServedPointerError


def _candidate(folder: Path, digest: str, outcome: str | None) -> Path:
    path = candidates.new_candidate(folder, {"fingerprint": digest, "records": 10})
    (path / "ckpt-0000000005.pt").write_bytes(b"weights " + digest.encode())
    if outcome is not None:
        candidates.write_verdict(path, {"outcome": outcome})
    return path


def _serve(folder: Path, candidate: Path) -> None:
    checkpoint = candidates.newest_checkpoint(candidate)
    assert checkpoint is not None
    transitions.serve(folder, candidates.candidate_entry(folder, candidate, checkpoint), "gate")


def test_the_pointer_names_the_promoted_model_and_rolls_back(tmp_path: Path) -> None:
    """Two promotions, then a rollback: the first is served again, the second is marked
    rolled_back, and a second rollback with nothing earlier is one line."""
    first = _candidate(tmp_path, "aaaa", "promoted")
    _serve(tmp_path, first)
    second = _candidate(tmp_path, "bbbb", "promoted")
    _serve(tmp_path, second)
    assert served_checkpoint(tmp_path) == second / "ckpt-0000000005.pt"
    assert transitions.rollback(tmp_path).id == first.name
    assert served_checkpoint(tmp_path) == first / "ckpt-0000000005.pt"
    assert candidates.read_verdict(second).outcome == "rolled_back"
    with pytest.raises(ServedPointerError, match="kept no earlier model"):
        transitions.rollback(tmp_path)


def test_an_unreadable_pointer_or_a_missing_file_is_an_error_not_a_guess(tmp_path: Path) -> None:
    """A corrupt pointer and one naming a file that is gone raise, naming the file."""
    candidate = _candidate(tmp_path, "aaaa", "promoted")
    _serve(tmp_path, candidate)
    (candidate / "ckpt-0000000005.pt").unlink()
    with pytest.raises(ServedPointerError, match="which is not there"):
        served_checkpoint(tmp_path)
    SERVED_POINTER.at(tmp_path).write_text("{half")
    with pytest.raises(ServedPointerError, match=r"served\.json"):
        read_pointer(tmp_path)


def test_prune_keeps_the_served_the_last_k_and_recent_rejections(tmp_path: Path) -> None:
    """Six promotions and two rejections, keep 2 served and rejections for 0 days: the
    served one and the two before it stay, the rest go; an unfinished one always stays."""
    promoted = []
    for i in range(6):
        promoted.append(_candidate(tmp_path, f"p{i}", "promoted"))
        _serve(tmp_path, promoted[-1])
    rejected = [_candidate(tmp_path, f"r{i}", "rejected") for i in range(2)]
    training = _candidate(tmp_path, "t", None)
    removed, _ = candidates.prune(tmp_path, keep_served=2, rejected_days=1)
    assert sorted(removed) == promoted[:3]
    assert all(p.exists() for p in rejected)  # decided just now: within their day
    time.sleep(0.01)
    candidates.prune(tmp_path, keep_served=2, rejected_days=0)
    left = {p.name for p in candidates.list_candidates(tmp_path)}
    assert left == {promoted[5].name, promoted[4].name, promoted[3].name, training.name}
    assert len(read_pointer(tmp_path).history) == 2  # type: ignore[union-attr]
    assert files.folder_bytes(tmp_path) > 0


def test_prune_removes_an_unfinished_candidate_nobody_resumed(tmp_path: Path) -> None:
    """An unfinished candidate (no verdict) stays while it was written within a day, even
    with rejections kept 0 days, and goes once nothing touched it for longer."""
    _serve(tmp_path, _candidate(tmp_path, "p", "promoted"))
    recent = _candidate(tmp_path, "recent", None)
    stale = _candidate(tmp_path, "stale", None)
    old = time.time() - 2 * 86400
    for path in [stale, *stale.rglob("*")]:
        os.utime(path, (old, old))
    assert candidates.prune(tmp_path, keep_served=2, rejected_days=0)[0] == [stale]
    assert recent.exists() and not stale.exists()


def _tag_pointer(folder: str, tag: str, rounds: int) -> None:
    """A writer that reads the pointer, waits, and writes it back with its tag added: it
    loses its neighbours' tags unless the read and the write are one locked update."""
    for i in range(rounds):

        def change(current: ServedPointer | None, i: int = i) -> ServedPointer:
            assert current is not None
            time.sleep(0.002)  # widen the window a lost update needs
            tags = [*current.served.extra.get("tags", []), f"{tag}-{i}"]
            served = msgspec.structs.replace(current.served, extra={"tags": tags})
            return ServedPointer(served, current.history)

        with transaction(Path(folder), settle=False) as tx:
            tx.stage(change(tx.pointer))


def test_concurrent_writers_of_the_pointer_lose_no_update(tmp_path: Path) -> None:
    """Three processes and two threads each add 20 tags, each tag one transaction, at once:
    all 100 are there, and a prune in the middle keeps every one."""
    import multiprocessing
    import threading

    first = _candidate(tmp_path, "aaaa", "promoted")
    _serve(tmp_path, first)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_tag_pointer, args=(str(tmp_path), f"p{n}", 20)) for n in range(3)]
    threads = [
        threading.Thread(target=_tag_pointer, args=(str(tmp_path), f"t{n}", 20)) for n in range(2)
    ]
    for worker in [*procs, *threads]:
        worker.start()
    candidates.prune(tmp_path, keep_served=1, rejected_days=0)
    for thread in threads:
        thread.join()
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    pointer = read_pointer(tmp_path)
    assert pointer is not None
    assert len(pointer.served.extra["tags"]) == 100  # a key the entry does not declare
    assert len(set(pointer.served.extra["tags"])) == 100


def test_the_pin_survives_a_promotion_and_a_prune(tmp_path: Path) -> None:
    """A pin set with a manual serve stays through the next serve and prune, until a serve
    that sets another."""
    first = _candidate(tmp_path, "aaaa", "promoted")
    checkpoint = candidates.newest_checkpoint(first)
    assert checkpoint is not None
    entry = candidates.candidate_entry(tmp_path, first, checkpoint)
    transitions.serve(tmp_path, entry, "manual", pin=Pin(by="operator", extra={"id": first.name}))
    _serve(tmp_path, _candidate(tmp_path, "bbbb", "promoted"))
    candidates.prune(tmp_path, keep_served=1, rejected_days=0)
    pointer = read_pointer(tmp_path)
    assert pointer is not None and pointer.pinned is not None
    assert pointer.pinned.to_json() == {"by": "operator", "id": first.name}


def test_a_verdict_the_journal_decided_is_rolled_forward_before_prune_judges(
    tmp_path: Path,
) -> None:
    """A rollback whose verdict never reached the candidate (killed between): the journal
    names it as disagreeing, prune keeps the model, and the recovery writes it."""
    first, second = _candidate(tmp_path, "aaaa", None), _candidate(tmp_path, "bbbb", None)
    for candidate in (first, second):
        checkpoint = candidate / "ckpt-0000000005.pt"
        promoted = Verdict.from_json({"outcome": "promoted"})
        entry = candidates.candidate_entry(tmp_path, candidate, checkpoint, promoted)
        transitions.serve(tmp_path, entry, "gate", verdict={"outcome": "promoted"})
    transitions.rollback(tmp_path, verdict={"reason": "live_regression"})
    candidates.write_verdict(second, {"outcome": "promoted"})  # the state a kill left
    pointer = read_pointer(tmp_path)
    assert pointer is not None and [e.kind for e in pointer.journal] == [
        "gate",
        "gate",
        "rollback",
    ]
    assert list(transitions.disagreeing(tmp_path, pointer)) == [second.name]
    assert candidates.prune(tmp_path, 0, 1.0)[0] == []
    transitions.recover(tmp_path)
    assert candidates.read_verdict(second).outcome == "rolled_back"
    assert transitions.disagreeing(tmp_path, pointer) == {}


def test_reading_or_an_unchanged_update_recovers_nothing_until_recover_is_called(
    tmp_path: Path,
) -> None:
    """Recovery is an explicit call: a read of the pointer and an update that changes
    nothing leave a verdict the journal decided unwritten; :func:`transitions.recover`
    writes it."""
    first, second = _candidate(tmp_path, "aaaa", None), _candidate(tmp_path, "bbbb", None)
    for candidate in (first, second):
        checkpoint = candidate / "ckpt-0000000005.pt"
        promoted = Verdict.from_json({"outcome": "promoted"})
        entry = candidates.candidate_entry(tmp_path, candidate, checkpoint, promoted)
        transitions.serve(tmp_path, entry, "gate", verdict={"outcome": "promoted"})
    transitions.rollback(tmp_path, verdict={"reason": "live_regression"})
    candidates.write_verdict(second, {"outcome": "promoted"})  # the state a kill left
    pointer = read_pointer(tmp_path)
    with transaction(tmp_path, settle=False) as tx:
        assert tx.stage(tx.pointer) == pointer
    assert pointer is not None and list(transitions.disagreeing(tmp_path, pointer)) == [second.name]
    assert transitions.recover(tmp_path) == pointer
    assert transitions.disagreeing(tmp_path, pointer) == {}


def test_a_journal_naming_a_path_writes_nothing_outside_the_candidates(tmp_path: Path) -> None:
    """A hand-edited journal whose verdict names ``..``: ignored, no file written there."""
    candidate = _candidate(tmp_path, "aaaa", "promoted")
    _serve(tmp_path, candidate)
    pointer = read_pointer(tmp_path)
    assert pointer is not None
    verdict = {"outcome": "rolled_back", "journal_seq": 9}
    bad = lifecycle_records.JournalEntry.from_json(
        {"seq": 9, "kind": "rollback", "verdicts": {"..": verdict}}
    )
    write_pointer(tmp_path, replace(pointer, sequence=9, journal=[bad]))
    (tmp_path / "candidate.json").write_text("{}")  # as if `..` were a candidate
    transitions.unpin(tmp_path)  # an owner call: rolls forward what it can
    assert not VERDICT.at(tmp_path).exists()


def test_prune_keeps_the_newest_inconclusive_candidates_however_old(tmp_path: Path) -> None:
    """Issue 62: three inconclusive candidates and a rejected one, all decided two days
    ago, rejections kept 1 day: the newest INCONCLUSIVE_KEEP (2) inconclusive ones stay
    (the next run judges them again), the oldest goes as the rejected one does."""
    _serve(tmp_path, _candidate(tmp_path, "p", "promoted"))
    found = [_candidate(tmp_path, f"i{i}", "inconclusive") for i in range(3)]
    rejected = _candidate(tmp_path, "r", "rejected")
    old = time.time() - 2 * 86400
    for path in [*found, rejected]:
        verdict = candidates.read_verdict(path)
        assert verdict.outcome is not None
        VERDICT.at(path).write_text(json.dumps({**verdict.to_json(), "decided_at_s": old}))
    assert candidates.INCONCLUSIVE_KEEP == 2
    removed, _ = candidates.prune(tmp_path, keep_served=2, rejected_days=1)
    assert sorted(removed) == sorted([found[0], rejected])
    assert found[1].exists() and found[2].exists()
