"""One transaction on the served model: the lock and the settle once, changes staged
and invisible until the one commit, nothing written when it raises or is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from served_models import gate_serve, trained

from genesis_fp16_infrastructure.agent_folder import (
    candidates,
    outbox,
    outbox_catch_up,
    pointer,
    transaction,
    transitions,
)
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transaction import Transaction
from genesis_fp16_infrastructure.errors import ServedPointerError

AGENT = "se_darwin"


def _folder(tmp_path: Path) -> tuple[Path, list[Path], Path, Path]:
    """A state folder's checkpoints: two models served in turn, a fresh candidate and an
    older one never judged."""
    ck = tmp_path / "state" / "agents" / AGENT / "checkpoints"
    served = [trained(ck, d) for d in ("aaaa0000", "bbbb0000")]
    for candidate in served:
        gate_serve(ck, candidate)
    return ck, served, trained(ck, "cccc0000"), trained(ck, "dddd0000")


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None: a folder): the state exactly (the
    pointer's lock file aside: an empty file, made by the first transaction)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(p for p in root.rglob("*") if p.name != "served.json.lock"):
        name = str(path.relative_to(root))
        found[name] = None if path.is_dir() else path.read_bytes()
    return found


def _stage_everything(tx: Transaction, ck: Path, fresh: Path, old: Path) -> None:
    """A rollback, a serve with its verdict, a rejection and its prune, all staged."""
    tx.rollback(verdict={"reason": "live_regression"})
    checkpoint = fresh / "ckpt-0000000005.pt"
    tx.serve(candidates.candidate_entry(ck, fresh, checkpoint), "gate")
    tx.verdict(fresh, {"outcome": "promoted", "reason": "better"})
    tx.verdict(old, {"outcome": "rejected", "reason": "worse"})
    tx.prune([old])


def test_an_exception_before_the_commit_leaves_the_state_exactly(tmp_path: Path) -> None:
    """A block that raises after staging a rollback, a serve, two verdicts and a prune
    writes nothing: every file of the state folder (pointer, verdicts, outbox) is as
    before, byte for byte."""
    ck, _served, fresh, old = _folder(tmp_path)
    before = _tree(tmp_path / "state")
    with pytest.raises(RuntimeError, match="midway"), transaction.transaction(ck) as tx:
        _stage_everything(tx, ck, fresh, old)
        raise RuntimeError("midway")
    assert tx.done is None
    assert _tree(tmp_path / "state") == before


def test_a_refused_change_writes_nothing_staged_before_it(tmp_path: Path) -> None:
    """A rollback refused (nothing earlier) after a staged serve: the serve is not
    written either, the transaction is all or nothing."""
    ck = tmp_path / "state" / "agents" / AGENT / "checkpoints"
    first = trained(ck, "aaaa0000")
    before = _tree(tmp_path / "state")
    entry = candidates.candidate_entry(ck, first, first / "ckpt-0000000005.pt")
    with (
        pytest.raises(ServedPointerError, match="kept no earlier model"),
        transaction.transaction(ck) as tx,
    ):
        tx.serve(entry, "first")
        tx.rollback()
    assert read_pointer(ck) is None
    assert _tree(tmp_path / "state") == before


def test_a_verdict_that_is_no_verdict_is_refused_as_it_is_staged(tmp_path: Path) -> None:
    """A verdict given as JSON that is no verdict is refused in one line where it is
    staged, after another was staged: nothing of the transaction is written."""
    ck, _served, fresh, old = _folder(tmp_path)
    before = _tree(tmp_path / "state")
    with pytest.raises(ValueError, match="Verdict"), transaction.transaction(ck) as tx:
        tx.verdict(fresh, {"outcome": "rejected", "reason": "worse"})
        tx.verdict(old, {"outcome": "no such outcome"})
    assert tx.done is None
    assert _tree(tmp_path / "state") == before


def test_an_unusable_pointer_is_refused_after_the_staged_events_are_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejection's event a killed writer left staged (its verdict file written) is
    announced by the next transaction even when the pointer cannot be read; the
    transaction is refused after it, in one line."""
    ck, _served, _fresh, old = _folder(tmp_path)
    agent_folder = ck.parent

    def killed(staged: Path) -> str:
        raise RuntimeError("killed before the release")

    with monkeypatch.context() as patch:
        patch.setattr(outbox_catch_up, "release_verdict", killed)
        with pytest.raises(RuntimeError, match="killed"):
            candidates.write_verdict(old, {"outcome": "rejected", "reason": "worse"})
    staged = outbox.outbox_of(agent_folder) / "staged"
    assert len(list(staged.iterdir())) == 1
    (ck / "served.json").write_text("{not json")
    with (
        pytest.raises(ServedPointerError, match="served-model pointer"),
        transaction.transaction(ck),
    ):
        pass
    assert list(staged.iterdir()) == []
    announced = [e for e in outbox.read_events(agent_folder) if e.kind == "reject"]
    assert [e.data["candidate_id"] for e in announced] == [old.name]


KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
from genesis_fp16_infrastructure.agent_folder import candidates, transaction
ck, fresh, old = (Path(a) for a in sys.argv[1:4])
with transaction.transaction(ck) as tx:
    tx.rollback(verdict={"reason": "live_regression"})
    tx.serve(candidates.candidate_entry(ck, fresh, fresh / "ckpt-0000000005.pt"), "gate")
    tx.verdict(old, {"outcome": "rejected", "reason": "worse"})
    tx.prune([old])
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_kill_before_the_commit_leaves_the_state_exactly(tmp_path: Path) -> None:
    """A process SIGKILLed inside the block, everything staged: the folder is as before,
    byte for byte, and the next transaction takes the lock the kill dropped."""
    ck, _served, fresh, old = _folder(tmp_path)
    before = _tree(tmp_path / "state")
    command = [sys.executable, "-c", KILLED_CHILD, str(ck), str(fresh), str(old)]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert _tree(tmp_path / "state") == before
    assert transitions.recover(ck) == read_pointer(ck)


def test_staged_changes_are_invisible_until_the_commit(tmp_path: Path) -> None:
    """Inside the block the pointer, the verdict files, the candidates and the outbox
    read as before; after it, as staged: the pointer serves the fresh model, the
    rolled-back one says so, the rejected one is pruned, and the events are queued."""
    ck, served, fresh, old = _folder(tmp_path)
    pointer_before, events_before = read_pointer(ck), outbox.read_events(ck.parent)
    with transaction.transaction(ck) as tx:
        _stage_everything(tx, ck, fresh, old)
        assert tx.pointer is not None and tx.pointer.served.id == fresh.name
        assert read_pointer(ck) == pointer_before
        assert candidates.read_verdict(served[1]).outcome == "promoted"
        assert candidates.read_verdict(fresh).outcome is None
        assert old.is_dir()
        assert outbox.read_events(ck.parent) == events_before
    after = read_pointer(ck)
    assert after is not None and after.served.id == fresh.name
    assert candidates.read_verdict(served[1]).outcome == "rolled_back"
    assert candidates.read_verdict(fresh).outcome == "promoted"
    assert not old.exists()
    new = outbox.read_events(ck.parent)[len(events_before) :]
    assert [e.kind for e in new] == ["reject", "rollback", "promote"]  # verdicts first
    done = tx.done
    assert done is not None and done.before == pointer_before
    assert done.after is not None and done.after.to_json() == after.to_json()
    assert [e.kind for e in done.entries] == ["rollback", "gate"]
    assert set(done.verdicts) == {fresh.name, old.name, served[1].name}
    assert done.events == tuple(e.id for e in new[1:]) and done.removed == (old,)


def test_one_lock_and_one_settle_per_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that rolls back, serves, writes two verdicts and prunes takes the
    pointer's lock once and settles once (one listing of the staged verdict events, one
    roll-forward of the journal it found); the same changes as separate calls take it
    once per call."""
    ck, _served, fresh, old = _folder(tmp_path)
    counts = {"lock": 0, "settle": 0, "staged": 0}

    def counted(name: str, real: object) -> object:
        def call(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return real(*args, **kwargs)  # type: ignore[operator]

        return call

    monkeypatch.setattr(pointer, "take_lock", counted("lock", pointer.take_lock))
    monkeypatch.setattr(transaction, "settle", counted("settle", transaction.settle))
    monkeypatch.setattr(outbox_catch_up, "catch_up", counted("staged", outbox_catch_up.catch_up))
    with transaction.transaction(ck) as tx:
        _stage_everything(tx, ck, fresh, old)
    assert counts == {"lock": 1, "settle": 1, "staged": 1}
    assert tx.done is not None and [e.kind for e in tx.done.entries] == ["rollback", "gate"]
    transitions.rollback(ck)
    transitions.unpin(ck)
    assert counts == {"lock": 3, "settle": 3, "staged": 3}


def test_settle_false_reads_only_and_commits_the_whole_journal_forward(
    tmp_path: Path,
) -> None:
    """``settle=False`` leaves a verdict a kill left
    unwritten until something is committed; the commit then writes it with its own."""
    ck, served, fresh, _old = _folder(tmp_path)
    candidates.write_verdict(served[1], {"outcome": "rejected"})  # the state a kill left
    with transaction.transaction(ck, settle=False) as tx:
        pass
    assert tx.done is not None and tx.done.verdicts == () and tx.done.entries == ()
    assert candidates.read_verdict(served[1]).outcome == "rejected"
    with transaction.transaction(ck, settle=False) as tx:
        tx.serve(candidates.candidate_entry(ck, fresh, fresh / "ckpt-0000000005.pt"), "gate")
    assert tx.done is not None and served[1].name in tx.done.verdicts
    assert candidates.read_verdict(served[1]).outcome == "promoted"


def test_an_unusable_pointer_is_refused_unless_a_repair_asks(tmp_path: Path) -> None:
    """A pointer that cannot be read refuses the transaction in one line; a repair's
    (``unusable_ok``) gets no pointer and the reason instead."""
    ck, *_ = _folder(tmp_path)
    (ck / "served.json").write_text("{not json")
    with (
        pytest.raises(ServedPointerError, match="served-model pointer"),
        transaction.transaction(ck),
    ):
        pass
    with transaction.transaction(ck, unusable_ok=True) as tx:
        assert tx.before is None and isinstance(tx.unusable, ServedPointerError)
    assert tx.done is not None and tx.done.after is None
    assert os.path.exists(ck / "served.json")


def test_a_promotion_by_hand_of_a_candidate_pruned_meanwhile_is_refused(tmp_path: Path) -> None:
    """``model promote`` found the candidate, then a prune removed it before the command
    took the lock: refused in one line naming it, the pointer as it was (it never names
    a checkpoint that is gone)."""
    from genesis_fp16_infrastructure.agent_folder import repair

    ck, served, _, old = _folder(tmp_path)
    entry = candidates.candidate_entry(ck, old, old / "ckpt-0000000005.pt")
    (old / "ckpt-0000000005.pt").unlink()  # its checkpoint gone, as a prune's removal leaves it
    before = read_pointer(ck)
    with pytest.raises(ServedPointerError, match=r"no candidate .* with its checkpoint"):
        repair.serve_by_hand(ck, entry, transitions.operator_pin("model promote"))
    assert read_pointer(ck) == before and before is not None
    assert before.served.id == served[1].name


def test_the_commit_writes_the_pointer_and_verdicts_as_write_json_did(tmp_path: Path) -> None:
    """The commit writes the pointer and the verdicts its journal decided as one ordered
    pass of writes: each file byte for byte what ``files.write_json`` of the record's
    JSON writes (the writer before), pointer and rolled-back verdict alike."""
    from genesis_fp16_infrastructure.agent_folder import files
    from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER, VERDICT

    ck, served, _fresh, _old = _folder(tmp_path)
    with transaction.transaction(ck) as tx:
        tx.rollback(verdict={"reason": "live_regression"})
    assert tx.done is not None and tx.done.verdicts == (served[1].name,)
    written = {
        "pointer": (SERVED_POINTER.at(ck), SERVED_POINTER, read_pointer(ck)),
        "verdict": (VERDICT.at(served[1]), VERDICT, candidates.read_verdict(served[1])),
    }
    for name, (path, file, record) in written.items():
        assert record is not None
        again = tmp_path / "again" / name
        files.write_json(again, file, record.to_json())
        assert path.read_bytes() == again.read_bytes(), name
    assert candidates.read_verdict(served[1]).outcome == "rolled_back"


def test_staged_verdicts_without_an_event_are_written_in_the_commit_pass_as_before(
    tmp_path: Path,
) -> None:
    """Staged verdicts no event announces (a promotion the pointer serves, an undecided
    close) are written in the commit's one ordered pass, before the pointer: each file
    byte for byte what ``files.write_json`` of the record's JSON writes (their writer
    before); a staged rejection keeps its own event, staged and released around its file."""
    from genesis_fp16_infrastructure.agent_folder import files
    from genesis_fp16_infrastructure.agent_folder.layout import VERDICT

    ck, _served, fresh, old = _folder(tmp_path)
    with transaction.transaction(ck) as tx:
        tx.verdict(old, {"outcome": "undecided", "reason": "not continued"})
        tx.serve(candidates.candidate_entry(ck, fresh, fresh / "ckpt-0000000005.pt"), "gate")
        tx.verdict(fresh, {"outcome": "promoted", "reason": "better", "seconds": 0.5})
    assert tx.done is not None and tx.done.verdicts == (old.name, fresh.name)
    for candidate in (old, fresh):
        again = tmp_path / "again" / candidate.name
        files.write_json(again, VERDICT, candidates.read_verdict(candidate).to_json())
        assert VERDICT.at(candidate).read_bytes() == again.read_bytes(), candidate.name
    # The pointer after the verdicts it serves: written later (or in the same second).
    pointer_file = ck / "served.json"
    assert VERDICT.at(fresh).stat().st_mtime_ns <= pointer_file.stat().st_mtime_ns
    agent_folder = ck.parent
    assert [e.kind for e in outbox.read_events(agent_folder)][-1] == "promote"
    with transaction.transaction(ck) as tx:
        tx.verdict(old, {"outcome": "rejected", "reason": "worse"})
    kinds = [e.kind for e in outbox.read_events(agent_folder)]
    assert kinds[-1] == "reject" and candidates.read_verdict(old).outcome == "rejected"


def test_the_block_reads_candidates_as_the_settle_leaves_them(tmp_path: Path) -> None:
    """A verdict a kill left unwritten (the journal promoted the served model, its file
    says otherwise) is written by the commit's one pass, not before the block; inside
    the block the transaction gives the journal's verdict, a rollback overlays that one
    (its gate outcome the promotion), and nothing disagrees any more."""
    ck, served, _fresh, _old = _folder(tmp_path)
    candidates.write_verdict(served[1], {"outcome": "rejected"})  # the state a kill left
    with transaction.transaction(ck) as tx:
        assert candidates.read_verdict(served[1]).outcome == "rejected"  # nothing written yet
        assert tx.verdict_of(served[1]).outcome == "promoted"
        assert tx.pointer is not None and tx.disagreeing(tx.pointer) == {}
        tx.rollback(verdict={"reason": "live_regression"})
    rolled = candidates.read_verdict(served[1])
    assert (rolled.outcome, rolled.gate_outcome, rolled.reason) == (
        "rolled_back",
        "promoted",
        "live_regression",
    )


def test_a_rejections_event_is_written_in_the_commits_one_outbox_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that writes a rejection beside a rollback and a promotion takes the
    outbox's lock once: the rejection's event staged before its verdict file and moved
    into the outbox after it, in the pass that then writes the pointer and queues the
    journal's events (in that order: reject, rollback, promote); nothing left staged."""
    ck, _served, fresh, old = _folder(tmp_path)
    taken: list[Path] = []
    real = outbox_catch_up.outbox_lock

    def counted(agent_folder: Path) -> object:
        taken.append(agent_folder)
        return real(agent_folder)

    monkeypatch.setattr(outbox_catch_up, "outbox_lock", counted)
    events_before = outbox.read_events(ck.parent)
    with transaction.transaction(ck) as tx:
        _stage_everything(tx, ck, fresh, old)
    assert taken == [ck.parent]
    new = outbox.read_events(ck.parent)[len(events_before) :]
    assert [e.kind for e in new] == ["reject", "rollback", "promote"]
    assert not list((outbox.outbox_of(ck.parent) / "staged").iterdir())
