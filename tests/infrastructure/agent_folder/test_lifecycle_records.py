"""A state folder written in the on-disk format of before the typed records (the pointer
with its pin, history and journal; candidates' metas and verdicts, as 37f7330 wrote them)
reads the same through the typed records, and a transition on it keeps every key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from record_json import without_nulls

from genesis_fp16_infrastructure.agent_folder import candidates, transitions
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Outcome, ServedEntry, Verdict
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer, served_checkpoint
from genesis_fp16_infrastructure.errors import ServedPointerError

SCORES = {"set": "held_out", "auc": None, "log_loss": None, "records": 400, "loss": 0.4213}
COMPARISON = {
    "set": "held_out", "records": 400, "candidate_loss": 0.4213, "served_loss": 0.43,
    "difference": -0.0087, "upper": 0.001, "lower": -0.018, "margin": 0.01, "passed": True,
    "segment": None, "finding": "no_worse",
}  # fmt: skip
GATE = {  # GateReport.to_json of a promotion, stamped by candidates.stamped
    "outcome": "promoted", "reason": "no worse than the served model: held_out ...",
    "comparisons": [COMPARISON], "seconds": 0.8123, "precision": "bf16",
    "candidate": SCORES, "served": {**SCORES, "loss": 0.43}, "served_id": "c1",
    "checkpoint": "ckpt-0000000120.pt", "judged_on": "ab12cd34",
    "decided_at": "2026-11-20T10:00:00Z", "decided_at_s": 1763632800.5,
}  # fmt: skip
ROLLED_BACK = {  # a rollback's verdict: the gate's, the live figures, the old outcome kept
    **GATE, "outcome": "rolled_back", "gate_outcome": "promoted", "reason": "live regression",
    "live": {"difference": 0.03, "records": 900, "regression": True}, "detail": "worse by 0.03",
    "journal_seq": 3,
}  # fmt: skip
INCONCLUSIVE = {
    **GATE, "outcome": "inconclusive", "records_needed": 1088,
    "comparisons": [{**COMPARISON, "finding": "inconclusive", "passed": None}],
}  # fmt: skip
META = {  # new_candidate's meta: the run's data and request, then its id and time
    "fingerprint": "ab12cd34ef", "records": 2000, "continues": "c1",
    "request": {"steps": 120, "precision": "auto"}, "trained_ids": "trained_ids.npy",
}  # fmt: skip


def _entry(ident: str, how: str, **more: Any) -> dict[str, Any]:
    return {
        "id": ident, "checkpoint": f"candidates/{ident}/ckpt-0000000120.pt",
        "fingerprint": "ab12cd34ef", "records": 2000, "precision": "bf16", "scores": SCORES,
        "trained_at": "2026-11-20T09:00:00Z", "how": how, "served_at": "2026-11-20T10:00:00Z",
        **more,
    }  # fmt: skip


POINTER: dict[str, Any] = {
    "version": 1,
    "served": _entry("c3", "manual", live={"difference": -0.01, "records": 300}),
    "history": [_entry("c1", "first"), _entry("c0", "adopted", judged="candidates/c0/split/x.pt")],
    "pinned": {"by": "model promote", "at": "2026-11-21T08:00:00Z"},
    "sequence": 4,
    "journal": [
        {"seq": 2, "kind": "gate", "at": "2026-11-20T10:00:00Z", "at_s": 1763632800.0,
         "served": "c2", "pinned": None, "verdicts": {"c2": {**GATE, "journal_seq": 2}}},
        {"seq": 3, "kind": "rollback", "at": "2026-11-20T11:00:00Z", "at_s": 1763636400.0,
         "served": "c1", "pinned": None, "dropped": "c2", "reason": "live regression",
         "verdicts": {"c2": ROLLED_BACK}},
        {"seq": 4, "kind": "manual", "at": "2026-11-21T08:00:00Z", "at_s": 1763712000.0,
         "served": "c3", "pinned": {"by": "model promote", "at": "2026-11-21T08:00:00Z"}},
    ],
}  # fmt: skip
CANDIDATES = {  # id -> (meta, verdict or None: still training)
    "c0": ({**META, "id": "c0", "created_at": "2026-11-19T09:00:00Z"}, GATE),
    "c1": ({**META, "id": "c1", "created_at": "2026-11-20T08:00:00Z"}, GATE),
    "c2": ({**META, "id": "c2", "created_at": "2026-11-20T09:00:00Z"}, ROLLED_BACK),
    "c3": ({**META, "id": "c3", "created_at": "2026-11-20T09:30:00Z"}, GATE),
    "c4": ({**META, "id": "c4", "created_at": "2026-11-21T09:00:00Z"}, INCONCLUSIVE),
    "c5": ({**META, "id": "c5", "created_at": "2026-11-21T10:00:00Z"}, None),
}


def _folder(root: Path) -> Path:
    folder = root / "agents" / "a" / "checkpoints"
    for ident, (meta, verdict) in CANDIDATES.items():
        candidate = folder / "candidates" / ident
        candidate.mkdir(parents=True)
        (candidate / "ckpt-0000000120.pt").write_bytes(b"weights")
        (candidate / "candidate.json").write_text(json.dumps(meta))
        if verdict is not None:
            (candidate / "verdict.json").write_text(json.dumps(verdict))
    (folder / "served.json").write_text(json.dumps(POINTER))
    return folder


def test_an_old_folders_verdicts_and_metas_read_typed_and_whole(tmp_path: Path) -> None:
    """Each candidate's verdict and meta read with their outcomes as enum members, the
    fields the lifecycle reads typed, and every other key kept: written back, the same JSON."""
    folder = _folder(tmp_path)
    for ident, (meta, verdict) in CANDIDATES.items():
        candidate = folder / "candidates" / ident
        read = candidates.read_verdict(candidate)
        assert without_nulls(read.to_json()) == without_nulls(verdict or {})
        assert candidates.read_meta(candidate).to_json() == meta
        assert candidates.read_meta(candidate).continues == "c1"
    rolled = candidates.read_verdict(folder / "candidates" / "c2")
    assert (rolled.outcome, rolled.gate_outcome) == (Outcome.ROLLED_BACK, Outcome.PROMOTED)
    # Figures too old for the watch's report: no figures, their JSON kept as read.
    assert rolled.live is None and rolled.as_read["live"] == ROLLED_BACK["live"]
    assert rolled.detail == "worse by 0.03"
    assert rolled.candidate is not None and rolled.candidate.losses == {"loss": 0.4213}
    kept = candidates.read_verdict(folder / "candidates" / "c4")
    assert (kept.outcome, kept.records_needed) == (Outcome.INCONCLUSIVE, 1088)
    assert candidates.read_verdict(folder / "candidates" / "c5") == Verdict()
    assert [c.name for c in candidates.list_candidates(folder)] == list(CANDIDATES)
    assert not list(folder.rglob("*.unusable*"))  # nothing set aside


def test_an_old_pointer_reads_the_same_and_a_transition_keeps_every_key(tmp_path: Path) -> None:
    """The served model, its pin, history and journal of an old pointer read as written;
    unpinning it (a transition: read, change, write) keeps each entry's every key."""
    folder = _folder(tmp_path)
    pointer = read_pointer(folder)
    assert pointer is not None
    assert served_checkpoint(folder) == folder / POINTER["served"]["checkpoint"]
    assert without_nulls(pointer.to_json()) == without_nulls(POINTER)
    assert transitions.disagreeing(folder, pointer) == {}  # c2's verdict says what seq 3 decided
    transitions.unpin(folder)
    after = json.loads((folder / "served.json").read_text())
    assert "pinned" not in after  # unpinned: the key is left out, as before
    assert (after["served"], after["history"]) == (POINTER["served"], POINTER["history"])
    assert without_nulls(after["journal"][:-1]) == without_nulls(POINTER["journal"])
    assert (after["sequence"], after["journal"][-1]["kind"]) == (5, "unpin")
    # Pruning keeps what the pointer names and the kept inconclusive one; no verdict moved.
    assert candidates.prune(folder, keep_served=2, rejected_days=3650.0)[0] == []
    for ident, (_, verdict) in CANDIDATES.items():
        path = folder / "candidates" / ident / "verdict.json"
        assert (json.loads(path.read_text()) if path.exists() else None) == verdict


@pytest.mark.parametrize(
    ("bad", "why"),
    [({"outcome": "approved"}, "Invalid enum value 'approved'"), ([1], "a JSON list")],
)
def test_a_verdict_that_no_release_wrote_is_set_aside(tmp_path: Path, bad: Any, why: str) -> None:
    """An outcome outside the enum, or a verdict that is no object, is set aside and
    reported (never guessed at), and the candidate reads as not judged."""
    candidate = tmp_path / "candidates" / "c9"
    candidate.mkdir(parents=True)
    (candidate / "verdict.json").write_text(json.dumps(bad))
    assert candidates.read_verdict(candidate).outcome is None
    aside = list(candidate.glob("verdict.json.unusable*"))
    assert len(aside) == 1 and json.loads(aside[0].read_text()) == bad
    with pytest.raises(ValueError, match=why):
        Verdict.from_json(bad)


@pytest.mark.parametrize("where", ["served", "history"])
def test_a_pointer_entry_of_the_wrong_type_makes_the_pointer_unusable_not_half_read(
    tmp_path: Path, where: str
) -> None:
    """A served or history entry whose field no release wrote (records as text) makes the
    pointer unusable in one line naming it, with the file left as it was: never an
    entry dropped that the next write would lose."""
    folder = _folder(tmp_path)
    bad = {**POINTER["served"], "records": "many"}
    data = {**POINTER, where: bad if where == "served" else [POINTER["history"][0], bad]}
    written = json.dumps(data)
    (folder / "served.json").write_text(written)
    with pytest.raises(ServedPointerError, match=r"served.json.*ServedEntry.*records"):
        read_pointer(folder)
    assert (folder / "served.json").read_text() == written


def test_a_figure_its_record_cannot_read_is_kept_and_a_wrong_kind_refused() -> None:
    """A served entry's scores and live figures a hand made unreadable by their records:
    the entry reads (those fields empty, their JSON kept) and writes back the same JSON;
    a value of another JSON kind (a list for the scores) is refused in one line naming
    the record and the field, as any wrong type is."""
    scores, live = {"auc": "high"}, {"records": "many"}
    entry = ServedEntry.from_json({"id": "m", "checkpoint": "m.pt", "scores": scores, "live": live})
    assert (entry.scores, entry.live) == (None, None)
    assert (entry.kept("scores"), entry.kept("live")) == (scores, live)
    assert entry.to_json() == {"id": "m", "checkpoint": "m.pt", "scores": scores, "live": live}
    with pytest.raises(ValueError, match=r"^ServedEntry\.scores: a JSON list$"):
        ServedEntry.from_json({"id": "m", "checkpoint": "m.pt", "scores": [0.1]})
