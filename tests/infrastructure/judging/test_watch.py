"""The watches' one decision (judging.watch.decide), on a real pointer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from genesis_fp16_infrastructure.agent_folder import pointer, transitions
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.watch import decide, figures_of

FIGURES: dict[str, Any] = {"records": 40, "difference": 0.0, "lower": -0.1, "regression": False}


def test_recording_the_figures_keeps_the_pointers_journal(tmp_path: Path) -> None:
    """A watch that finds no regression writes its figures into the served entry and leaves
    the journal the daemon counts transitions from as it was."""
    transitions.serve(tmp_path, ServedEntry(id="a", checkpoint="a/ckpt.pt"), "first")
    transitions.serve(tmp_path, ServedEntry(id="b", checkpoint="b/ckpt.pt"), "gate")
    before = pointer.read_pointer(tmp_path)
    assert before is not None and before.sequence >= 2 and before.journal

    report = decide(tmp_path, "agent_a", "b", dict(FIGURES), lambda figures: "detail")

    after = pointer.read_pointer(tmp_path)
    assert after is not None and report["rolled_back"] is False and report["held"] is None
    assert after.served.live["records"] == 40
    assert (after.sequence, after.journal) == (before.sequence, before.journal)


class _Plugin:
    loss_span = 4.6
    judging_margin = 0.01


def test_each_segment_is_tested_apart_and_kept_with_its_records(tmp_path: Path) -> None:
    """Records of two agents, one much worse under the served model: the figures test
    each segment apart (the worse one's lower bound past the margin) beside the overall
    test, and the watch store keeps each record's segment across a write and a read."""
    rng = np.random.default_rng(0)
    names = np.array(["coder", "qa"] * 300)
    previous = rng.uniform(0.2, 0.4, size=600)
    served = previous + np.where(names == "qa", 0.5, 0.0)
    path = tmp_path / "judged-live-x.npz"
    kept = {"ids": np.arange(600, dtype=np.uint64), "served": served, "previous": previous}
    stores.write_watch(path, {**kept, "segments": names})
    again = stores.read_watch(path)
    assert again["segments"].tolist() == names.tolist()
    figures = figures_of(again, 4.6, _Plugin())
    by_name = {s["name"]: s for s in figures["segments"]}
    assert set(by_name) == {"coder", "qa"} and figures["regression"]
    assert by_name["qa"]["regression"] and not by_name["coder"]["regression"]
    assert by_name["qa"]["lower"] > 0.01 and by_name["qa"]["records"] == 300


def test_a_store_written_before_segments_reads_as_one_segment(tmp_path: Path) -> None:
    """A watch store without the segments array (written before they were kept) reads,
    its records unsegmented, and the figures test them as one segment."""
    path = tmp_path / "judged-live-x.npz"
    old = {"ids": np.arange(50, dtype=np.uint64), "served": np.ones(50), "previous": np.ones(50)}
    stores.write_watch(path, old)
    kept = stores.read_watch(path)
    assert kept["segments"].tolist() == [""] * 50
    assert figures_of(kept, 4.6, _Plugin())["segments"] is None


def test_the_watch_uses_the_margin_of_the_column_it_watches() -> None:
    """A plugin whose margins are a map by loss column: the watch of its primary column
    ``log_loss`` holds that column's margin (0.01), not the 5% default (0.03 here)."""

    class ByColumn:
        loss_span = 4.6
        judging_margin: ClassVar = {"log_loss": 0.01, "brier": 0.005}

    kept = {"served": np.full(40, 0.6), "previous": np.full(40, 0.6)}
    assert figures_of(kept, 4.6, ByColumn(), "log_loss")["margin"] == 0.01
    assert figures_of(kept, 4.6, ByColumn(), "brier")["margin"] == 0.005
    assert figures_of(kept, 4.6, ByColumn())["margin"] == pytest.approx(0.03)
