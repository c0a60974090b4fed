"""An unusable served-model pointer is set aside, refused by every reader with the repair
named, and repaired from the candidates' own records; the operator's pin and unpin."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder.candidates import prune, served_entry, write_verdict
from genesis_fp16_infrastructure.agent_folder.layout import SERVED_POINTER
from genesis_fp16_infrastructure.agent_folder.pointer import (
    aside_path,
    read_pointer,
    served_checkpoint,
)
from genesis_fp16_infrastructure.agent_folder.repair import (
    roll_back_by_hand,
    serve_by_hand,
    set_aside_unusable,
)
from genesis_fp16_infrastructure.agent_folder.transitions import operator_pin, serve, unpin
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.world_model.predict import WorldModelPredictor


def _candidate(folder: Path, name: str, decided: float, steps: tuple[int, ...] = (10,)) -> Path:
    """A kept candidate the gate promoted at ``decided``, its last checkpoint named in its
    verdict (the files hold no model: nothing here loads one)."""
    path = folder / "candidates" / name
    path.mkdir(parents=True)
    (path / "candidate.json").write_text(json.dumps({"id": name, "created_at": str(decided)}))
    for step in steps:
        (path / f"ckpt-{step:010d}.pt").write_bytes(b"weights")
    write_verdict(path, {"outcome": "promoted", "checkpoint": f"ckpt-{steps[-1]:010d}.pt"})
    verdict = json.loads((path / "verdict.json").read_text())
    (path / "verdict.json").write_text(json.dumps({**verdict, "decided_at_s": decided}))
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two promoted candidates, a then b; b served with a in its history."""
    root = tmp_path / "checkpoints"
    for name, decided in (("a", 1.0), ("b", 2.0)):
        entry = served_entry(root, _candidate(root, name, decided))
        assert entry is not None
        serve(root, entry, "gate")
    return root


BROKEN = {
    "garbage": lambda folder: SERVED_POINTER.at(folder).write_text("{not json"),
    "wrong_version": lambda folder: SERVED_POINTER.at(folder).write_text(
        json.dumps({"version": 99, "served": {"checkpoint": "x"}})
    ),
    "dangling": lambda folder: (folder / "candidates" / "b" / "ckpt-0000000010.pt").unlink(),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_pointer_is_set_aside_and_every_reader_names_the_repair(
    folder: Path, kind: str
) -> None:
    """Each kind of broken pointer is renamed served.json.unusable once; then the pointer,
    its checkpoint and the prediction API refuse with one line naming `model promote`."""
    BROKEN[kind](folder)
    why, moved = set_aside_unusable(folder)
    assert why is not None and moved == aside_path(folder)
    assert not SERVED_POINTER.at(folder).exists() and aside_path(folder).is_file()
    again, moved_again = set_aside_unusable(folder)  # set aside once, still unusable
    assert again is not None and moved_again is None
    for read in (read_pointer, served_checkpoint, WorldModelPredictor.load):
        with pytest.raises(ServedPointerError, match=r"model promote \S+ ID") as caught:
            read(folder)
        assert "\n" not in str(caught.value)


def test_a_usable_pointer_is_left_alone(folder: Path) -> None:
    """A readable pointer naming a file that is there: nothing set aside, nothing written."""
    before = SERVED_POINTER.at(folder).read_text()
    assert set_aside_unusable(folder) == (None, None)
    assert SERVED_POINTER.at(folder).read_text() == before and not aside_path(folder).exists()


def test_promote_repairs_from_the_checkpoint_the_candidates_verdict_names(folder: Path) -> None:
    """After a garbage pointer, promote serves the candidate's own judged file, not a
    newer one planted beside it, and pins it."""
    SERVED_POINTER.at(folder).write_text("garbage")
    set_aside_unusable(folder)
    (folder / "candidates" / "a" / "ckpt-0000000011.pt").write_bytes(b"planted")
    entry = served_entry(folder, folder / "candidates" / "a")
    assert entry is not None
    assert serve_by_hand(folder, entry, operator_pin("model promote")) is True
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == "a"
    assert served_checkpoint(folder) == folder / "candidates" / "a" / "ckpt-0000000010.pt"
    assert pointer.pinned is not None and pointer.pinned.by == "model promote"


def test_rollback_repairs_from_a_dangling_pointers_history(folder: Path) -> None:
    """A pointer whose served file is gone keeps its history: rollback serves a from it."""
    BROKEN["dangling"](folder)
    set_aside_unusable(folder)
    served, repaired = roll_back_by_hand(folder, operator_pin("model rollback"))
    assert repaired and served.id == "a"
    assert served_checkpoint(folder) == folder / "candidates" / "a" / "ckpt-0000000010.pt"


def test_rollback_over_garbage_serves_the_newest_promoted_candidate(folder: Path) -> None:
    """No history to read: the newest candidate the gate promoted is served, the older
    promoted ones become the history."""
    SERVED_POINTER.at(folder).write_text("\x00\x01")
    served, repaired = roll_back_by_hand(folder, operator_pin("model rollback"))
    pointer = read_pointer(folder)
    assert repaired and served.id == "b"
    assert pointer is not None and [h.id for h in pointer.history] == ["a"]
    assert aside_path(folder).read_bytes() == b"\x00\x01"  # kept for the post-mortem


def test_a_usable_rollback_pins_and_unpin_lifts_the_pin(folder: Path) -> None:
    """rollback over a usable pointer serves a, pinned, and marks b rolled_back keeping
    the gate's verdict; unpin keeps a served and drops the pin."""
    served, repaired = roll_back_by_hand(folder, operator_pin("model rollback"))
    assert (served.id, repaired) == ("a", False)
    verdict = json.loads((folder / "candidates" / "b" / "verdict.json").read_text())
    assert (verdict["outcome"], verdict["gate_outcome"]) == ("rolled_back", "promoted")
    pointer = unpin(folder)
    assert pointer is not None and pointer.served.id == "a" and pointer.pinned is None


def test_prune_removes_a_killed_up_to_date_runs_folder_after_a_day(folder: Path) -> None:
    """The linked folder of an up-to-date run killed mid-eval goes once untouched for a
    day; a fresh one (a run now) stays."""
    old, new = folder / ".up-to-date-old", folder / ".up-to-date-new"
    for path in (old, new):
        path.mkdir()
        (path / "ckpt-0000000010.pt").write_bytes(b"weights")
    two_days_ago = time.time() - 2 * 86400
    for path in (old / "ckpt-0000000010.pt", old):
        os.utime(path, (two_days_ago, two_days_ago))
    prune(folder, keep_served=5, rejected_days=7)
    assert not old.exists() and new.is_dir()
