"""The run history: one line per finished run, bounded on disk and on read, a torn or
hostile line counted and skipped, a FIFO or a folder never read, and compacted with the
agent folder's one atomic writer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.folder import AgentFolder
from genesis_fp16_infrastructure.agent_folder.layout import RUN_HISTORY
from genesis_fp16_infrastructure.agent_folder.run_history import (
    COMPACT_BYTES,
    KEEP,
    LINE_BYTES,
    HistoryUnreadable,
    LastRun,
    RunEntry,
)


def _folder(tmp_path: Path) -> AgentFolder:
    folder = AgentFolder(tmp_path, "se_darwin")
    folder.root.mkdir(parents=True)
    return folder


def _failed(reason: str = "error: boom") -> RunEntry:
    return RunEntry(LastRun.of_error("failed", reason, 1.0, "daemon"))


def test_the_file_is_compacted_to_the_newest_entries(tmp_path: Path) -> None:
    """However many runs are appended, the file stays under its bound and a read gives
    the newest KEEP entries, oldest first."""
    folder = _folder(tmp_path)
    for index in range(3 * KEEP):
        folder.append_run(_failed(f"run {index} " + "x" * 300))
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
        folder.append_run(_failed("x" * 390))
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
    folder.append_run(_failed("first"))
    with folder.history_path.open("ab") as handle:
        handle.write(b'{"version": 2}\n<script>alert(1)</script>\n{"version": 1, "run": {"outc')
    folder.append_run(_failed("after the tear"))
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
    with pytest.raises(HistoryUnreadable, match=r"run_history\.jsonl"):
        folder.history()
    folder.append_run(_failed("after it"))
    assert [e.run.reason for e in folder.history().entries] == ["after it"]
    assert files.newest_aside(path) is not None


def test_no_file_is_no_history(tmp_path: Path) -> None:
    """An agent that never ran has an empty history, not an error."""
    history = _folder(tmp_path).history()
    assert (history.entries, history.unreadable) == ((), 0)
