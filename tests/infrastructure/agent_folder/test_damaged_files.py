"""Every file the agent folder's owner names, damaged each way, costs no failed run.

The test iterates the layout itself: a file added to ``LAYOUT`` without a consumer
here fails :func:`test_every_file_of_the_layout_has_a_consumer`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from genesis_fp16.config.settings import Settings
from genesis_fp16.jobs.guard_state import load_memory
from genesis_fp16.jobs.probe_gate import ProbeRecord
from genesis_fp16.launch.handoff import read_run_file, write_run_file
from genesis_fp16.service.state_lock import acquire_state_folder
from genesis_fp16_infrastructure.agent_folder import candidates, files
from genesis_fp16_infrastructure.agent_folder.candidates import list_candidates, read_verdict
from genesis_fp16_infrastructure.agent_folder.files import parse_aside
from genesis_fp16_infrastructure.agent_folder.layout import LAYOUT, StateFile
from genesis_fp16_infrastructure.agent_folder.pointer import pointer_lock
from genesis_fp16_infrastructure.agent_folder.repair import set_aside_unusable
from genesis_fp16_infrastructure.agent_folder.run_history import append_run
from genesis_fp16_infrastructure.agent_folder.run_records import RunEntry
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
from genesis_fp16_infrastructure.data.sources import Source
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.training.checkpoint import CheckpointManager
from genesis_fp16_infrastructure.training.precision.kept_measurements import (
    read_calibration,
    read_capture_verdicts,
)

AGENT = "a"


class Folder:
    """A state folder with one agent, one checkpoint folder and one candidate."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "state"
        self.paths = AgentFolder(self.state, AGENT)
        self.candidate = self.paths.checkpoint_dir / "candidates" / "c1"
        self.candidate.mkdir(parents=True)
        self.paths.data_dir.mkdir()

    def home(self, file: StateFile) -> Path:
        homes = {
            "state": self.state,
            "agent": self.paths.root,
            "checkpoints": self.paths.checkpoint_dir,
            "candidate": self.candidate,
            "data": self.paths.data_dir,
        }
        return homes[file.home]


def _run_request(folder: Folder, path: Path) -> None:
    request = TrainRequest(
        agent=AGENT,
        precision_reason="test",
        state_dir=folder.state,
        checkpoint_dir=folder.paths.checkpoint_dir,
    )
    write_run_file(path, request, "INFO")
    assert read_run_file(path)[0] == request


def _quarantine(folder: Folder, path: Path) -> None:
    sink = QuarantineSink(path)
    sink.add(Source(path, "line 1"), "bad record", "{")
    sink.close()


def _claim(folder: Folder, path: Path) -> None:
    manager = CheckpointManager(folder.paths.checkpoint_dir)
    manager.claim("test")
    manager.release()


def _hold(lock: Callable[[], object]) -> Callable[[Folder, Path], None]:
    def take(folder: Folder, path: Path) -> None:
        with lock():  # type: ignore[attr-defined]
            pass

    return take


FAILED = RunEntry.of_error("failed", "why", 1.0, "daemon").run


def _sample(folder: Path, count: int, seed: int) -> Path:
    """A plugin's sample data: one file in its data folder."""
    path = folder / "sample.json"
    path.write_text("{}")
    return path


# What reads (or writes) each file in a run: the daemon's or the library's own call.
CONSUMERS: dict[str, Callable[[Folder, Path], object]] = {
    "precision_state": lambda f, p: load_memory(Settings(state_dir=f.state), AGENT),
    "precision_state_lock": lambda f, p: _hold(f.paths.precision_memory_locked)(f, p),
    "carried_scale": lambda f, p: f.paths.carried_scale(),
    "last_success": lambda f, p: f.paths.stored_last_success(),
    "last_run": lambda f, p: f.paths.save_last_run(FAILED),
    "run_history": lambda f, p: append_run(f.paths.root, RunEntry(FAILED)),
    "precision_calibration": lambda f, p: read_calibration(p),
    "capture_verdicts": lambda f, p: read_capture_verdicts(p),
    "probe_result": lambda f, p: AgentFolder.at(p.parent).probe_record(ProbeRecord.from_json),
    "run_request": _run_request,
    "sample_data_marker": lambda f, p: f.paths.sample_data(_sample, 1, 0),
    "owner_lock": lambda f, p: os.close(acquire_state_folder(f.state, "serve")),
    "served_pointer": lambda f, p: set_aside_unusable(f.paths.checkpoint_dir),
    "pointer_lock": lambda f, p: _hold(lambda: pointer_lock(f.paths.checkpoint_dir))(f, p),
    "writer_lock": _claim,
    "data_manifest": lambda f, p: candidates.read_data_manifest(p.parent),
    "quarantine": _quarantine,
    "candidate_meta": lambda f, p: list_candidates(f.paths.checkpoint_dir),
    "verdict": lambda f, p: read_verdict(p.parent),
    "judged_ids": lambda f, p: stores.read_known_ids(p.parent),
    "judged_watch": lambda f, p: stores.read_watch(p, "loss"),
}
# Files a run writes whole and never reads as a record: damaged content is replaced.
WRITTEN = {"last_run", "run_request", "quarantine"}


def _damage(path: Path, file: StateFile, how: str) -> None:
    if how == "folder":
        path.mkdir()
        (path / "inside").write_text("kept")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "huge":  # sparse: one byte over the bound costs no disk
        with path.open("wb") as handle:
            handle.write(b"{}")
            handle.truncate(file.limit + 1)
    else:
        data = {
            "corrupt": b'{"version": 1, "torn',
            "empty": b"",
            "not_utf8": b'{"v": "\xff\xfe"}',
        }[how]
        path.write_bytes(data)


def _run(consumer: Callable[[], object]) -> None:
    """Run ``consumer`` in a thread: a read that blocks on a FIFO fails, never hangs."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            consumer()
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "blocked on the damaged file"
    assert not failed, repr(failed[0])


def test_every_file_of_the_layout_has_a_consumer() -> None:
    """The table below covers the layout exactly: a new file cannot be added without it."""
    assert sorted(CONSUMERS) == sorted(f.label for f in LAYOUT)
    assert len({f.name for f in LAYOUT}) == len(LAYOUT)


@pytest.mark.parametrize("how", ["corrupt", "empty", "huge", "not_utf8", "folder", "fifo"])
@pytest.mark.parametrize("file", LAYOUT, ids=lambda f: f.label)
def test_a_damaged_file_is_set_aside_counted_and_costs_no_failed_run(
    tmp_path: Path, file: StateFile, how: str
) -> None:
    """Damaged each way, each file's consumer neither raises nor blocks; a file read as a
    record, or anything but a regular file at a name, is set aside as ``.unusable`` and
    reported once under its label; a file only written has its content replaced."""
    folder = Folder(tmp_path)
    path = file.at(folder.home(file))
    _damage(path, file, how)
    seen: list[files.SetAside] = []
    remove = files.on_set_aside(seen.append)
    try:
        _run(lambda: CONSUMERS[file.label](folder, path))
    finally:
        remove()
    in_the_way = how in ("folder", "fifo")
    mine = [event for event in seen if event.path == path]
    if in_the_way or (file.kind in ("json", "text", "binary") and file.label not in WRITTEN):
        assert [e.label for e in mine] == [file.label], seen
        assert how != "huge" or "over the" in mine[0].why  # the bound refused it, unread
        assert files.newest_aside(path) is not None
        assert not path.exists() or path.is_file()
    else:  # a lock's or a written file's content: never read as a record, replaced
        assert mine == [], seen
    if how == "folder" and (in_the_way or file.label not in WRITTEN):
        assert (files.newest_aside(path) / "inside").read_text() == "kept"  # type: ignore[operator]


def _fresh_damage(path: Path, how: str, mark: str) -> None:
    """A folder holding ``mark``, or torn bytes spelling it, where a run left its file."""
    if path.is_file() or path.is_symlink():
        path.unlink()  # the last run's good file (a lock, a written record)
    if how == "folder":
        path.mkdir()
        (path / "inside").write_text(mark)
    else:
        path.write_text(f'{{"version": 1, "torn": "{mark}')


def _take_old_aside_names(folder: Folder) -> dict[Path, int]:
    """Each name's ``<name>.unusable`` (where the old policy renamed to) taken, by a full
    folder or a file in turn; returns the set-aside entries now in each home folder."""
    made: dict[Path, int] = {}
    for index, file in enumerate(LAYOUT):
        old = file.at(folder.home(file)).with_name(file.at(folder.home(file)).name + ".unusable")
        if index % 2:
            old.write_text("earlier")
        else:
            old.mkdir()
            (old / "inside").write_text("earlier")
        made[old.parent] = made.get(old.parent, 0) + 1
    return made


def _set_aside_now(file: StateFile, how: str) -> bool:
    """Whether ``how``'s damage at ``file`` is set aside: anything in the way of a name,
    and torn bytes in a file read as a record."""
    return how == "folder" or (
        file.kind in ("json", "text", "binary") and file.label not in WRITTEN
    )


def test_twenty_five_runs_of_fresh_damage_are_each_counted_once_kept_and_bounded(
    tmp_path: Path,
) -> None:
    """25 runs, each with fresh damage at all 19 names (a folder, or torn bytes, in turn)
    and every old ``.unusable`` name taken by a file or a full folder: no consumer fails,
    each damage is reported once, its evidence is the newest aside of its name, and each
    folder keeps at most KEEP_ASIDES set-aside entries (without the bound up to 76)."""
    folder = Folder(tmp_path)
    made = _take_old_aside_names(folder)
    for run in range(25):
        how = "folder" if run % 2 == 0 else "torn"
        for file in LAYOUT:
            _fresh_damage(file.at(folder.home(file)), how, f"run {run}")
        seen: list[files.SetAside] = []
        remove = files.on_set_aside(seen.append)
        try:
            for file in LAYOUT:
                _run(lambda file=file: CONSUMERS[file.label](folder, file.at(folder.home(file))))
        finally:
            remove()
        expected = [file for file in LAYOUT if _set_aside_now(file, how)]
        assert sorted(e.label for e in seen) == sorted(f.label for f in expected), run
        for file in expected:
            aside = files.newest_aside(file.at(folder.home(file)))
            assert aside is not None, (run, file.label)
            kept = (aside / "inside").read_text() if how == "folder" else aside.read_text()
            assert f"run {run}" in kept, (run, file.label)
            made[aside.parent] += 1
    for home, count in made.items():
        entries = [name for name in os.listdir(home) if parse_aside(name) is not None]
        assert len(entries) == min(count, files.KEEP_ASIDES), home
    assert max(made.values()) > files.KEEP_ASIDES * 3  # the bound, not the runs, kept it small
