"""The run history: one line per finished run, bounded on disk and on read, a torn or
hostile line counted and skipped, a FIFO or a folder never read, and compacted with the
agent folder's one atomic writer."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import RUN_HISTORY
from genesis_fp16_infrastructure.agent_folder.run_history import (
    COMPACT_BYTES,
    KEEP,
    LINE_BYTES,
    append_run,
    decode_entry,
    encode_entry,
)
from genesis_fp16_infrastructure.agent_folder.run_records import (
    MARK_COLUMNS,
    NAME_CHARS,
    PRECISION_REASON_CHARS,
    REASON_CHARS,
    GateMark,
    LastRun,
    LiveColumn,
    LiveMark,
    RunEntry,
)
from genesis_fp16_infrastructure.folder import AgentFolder


def _folder(tmp_path: Path) -> AgentFolder:
    folder = AgentFolder(tmp_path, "se_darwin")
    folder.root.mkdir(parents=True)
    return folder


def _failed(reason: str = "error: boom") -> RunEntry:
    return RunEntry.of_error("failed", reason, 1.0, "daemon")


def test_the_file_is_compacted_to_the_newest_entries(tmp_path: Path) -> None:
    """However many runs are appended, the file stays under its bound and a read gives
    the newest KEEP entries, oldest first."""
    folder = _folder(tmp_path)
    for index in range(3 * KEEP):
        append_run(folder.root, _failed(f"run {index} " + "x" * 300))
        assert folder.history_path.stat().st_size <= COMPACT_BYTES + LINE_BYTES
    entries = folder.history().entries
    assert len(entries) == KEEP
    assert entries[-1].run.reason.startswith(f"run {3 * KEEP - 1} ")
    assert entries[0].run.reason.startswith(f"run {2 * KEEP} ")


def test_a_compaction_is_the_folder_s_atomic_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction goes through the one atomic writer, whose rename is made durable by
    syncing the agent's folder (the hand copy it replaced never synced the folder)."""
    folder = _folder(tmp_path)
    synced: list[Path] = []
    real = files.fsync_directory
    monkeypatch.setattr(files, "fsync_directory", lambda d: (synced.append(Path(d)), real(d)))
    for _ in range(20 * KEEP):  # lines of about 600 bytes: the bound is passed long before
        append_run(folder.root, _failed("x" * 390))
        if synced:
            break
    assert synced == [folder.root]  # the appends before it synced nothing: one compaction
    assert folder.history_path.stat().st_size <= COMPACT_BYTES


def test_its_read_bound_is_the_layout_s() -> None:
    """A read takes what a compacted file and one line hold: the layout's bound."""
    assert RUN_HISTORY.limit == COMPACT_BYTES + LINE_BYTES


def test_a_torn_line_and_garbage_are_counted_not_raised(tmp_path: Path) -> None:
    """A line torn by a kill mid-write, a line of another version and a hostile line are
    skipped and counted; the entry appended after the torn line reads back whole."""
    folder = _folder(tmp_path)
    append_run(folder.root, _failed("first"))
    with folder.history_path.open("ab") as handle:
        handle.write(b'{"version": 2}\n<script>alert(1)</script>\n{"version": 1, "run": {"outc')
    append_run(folder.root, _failed("after the tear"))
    history = folder.history()
    assert [e.run.reason for e in history.entries] == ["first", "after the tear"]
    assert history.unreadable == 3


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_is_one_line_not_a_hang(tmp_path: Path, kind: str) -> None:
    """A FIFO (a plain read would block) or a folder at the history's name raises one
    line naming it; an append sets it aside (as every file of the agent folder's) and
    starts the history again, never raising."""
    folder = _folder(tmp_path)
    path = folder.history_path
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    with pytest.raises(files.UnusableStateFile, match=r"run_history\.jsonl"):
        folder.history()
    append_run(folder.root, _failed("after it"))
    assert [e.run.reason for e in folder.history().entries] == ["after it"]
    assert files.newest_aside(path) is not None


def test_no_file_is_no_history(tmp_path: Path) -> None:
    """An agent that never ran has an empty history, not an error."""
    history = _folder(tmp_path).history()
    assert (history.entries, history.unreadable) == ((), 0)


# Lines as the release before the marks' maps wrote them (version 1: one column each),
# written by its encode_entry at 05a05695.
OLD_LINES = (
    b'{"version":1,"run":{"outcome":"success","precision":"bf16","precision_requested":"auto",'
    b'"finished_at":1764093704.0,"duration_seconds":44.0,"reason":"promoted: no worse than the'
    b' served model","source":"daemon","steps":112,"eval":{"auc":0.9109,"log_loss":0.175},'
    b'"precision_reason":"auto measured bf16 fastest"},"loss_scale":65536.0,"skipped_steps":2,'
    b'"demotions":["fp16 to bf16 at step 40: overflow_rate"],"quarantined":3,"drift":"drift '
    b'flagged: features reward","gate":{"outcome":"promoted","metric":"auc","set":"current",'
    b'"candidate":0.9109,"served":0.9,"candidate_id":"c2","served_id":"c1"},"live":{"difference"'
    b':0.02,"lower":-0.01,"upper":0.05,"margin":0.03,"records":412,"regression":false,'
    b'"rolled_back":false}}',
    b'{"version":1,"run":{"outcome":"rejected","precision":"fp32","precision_requested":"fp32",'
    b'"finished_at":1764097304.0,"duration_seconds":3.5,"reason":"rejected: loss worse",'
    b'"source":"train","steps":8,"eval":null,"precision_reason":""},"loss_scale":null,'
    b'"skipped_steps":null,"demotions":[],"quarantined":null,"drift":null,"gate":{"outcome":'
    b'"rejected","metric":"loss","set":"held_out","candidate":0.31,"served":0.25,"candidate_id":'
    b'"c3","served_id":"c2"},"live":{"difference":0.09,"lower":0.05,"upper":0.13,"margin":0.03,'
    b'"records":300,"regression":true,"rolled_back":true}}',
    b'{"version":1,"run":{"outcome":"success","precision":"fp32","precision_requested":"fp32",'
    b'"finished_at":1764100904.0,"duration_seconds":1.0,"reason":"promoted: the first model",'
    b'"source":"daemon","steps":8,"eval":null,"precision_reason":""},"loss_scale":null,'
    b'"skipped_steps":null,"demotions":[],"quarantined":null,"drift":null,"gate":{"outcome":'
    b'"promoted","metric":null,"set":null,"candidate":null,"served":null,"candidate_id":"c1",'
    b'"served_id":null},"live":null}',
)


def test_a_history_written_before_the_maps_reads_back_without_loss(tmp_path: Path) -> None:
    """Version-1 lines (a gate of one ``metric``, a live mark of one column) read as maps
    of that one column, every other field as written; a new entry appended after them is
    written in this version, and the three old and the new read back together."""
    folder = _folder(tmp_path)
    folder.history_path.write_bytes(b"".join(line + b"\n" for line in OLD_LINES))
    promoted, rejected, first = folder.history().entries
    assert promoted.run == LastRun(
        "success", "bf16", "auto", 1764093704.0, 44.0, "promoted: no worse than the served model",
        "daemon", 112, {"auc": 0.9109, "log_loss": 0.175}, "auto measured bf16 fastest",
    )  # fmt: skip
    assert (promoted.loss_scale, promoted.skipped_steps, promoted.quarantined) == (65536.0, 2, 3)
    assert promoted.demotions == ("fp16 to bf16 at step 40: overflow_rate",)
    assert promoted.drift == "drift flagged: features reward"
    assert promoted.gate == GateMark(
        "promoted", "current", "auc", {"auc": 0.9109}, {"auc": 0.9}, "c2", "c1"
    )
    assert promoted.live == LiveMark(
        412, False, False, "loss", {"loss": LiveColumn(0.02, -0.01, 0.05, 0.03)}
    )
    assert rejected.gate == GateMark(
        "rejected", "held_out", "loss", {"loss": 0.31}, {"loss": 0.25}, "c3", "c2"
    )
    assert rejected.live is not None and rejected.live.rolled_back
    assert rejected.live.regressed == ("loss",) and rejected.live.watched.upper == 0.13
    assert first.gate == GateMark("promoted", candidate_id="c1") and first.live is None
    append_run(folder.root, rejected)
    assert folder.history_path.read_bytes().splitlines()[-1].startswith(b'{"version":2,')
    history = folder.history()
    assert history.entries == (promoted, rejected, first, rejected) and history.unreadable == 0


def test_a_mark_keeps_its_columns_the_primary_first_within_a_line() -> None:
    """A live report of more columns than a mark keeps: MARK_COLUMNS of them, the primary
    first; at the longest names, full-precision figures, the longest reasons and twelve
    eval figures (history_entry keeps 12), the entry is one line under LINE_BYTES that reads
    back as written."""
    names = [f"column_{index:02d}_".ljust(NAME_CHARS, "x") for index in range(MARK_COLUMNS + 3)]
    figures = {"difference": 0.1 / 3, "lower": -1 / 7, "upper": 2 / 3, "margin": 1 / 9}
    report = {"records": 10**9, "regression": True, "rolled_back": True, "primary": names[-1],
              "metrics": {name: {**figures, "regression": True} for name in names}}  # fmt: skip
    live = LiveMark.of(report)
    assert list(live.metrics) == [names[-1], *names[: MARK_COLUMNS - 1]]
    assert live.watched == LiveColumn(0.1 / 3, -1 / 7, 2 / 3, 1 / 9, True)
    scores = [{name: value for name in names[:MARK_COLUMNS]} for value in (1 / 3, 2 / 3)]
    gate = GateMark("rejected", "held_out", names[0], *scores, "c" * 160, "s" * 160)
    run = RunEntry.of_error("failed", "r" * REASON_CHARS, 1.0, "daemon").run
    evaluated = {f"eval_{index:02d}_".ljust(NAME_CHARS, "x"): 1 / 3 for index in range(12)}
    run = replace(run, precision_reason="p" * PRECISION_REASON_CHARS, eval=evaluated)
    entry = RunEntry(run, gate=gate, live=live)
    line = encode_entry(entry)
    assert len(line) < LINE_BYTES and decode_entry(line.rstrip(b"\n")) == entry
