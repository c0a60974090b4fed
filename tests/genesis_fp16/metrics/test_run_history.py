"""The run history: one line per finished run, bounded on disk and on read, a torn or
hostile line counted and skipped, a FIFO or a folder never read, and the daemon's
record of a run writing both the last run and the history."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from fake_results import train_result

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.metrics.last_run import from_error, from_result, load_last_run
from genesis_fp16.metrics.run_history import (
    COMPACT_BYTES,
    KEEP,
    LINE_BYTES,
    HistoryUnreadable,
    append_run,
    entry_of,
    history_path,
    load_history,
    save_run,
)
from genesis_fp16_infrastructure.contract.reports import Demotion, DriftReport, GateReport, ScoresOn


def _paths(tmp_path: Path) -> AgentPaths:
    paths = AgentPaths(tmp_path / "agents" / "se_darwin")
    paths.root.mkdir(parents=True)
    return paths


def _failed(reason: str = "error: boom") -> object:
    return entry_of(None, from_error("failed", reason, 1.0, "daemon"))


def test_a_run_with_its_reports_reads_back(tmp_path: Path) -> None:
    """A run's gate scores, demotion, drift, quarantine, loss scale and precision reason
    are kept in its entry and read back as written; last_run.json is written too."""
    paths = _paths(tmp_path)
    gate = GateReport(
        "rejected",
        "worse on the golden set",
        candidate=ScoresOn("golden", 0.61, 0.7),
        served=ScoresOn("golden", 0.74, 0.5),
        served_id="c1",
        candidate_id="c2",
    )
    drift = DriftReport(10, 100, {}, {"reward": 0.4}, {"reward": 0.2}, ("reward",), 0.0, 0.1, False)
    result = train_result(
        precision_used="bf16",
        precision_reason="the guard's memory: fp16 demoted",
        loss_scale=1024.0,
        skipped_steps=3,
        quarantined=2,
        demotions=(Demotion("fp16", "bf16", "overflow_rate", 12, 10),),
        gate=gate,
        drift=drift,
    )
    save_run(paths, from_result(result, 2.0, "daemon"), result)
    (entry,) = load_history(paths).entries
    assert entry.run == load_last_run(paths)
    assert entry.run.precision_reason == "the guard's memory: fp16 demoted"
    assert (entry.loss_scale, entry.skipped_steps, entry.quarantined) == (1024.0, 3, 2)
    assert entry.demotions == ("fp16 to bf16 at step 12: overflow_rate",)
    assert entry.drift == "drift flagged: features reward"
    assert entry.gate is not None and entry.gate.outcome == "rejected"
    assert (entry.gate.metric, entry.gate.candidate, entry.gate.served) == ("auc", 0.61, 0.74)
    assert (entry.gate.candidate_id, entry.gate.served_id) == ("c2", "c1")


def test_a_judged_score_is_its_loss_and_nan_is_none(tmp_path: Path) -> None:
    """A judged agent's gate (AUC not a number, a loss) is told by its loss; a loss scale
    that is not finite is kept as None (JSON has no NaN)."""
    paths = _paths(tmp_path)
    gate = GateReport(
        "promoted", "the first model", candidate=ScoresOn("current", math.nan, math.nan, loss=0.3)
    )
    result = train_result(gate=gate, loss_scale=math.inf)
    save_run(paths, from_result(result, 1.0, "daemon"), result)
    (entry,) = load_history(paths).entries
    assert entry.gate is not None and (entry.gate.metric, entry.gate.candidate) == ("loss", 0.3)
    assert entry.gate.served is None and entry.loss_scale is None


def test_the_file_is_compacted_to_the_newest_entries(tmp_path: Path) -> None:
    """However many runs are appended, the file stays under its bound and a read gives
    the newest KEEP entries, oldest first."""
    paths = _paths(tmp_path)
    for index in range(3 * KEEP):
        append_run(paths, _failed(f"run {index} " + "x" * 300))
        assert history_path(paths).stat().st_size <= COMPACT_BYTES + LINE_BYTES
    entries = load_history(paths).entries
    assert len(entries) == KEEP
    assert entries[-1].run.reason.startswith(f"run {3 * KEEP - 1} ")
    assert entries[0].run.reason.startswith(f"run {2 * KEEP} ")


def test_a_torn_line_and_garbage_are_counted_not_raised(tmp_path: Path) -> None:
    """A line torn by a kill mid-write, a line of another version and a hostile line are
    skipped and counted; the entry appended after the torn line reads back whole."""
    paths = _paths(tmp_path)
    append_run(paths, _failed("first"))
    with history_path(paths).open("ab") as handle:
        handle.write(b'{"version": 2}\n<script>alert(1)</script>\n{"version": 1, "run": {"outc')
    append_run(paths, _failed("after the tear"))
    history = load_history(paths)
    assert [e.run.reason for e in history.entries] == ["first", "after the tear"]
    assert history.unreadable == 3


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_is_one_line_not_a_hang(tmp_path: Path, kind: str) -> None:
    """A FIFO (a plain read would block) or a folder at the history's name raises one
    line naming it, and an append there fails without raising (logged)."""
    paths = _paths(tmp_path)
    path = history_path(paths)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    with pytest.raises(HistoryUnreadable, match=r"run_history\.jsonl"):
        load_history(paths)
    append_run(paths, _failed())  # logged, never raised: the run's outcome stands


def test_no_file_is_no_history(tmp_path: Path) -> None:
    """An agent that never ran has an empty history, not an error."""
    history = load_history(_paths(tmp_path))
    assert (history.entries, history.unreadable) == ((), 0)
