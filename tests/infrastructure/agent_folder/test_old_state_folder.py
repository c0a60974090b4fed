"""A state folder written by 2c6d7b6d's own code (fixtures/state_2c6d7b6d: a first model,
two gate promotions, a live-watch rollback with its real figures, the operator's manual
serve and pin, the watch's figures on the served model, a rejection) reads through the
typed records with its served model, pin and history kept, and a transition on it keeps
every file's JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from record_json import without_nulls

from genesis_fp16_infrastructure.agent_folder import candidates, transitions
from genesis_fp16_infrastructure.agent_folder.lifecycle_figures import (
    GateComparison,
    LiveReport,
    ScoresOn,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer, served_checkpoint

FIXTURE = Path(__file__).parent / "fixtures" / "state_2c6d7b6d"
FIRST, SECOND, THIRD, FOURTH = (
    "20261129T070445Z-f1",
    "20261129T070446Z-f2",
    "20261129T070447Z-f3",
    "20261129T070449Z-f4",
)


def _copy(tmp_path: Path) -> Path:
    """The old state folder, copied: its agent's checkpoints folder."""
    shutil.copytree(FIXTURE / "agents", tmp_path / "state" / "agents")
    return tmp_path / "state" / "agents" / "se_darwin" / "checkpoints"


def on_disk_live(folder: Path) -> Any:
    """The served entry's live figures as 2c6d7b6d wrote them."""
    return json.loads((folder / "served.json").read_text())["served"]["live"]


def test_the_served_model_its_pin_and_history_are_kept_typed(tmp_path: Path) -> None:
    """The pointer reads the served model, its history, pin and journal as written, the
    gate's scores as the contract's ScoresOn and the watch's figures as its LiveReport."""
    folder = _copy(tmp_path)
    pointer = read_pointer(folder)
    assert pointer is not None
    assert pointer.served.id == SECOND and pointer.served.how == "manual"
    assert served_checkpoint(folder) == folder / "candidates" / SECOND / "ckpt-0000000008.pt"
    assert [h.id for h in pointer.history] == [FIRST]
    assert pointer.pinned is not None and pointer.pinned.by == "model promote"
    kinds = [(e.seq, e.kind) for e in pointer.journal]
    assert kinds == [(1, "first"), (2, "gate"), (3, "gate"), (4, "rollback"), (5, "manual")]
    rollback = pointer.journal[3]
    assert (rollback.dropped, rollback.reason, rollback.served) == (
        THIRD,
        "live_regression",
        SECOND,
    )
    assert rollback.verdicts[THIRD].outcome == Outcome.ROLLED_BACK
    assert pointer.journal[4].pinned == pointer.pinned
    scores = pointer.served.scores
    assert isinstance(scores, ScoresOn) and scores.losses == {"log_loss": 0.45, "brier": 0.225}
    assert (scores.name, scores.reported, scores.primary) == ("held_out", {"auc": 0.9}, "log_loss")
    live = pointer.served.live
    assert isinstance(live, LiveReport) and (live.served, live.against) == (SECOND, FIRST)
    assert live.primary == "log_loss" and set(live.metrics) == {"log_loss", "brier"}
    assert not live.regression and live.figures_json() == on_disk_live(folder)
    assert live.watched.segments is not None and [s.name for s in live.watched.segments] == [
        "coder",
        "qa",
    ]
    assert live.self_test is not None and live.self_test.replays == 200
    on_disk = json.loads((folder / "served.json").read_text())
    assert without_nulls(pointer.to_json()) == without_nulls(on_disk)


def test_each_verdict_reads_typed_and_writes_back_as_written(tmp_path: Path) -> None:
    """The candidates' verdicts: outcomes as members, the gate's scores and comparisons as
    the contract's records, a rolled-back model's live figures as a LiveReport (against
    the model before it), and each written back as the same JSON."""
    folder = _copy(tmp_path)
    outcomes = {}
    for candidate in candidates.list_candidates(folder):
        verdict = candidates.read_verdict(candidate)
        outcomes[candidate.name] = verdict.outcome
        on_disk = json.loads((candidate / "verdict.json").read_text())
        assert without_nulls(verdict.to_json()) == without_nulls(on_disk)
        assert verdict.candidate is not None and verdict.candidate.primary == "log_loss"
    assert outcomes == {
        FIRST: Outcome.PROMOTED,
        SECOND: Outcome.PROMOTED,
        THIRD: Outcome.ROLLED_BACK,
        FOURTH: Outcome.REJECTED,
    }
    rolled = candidates.read_verdict(folder / "candidates" / THIRD)
    on_disk = json.loads((folder / "candidates" / THIRD / "verdict.json").read_text())
    assert rolled.live is not None and rolled.live.figures_json() == on_disk["live"]
    assert rolled.gate_outcome == Outcome.PROMOTED and rolled.live is not None
    assert rolled.live.against == SECOND and rolled.live.regressed == ("log_loss",)
    assert rolled.detail is not None and rolled.detail.startswith("live regression: log_loss")
    rejected = candidates.read_verdict(folder / "candidates" / FOURTH)
    assert rejected.served is not None and rejected.served.losses["log_loss"] == 0.45
    assert all(isinstance(c, GateComparison) for c in rejected.comparisons)
    assert [c.finding for c in rejected.comparisons] == ["worse", "no_worse"]
    assert candidates.read_meta(folder / "candidates" / FIRST).extra["request"] == {
        "steps": 8,
        "precision": "fp32",
    }


def test_a_transition_on_the_old_folder_keeps_it_whole(tmp_path: Path) -> None:
    """Settling it finds nothing to roll forward, and unpinning (read, change, write)
    keeps the served entry, the history and every journal entry as 2c6d7b6d wrote them."""
    folder = _copy(tmp_path)
    before = json.loads((folder / "served.json").read_text())
    recovered = transitions.recover(folder)
    assert recovered is not None and recovered.served.id == SECOND
    assert json.loads((folder / "served.json").read_text()) == before  # nothing to settle
    transitions.unpin(folder)
    after = json.loads((folder / "served.json").read_text())
    assert "pinned" not in after and after["sequence"] == 6
    assert (after["served"], after["history"]) == (before["served"], before["history"])
    assert after["journal"][:-1] == before["journal"]
    assert after["journal"][-1]["kind"] == "unpin"
    assert not list(folder.rglob("*.unusable*"))  # nothing set aside
