"""The agent folder's flock (agent_folder.lock): a busy lock names its holder from the
file it was tried on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.agent_folder import lock
from genesis_fp16_infrastructure.agent_folder.layout import POINTER_LOCK
from genesis_fp16_infrastructure.errors import LockBusy


def test_a_busy_lock_names_the_holder_its_file_records(tmp_path: Path) -> None:
    """A second descriptor refused the lock reads who holds it from the file it opened."""
    path = tmp_path / "served.json.lock"
    held = lock.take_lock(path, POINTER_LOCK, record={"pid": 41, "owner": "a run"})
    try:
        with pytest.raises(LockBusy) as raised:
            lock.take_lock(path, POINTER_LOCK, wait=False)
        assert raised.value.holder == {"pid": 41, "owner": "a run"}
        assert raised.value.path == path
        assert lock.read_holder(path, POINTER_LOCK) == {"pid": 41, "owner": "a run"}
    finally:
        os.close(held)


def test_a_busy_lock_whose_file_names_nobody_has_no_holder(tmp_path: Path) -> None:
    """A holder that wrote no record (or one torn or over the layout's bound) is no holder:
    None after the second of retries, never a guess."""
    path = tmp_path / "served.json.lock"
    held = lock.take_lock(path, POINTER_LOCK)
    try:
        for text in (b"", b'{"pid": 4', b"[1, 2]", b" " * (POINTER_LOCK.limit + 1)):
            os.ftruncate(held, 0)
            os.pwrite(held, text, 0)
            with pytest.raises(LockBusy) as raised:
                lock.take_lock(path, POINTER_LOCK, wait=False)
            assert raised.value.holder is None, text[:20]
    finally:
        os.close(held)


def test_a_folder_at_the_lock_name_is_set_aside_and_the_lock_taken(tmp_path: Path) -> None:
    """What is no regular file at the lock's name is set aside, and a fresh file locked."""
    path = tmp_path / "served.json.lock"
    path.mkdir()
    fd = lock.take_lock(path, POINTER_LOCK)
    try:
        assert path.is_file()
        assert [p.name.split("-")[0] for p in tmp_path.glob("served.json.lock.unusable-*")] == [
            "served.json.lock.unusable"
        ]
    finally:
        os.close(fd)
