"""The set-aside policy itself: a name of its own, never blocked, bounded, reported once."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.files import aside_name, parse_aside
from genesis_fp16_infrastructure.agent_folder.layout import PRECISION_STATE, RUN_REQUEST

AT = datetime(2026, 11, 25, 14, 40, 33, 5, tzinfo=UTC)


def _reported() -> tuple[list[files.SetAside], object]:
    seen: list[files.SetAside] = []
    return seen, files.on_set_aside(seen.append)


def _set_aside_torn(path: Path, text: str) -> files.SetAside:
    path.write_text(text)
    return files.set_aside(path, PRECISION_STATE, f"{path}: torn")


@pytest.mark.parametrize("taken", ["file", "empty folder", "full folder"])
def test_a_taken_old_aside_name_never_blocks_a_set_aside(tmp_path: Path, taken: str) -> None:
    """A folder at run_request.json is moved even where ``run_request.json.unusable`` is
    taken (os.replace refused a full folder there): both kept, reported once."""
    path = tmp_path / RUN_REQUEST.name
    old = path.with_name(path.name + ".unusable")
    if taken == "file":
        old.write_text("earlier evidence")
    else:
        old.mkdir()
        if taken == "full folder":
            (old / "inside").write_text("earlier evidence")
    path.mkdir()
    (path / "inside").write_text("this damage")
    seen, remove = _reported()
    try:
        event = files.clear_way(path, RUN_REQUEST)
    finally:
        remove()  # type: ignore[operator]
    assert event is not None and event.aside is not None and [e.path for e in seen] == [path]
    assert (event.aside / "inside").read_text() == "this damage" and not path.exists()
    assert files.newest_aside(path) == event.aside
    assert files.asides(tmp_path, path.name) == [old, event.aside]
    earlier = {"file": old, "empty folder": None, "full folder": old / "inside"}[taken]
    assert earlier is None or earlier.read_text() == "earlier evidence"


def test_a_free_aside_name_counts_past_taken_ones(tmp_path: Path) -> None:
    """Two damages in one microsecond get ``-2``, ``-3``: a folder or file at the first
    free-looking name is never overwritten."""
    path = tmp_path / "served.json"
    (tmp_path / aside_name(path.name, AT)).mkdir()
    (tmp_path / aside_name(path.name, AT, 2)).write_text("x")
    assert files.free_aside_path(path, AT).name == "served.json.unusable-20261125T144033.000005Z-3"


def test_the_newest_aside_is_found_by_its_name_not_its_listing(tmp_path: Path) -> None:
    """Newest: the latest time, then the highest ``-n`` (10 after 9, not as text); the old
    bare ``.unusable`` is the oldest; other names are not set-aside entries."""
    path = tmp_path / "served.json"
    names = ["served.json.unusable", aside_name(path.name, AT, 9), aside_name(path.name, AT, 10)]
    for name in [*names, "served.json.lock", "served.json.unusable-x", "other.json.unusable"]:
        (tmp_path / name).write_text(name)
    assert [p.name for p in files.asides(path.parent, path.name)] == names
    assert files.newest_aside(path) == tmp_path / names[-1]
    assert files.newest_aside(tmp_path / "verdict.json") is None
    assert parse_aside("served.json.unusable-x") is None
    assert [(parse_aside(n) or ("",))[0] for n in names] == ["served.json"] * 3


def test_a_folder_keeps_its_newest_asides_within_count_and_bytes(tmp_path: Path) -> None:
    """Past ``keep`` entries or ``keep_bytes`` bytes the oldest go (a folder's bytes are
    its files'); the newest always stays, even over the byte bound alone."""
    for n in range(1, 6):
        (tmp_path / aside_name("a.json", AT, n)).write_text("x" * 10)
    big = tmp_path / aside_name("b.json", AT.replace(second=34))
    big.mkdir()
    (big / "inside").write_text("y" * 100)
    removed = files.bound_asides(tmp_path, keep=3, keep_bytes=1000)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([big.name, aside_name("a.json", AT, 5), aside_name("a.json", AT, 4)])
    assert [p.name for p in removed] == [aside_name("a.json", AT, n) for n in (3, 2, 1)]
    assert files.bound_asides(tmp_path, keep=3, keep_bytes=50) == [
        tmp_path / aside_name("a.json", AT, n) for n in (5, 4)
    ]
    assert [p.name for p in tmp_path.iterdir()] == [big.name]  # over 50 bytes, still kept


def test_every_set_aside_bounds_its_folder(tmp_path: Path) -> None:
    """A damage set aside again and again leaves the newest KEEP_ASIDES entries, the last
    one's evidence among them."""
    path = tmp_path / PRECISION_STATE.name
    for n in range(files.KEEP_ASIDES + 5):
        event = _set_aside_torn(path, f"torn {n}")
    assert len(files.asides(path.parent, path.name)) == files.KEEP_ASIDES
    assert event.aside == files.newest_aside(path) and event.aside.read_text() == "torn 24"


def test_a_file_that_cannot_be_moved_is_reported_once_per_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torn file its folder will not let go of (EACCES) is read three times and
    reported once; a new damage at the name is reported again; one another reader
    moved first is not reported twice."""

    def refuse(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied")

    path = tmp_path / PRECISION_STATE.name
    path.write_text("torn")
    seen, remove = _reported()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(files.os, "rename", refuse)
            events = [files.load(path, PRECISION_STATE, dict) for _ in range(3)]
            (tmp_path / "new").write_text("torn again")  # a new inode: both exist a moment
            os.replace(tmp_path / "new", path)
            files.load(path, PRECISION_STATE, dict)
        files.set_aside(tmp_path / "gone.json", PRECISION_STATE, "moved by another reader")
    finally:
        remove()  # type: ignore[operator]
    assert events == [None, None, None] and path.read_text() == "torn again"
    assert len(seen) == 2 and all(e.aside is None and "delete it" in e.why for e in seen)
