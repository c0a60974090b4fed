"""A checkpoint's per-record arrays live in one side file named by their SHA-256: written
once for every save of the same arrays, read back only where asked and checked against
its name, pruned with the checkpoints that name it, linked where a checkpoint is copied."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch

from genesis_fp16_infrastructure import kept_in_memory
from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.judging.scoring_copy import copy_checkpoint
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint_arrays import (
    PER_RECORD,
    PREFIX,
    REF,
    with_arrays,
)
from genesis_fp16_infrastructure.training.checkpoint_files import summary_path
from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint

RECORDS = 20_000


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's process starts with nothing kept."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])


def _state(step: int, seed: int = 0, per_record: bool = True) -> dict[str, Any]:
    """A checkpoint's state whose extra holds a pool's fingerprint and trained ids."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-(2**62), 2**62, (RECORDS,), generator=g, dtype=torch.int64)
    extra: dict[str, Any] = {
        "encoder": {"name": "enc"},
        "data": {"version": 2, "records": RECORDS, "ids": ids.sort().values, "labelled": ids},
        "trained_ids": ids[: RECORDS // 2].sort().values,
    }
    if per_record:
        extra[PER_RECORD] = ["trained_ids", "data/ids", "data/labelled"]
    return {
        keys.SCHEMA: keys.SCHEMA_VERSION,
        keys.MODEL: {"w": torch.ones(4)},
        keys.OPTIMIZER: [],
        keys.SCHEDULER: [],
        keys.SCALER: {"scale": 1.0},
        keys.PRECISION: {"requested": "fp32", "used": "fp32", "reason": "test"},
        keys.STEP: step,
        keys.RNG: {},
        keys.CONFIG: {},
        keys.EXTRA: extra,
    }


def _sides(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{PREFIX}*"))


def _same_extra(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in (
            (a["trained_ids"], b["trained_ids"]),
            (a["data"]["ids"], b["data"]["ids"]),
            (a["data"]["labelled"], b["data"]["labelled"]),
        )
    )


def test_the_arrays_go_to_one_side_file_written_once_and_read_back_checked(
    tmp_path: Path,
) -> None:
    """Two saves of the same arrays write one side file, once; each checkpoint holds
    references (a small file), and with_arrays gives back the arrays saved."""
    manager = CheckpointManager(tmp_path, keep=3)
    state = _state(10)
    first = manager.save(state)
    [side] = _sides(tmp_path)
    written = side.stat()
    second = manager.save(_state(20))
    assert _sides(tmp_path) == [side] and side.stat().st_mtime_ns == written.st_mtime_ns
    assert side.stat().st_ino == written.st_ino  # not written again
    assert first.stat().st_size < 10_000 < side.stat().st_size  # 3 x 8 bytes a record
    loaded = load_checkpoint(second)
    ref = loaded[keys.EXTRA]["trained_ids"]
    assert isinstance(ref, dict) and side.name == f"{PREFIX}{ref[REF]}.bin"
    assert _same_extra(with_arrays(loaded, second)[keys.EXTRA], state[keys.EXTRA])
    assert isinstance(loaded[keys.EXTRA]["trained_ids"], dict)  # the loaded state unchanged


@pytest.mark.parametrize("damage", ["planted", "truncated", "missing"])
def test_a_side_file_not_of_its_name_is_refused_in_one_line(tmp_path: Path, damage: str) -> None:
    """A side file whose bytes are not those its name says (planted, truncated) or that
    is gone is refused with one line naming it; the checkpoint itself still loads."""
    path = CheckpointManager(tmp_path).save(_state(10))
    [side] = _sides(tmp_path)
    data = side.read_bytes()
    if damage == "planted":
        side.write_bytes(data[:8] + bytes([data[8] ^ 1]) + data[9:])
    elif damage == "truncated":
        side.write_bytes(data[: len(data) // 2])
    else:
        side.unlink()
    loaded = load_checkpoint(path)
    with pytest.raises(CheckpointError) as caught:
        with_arrays(loaded, path)
    message = str(caught.value)
    assert "\n" not in message and side.name in message
    assert ("missing" if damage == "missing" else "truncated, edited or planted") in message


def test_a_planted_file_under_the_name_is_replaced_at_the_next_save(tmp_path: Path) -> None:
    """A file already named like the arrays' side file but holding other bytes is not
    taken for it: the save writes the arrays, and they read back."""
    manager = CheckpointManager(tmp_path)
    manager.save(_state(10))
    [side] = _sides(tmp_path)
    side.write_bytes(b"\0" * side.stat().st_size)
    other = CheckpointManager(tmp_path)  # a new process's manager: it knows no file
    path = other.save(_state(20))
    assert _same_extra(with_arrays(load_checkpoint(path), path)[keys.EXTRA], _state(0)[keys.EXTRA])


def test_side_files_go_with_the_last_checkpoint_naming_them(tmp_path: Path) -> None:
    """Pruning deletes the side files no kept checkpoint names (and an orphan a kill left
    before its checkpoint); a checkpoint without a current summary keeps them all."""
    manager = CheckpointManager(tmp_path, keep=1)
    manager.save(_state(10, seed=1))
    orphan = tmp_path / f"{PREFIX}{hashlib.sha256(b'x').hexdigest()}.bin"
    orphan.write_bytes(b"x" * 8)
    path = manager.save(_state(20, seed=2))
    [side] = _sides(tmp_path)
    assert side.name[len(PREFIX) : -4] in summary_path(path).read_text()
    summary_path(path).unlink()
    orphan.write_bytes(b"x" * 8)
    manager.save(_state(20, seed=2))  # the same state: nothing written, nothing pruned
    manager.remove(tmp_path / "none.pt")
    assert orphan.exists()  # the summary gone: what it names is unknown, all kept
    manager.remove(path)
    assert _sides(tmp_path) == []


def test_a_copied_or_moved_checkpoint_takes_its_arrays_as_links(tmp_path: Path) -> None:
    """copy_checkpoint (the served model in the candidate that continues it) and
    set_aside link the side file: the copy's arrays read back, none written again."""
    manager = CheckpointManager(tmp_path / "a")
    path = manager.save(_state(10))
    [side] = _sides(tmp_path / "a")
    (tmp_path / "b").mkdir()
    copy_checkpoint(path, tmp_path / "b")
    copied = tmp_path / "b" / path.name
    assert (tmp_path / "b" / side.name).stat().st_ino == side.stat().st_ino
    assert _same_extra(
        with_arrays(load_checkpoint(copied), copied)[keys.EXTRA], _state(0)[keys.EXTRA]
    )
    moved = manager.set_aside(path, tmp_path / "c")
    assert _sides(tmp_path / "a") == []  # named by no checkpoint left there
    assert _same_extra(
        with_arrays(load_checkpoint(moved), moved)[keys.EXTRA], _state(0)[keys.EXTRA]
    )


def test_a_resident_process_reads_a_side_file_again_only_once_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a resident process the arrays it wrote are handed out without a read; a file
    changed since (its identity) is read again, and refused when its bytes are not its
    name's."""
    kept_in_memory.process_memory(64 * 2**20)
    path = CheckpointManager(tmp_path).save(_state(10))
    [side] = _sides(tmp_path)
    reads: list[Path] = []
    real = Path.read_bytes

    def counted(self: Path) -> bytes:
        reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counted)
    loaded = load_checkpoint(path)
    reads.clear()
    assert _same_extra(with_arrays(loaded, path)[keys.EXTRA], _state(0)[keys.EXTRA])
    assert side not in reads
    data = real(side)
    side.write_bytes(data[:-8] + bytes(8))
    with pytest.raises(CheckpointError, match="truncated, edited or planted"):
        with_arrays(loaded, path)
    assert side in reads


def test_a_checkpoint_with_its_arrays_inline_reads_as_before(tmp_path: Path) -> None:
    """A checkpoint written before side files (its arrays inline, no per_record key) loads
    with them, and with_arrays hands it on as it is."""
    path = CheckpointManager(tmp_path).save(_state(10, per_record=False))
    assert _sides(tmp_path) == []
    loaded = load_checkpoint(path)
    assert with_arrays(loaded, path) is loaded
    assert _same_extra(loaded[keys.EXTRA], _state(0)[keys.EXTRA])


def test_a_loaded_state_saved_elsewhere_is_refused_until_its_arrays_are_read(
    tmp_path: Path,
) -> None:
    """A loaded state holds references: saved in another folder they would name a file
    not there, so the save says to read them first; read, it saves."""
    path = CheckpointManager(tmp_path / "a").save(_state(10))
    loaded = load_checkpoint(path)
    with pytest.raises(ValueError, match="with_arrays"):
        CheckpointManager(tmp_path / "b").save(loaded)
    again = CheckpointManager(tmp_path / "b").save(with_arrays(loaded, path))
    assert _same_extra(
        with_arrays(load_checkpoint(again), again)[keys.EXTRA], _state(0)[keys.EXTRA]
    )
    assert CheckpointManager(tmp_path / "a").save({**loaded, keys.STEP: 11}).exists()
