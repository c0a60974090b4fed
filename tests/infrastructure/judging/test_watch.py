"""The watches' one decision (judging.watch.decide), on a real pointer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import lifecycle
from genesis_fp16_infrastructure.judging.watch import decide

FIGURES: dict[str, Any] = {"records": 40, "difference": 0.0, "lower": -0.1, "regression": False}


def test_recording_the_figures_keeps_the_pointers_journal(tmp_path: Path) -> None:
    """A watch that finds no regression writes its figures into the served entry and leaves
    the journal the daemon counts transitions from as it was."""
    lifecycle.serve(tmp_path, {"id": "a", "checkpoint": "a/ckpt.pt"}, "first")
    lifecycle.serve(tmp_path, {"id": "b", "checkpoint": "b/ckpt.pt"}, "gate")
    before = lifecycle.read_pointer(tmp_path)
    assert before is not None and before.sequence >= 2 and before.journal

    report = decide(tmp_path, "agent_a", "b", dict(FIGURES), lambda figures: "detail")

    after = lifecycle.read_pointer(tmp_path)
    assert after is not None and report["rolled_back"] is False and report["held"] is None
    assert after.served["live"]["records"] == 40
    assert (after.sequence, after.journal) == (before.sequence, before.journal)
