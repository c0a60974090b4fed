"""Atomic writes leave the old file or the new one, never a partial one or a stray temp file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

import pytest

from genesis_fp16_infrastructure.agent_folder.files import write_atomic, write_json_atomic


def test_json_is_written_whole_and_replaces_the_old_file(tmp_path: Path) -> None:
    """A second write replaces the first; the folder holds only the target."""
    target = tmp_path / "nested" / "state.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2, "b": [1, 2]})
    assert json.loads(target.read_text()) == {"a": 2, "b": [1, 2]}
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]


def test_a_failing_write_keeps_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    """An error half-way through the write leaves the previous content untouched."""
    target = tmp_path / "state.json"
    write_json_atomic(target, {"old": True})

    def dies_midway(handle: IO[bytes]) -> None:
        handle.write(b'{"new": tr')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, dies_midway)
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
