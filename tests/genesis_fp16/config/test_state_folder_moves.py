"""A state folder copied or mounted elsewhere keeps working: the paths it stores are
relative to it (the sample-data marker, ``AgentFolder.sample_data``), and old absolute
ones are still read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder.files import newest_aside
from genesis_fp16_infrastructure.folder import AgentFolder


class _Writer:
    """A plugin that writes a small dataset and counts how often it was asked to."""

    name = "writer"

    def __init__(self) -> None:
        self.calls = 0

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        self.calls += 1
        path = Path(out) / "trajectory_pools" / "writer" / "pool.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return path


def test_a_copied_state_folder_finds_its_sample_data(tmp_path: Path) -> None:
    """Generated under ./a, the folder copied to ./b and ./a removed: b's data is found
    under b (not regenerated), and the marker names no absolute path."""
    plugin = _Writer()
    first = AgentFolder(tmp_path / "a", "writer").sample_data(plugin.generate_sample_data, 10, 0)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    moved = AgentFolder(tmp_path / "b", "writer")
    found = moved.sample_data(plugin.generate_sample_data, 10, 0)
    assert found.exists() and found == moved.data_dir / first.relative_to(
        tmp_path / "a" / "agents" / "writer" / "data"
    )
    assert plugin.calls == 1
    assert not Path((moved.data_dir / ".generated").read_text()).is_absolute()


def test_an_old_absolute_marker_is_still_read_after_a_move(tmp_path: Path) -> None:
    """A marker written with an absolute path before markers were relative: read as it is
    where it exists, and found under the new folder once the state folder moved."""
    plugin = _Writer()
    old = AgentFolder(tmp_path / "a", "writer")
    data = plugin.generate_sample_data(old.data_dir, 10, 0)
    (old.data_dir / ".generated").write_text(str(data.resolve()))
    assert old.sample_data(plugin.generate_sample_data, 10, 0) == data.resolve()
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = AgentFolder(tmp_path / "b", "writer")
    found = moved.sample_data(plugin.generate_sample_data, 10, 0)
    assert found.exists() and found.is_relative_to(tmp_path / "b")
    assert plugin.calls == 1


@pytest.mark.parametrize("kind", ["torn", "oversize", "not_utf8", "folder", "fifo", "link"])
def test_an_unusable_sample_data_marker_is_set_aside_and_the_data_regenerated(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torn, 4 KiB+, non-UTF-8 marker, or a folder, FIFO or link at its name: the data
    is generated again and the marker set aside and counted (file=sample_data_marker),
    instead of a failed run every hour."""
    import os

    from genesis_fp16_infrastructure.agent_folder import files

    skipped: list[tuple[str, str]] = []
    monkeypatch.setattr(files, "_listeners", [lambda e: skipped.append((e.agent, e.label))])

    plugin = _Writer()
    paths = AgentFolder(tmp_path, "writer")
    first = paths.sample_data(plugin.generate_sample_data, 10, 0)
    marker = paths.data_dir / ".generated"
    marker.unlink()
    if kind == "torn":
        marker.write_text("trajectory_pools/wri")
    elif kind == "oversize":
        marker.write_text("x" * 5000)
    elif kind == "not_utf8":
        marker.write_bytes(b"\xff\xfe")
    elif kind == "folder":
        marker.mkdir()
    elif kind == "fifo":
        os.mkfifo(marker)
    else:
        marker.symlink_to(first)
    assert paths.sample_data(plugin.generate_sample_data, 10, 0) == first
    assert plugin.calls == 2
    assert newest_aside(paths.data_dir / ".generated") is not None
    assert skipped == [("writer", "sample_data_marker")]
    assert paths.sample_data(plugin.generate_sample_data, 10, 0) == first
    assert plugin.calls == 2  # the new marker is read as before
