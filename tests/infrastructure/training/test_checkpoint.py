"""CheckpointManager: atomic writes, keep-last-N, weights_only loading, fallback past bad files."""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from checkpoint_state import checkpoint_state
from torch import nn

from genesis_fp16_infrastructure.errors import CheckpointError
from genesis_fp16_infrastructure.training import (
    CheckpointManager,
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.checkpoint import load_checkpoint
from genesis_fp16_infrastructure.training.rng import capture_rng_state, restore_rng_state


def _state(step: int) -> dict[str, Any]:
    return checkpoint_state(step, torch.full((3,), float(step)))


def _saved(tmp_path: Path, steps: list[int], keep: int = 5) -> CheckpointManager:
    manager = CheckpointManager(tmp_path, keep=keep)
    for step in steps:
        manager.save(_state(step))
    return manager


def test_save_then_load_latest_round_trips_and_names_sort_by_step(tmp_path: Path) -> None:
    """The newest checkpoint comes back intact; file names sort by step."""
    manager = _saved(tmp_path, [5, 100, 20])
    assert [p.name for p in manager.checkpoints()] == [
        "ckpt-0000000005.pt",
        "ckpt-0000000020.pt",
        "ckpt-0000000100.pt",
    ]
    found = manager.load_latest()
    assert found is not None
    state, path = found
    assert path.name == "ckpt-0000000100.pt" and state[keys.STEP] == 100
    assert torch.equal(state[keys.MODEL]["w"], torch.full((3,), 100.0))


def test_keeps_only_the_last_n(tmp_path: Path) -> None:
    """keep=3 leaves the three newest files, their digests and summaries and nothing else
    in the folder."""
    manager = _saved(tmp_path, [1, 2, 3, 4, 5], keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"ckpt-000000000{step}.pt{suffix}"
        for step in (3, 4, 5)
        for suffix in ("", ".json", ".sha256")
    ]
    assert len(manager.checkpoints()) == 3


@pytest.mark.parametrize("damage", ["truncate", "garbage", "schema"])
def test_a_bad_newest_checkpoint_falls_back_to_the_previous_with_a_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn, garbled or wrong-schema newest file is skipped, named in a warning."""
    manager = _saved(tmp_path, [10, 20])
    newest = manager.checkpoints()[-1]
    if damage == "truncate":
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    elif damage == "garbage":
        newest.write_bytes(b"\x00not a checkpoint\xff" * 64)
    else:
        torch.save({**_state(20), keys.SCHEMA: keys.SCHEMA_VERSION + 1}, newest)
    with caplog.at_level(logging.WARNING):
        found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 10
    assert any(newest.name in r.getMessage() for r in caplog.records)


def test_no_valid_checkpoint_returns_none_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every file bad: None, and a warning says so; an empty folder is silent."""
    assert CheckpointManager(tmp_path / "absent").load_latest() is None
    manager = _saved(tmp_path, [1])
    manager.checkpoints()[0].write_bytes(b"junk")
    with caplog.at_level(logging.WARNING):
        assert manager.load_latest() is None
    assert any("no valid checkpoint" in r.getMessage() for r in caplog.records)


class _Payload:
    """An object that, if unpickled, would run code: it touches a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path.touch, (self.marker,))


def test_a_pickled_custom_object_is_refused_not_executed(tmp_path: Path) -> None:
    """weights_only loading rejects a file carrying a custom object and never runs it."""
    marker = tmp_path / "executed"
    manager = _saved(tmp_path / "ckpt", [1])
    torch.save({**_state(2), keys.EXTRA: _Payload(marker)}, manager.path_for(2))
    found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1
    assert not marker.exists()


def test_a_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that dies half-way leaves the old checkpoints and no temp or partial file."""
    manager = _saved(tmp_path, [1])
    before = sorted(p.name for p in tmp_path.iterdir())

    def dies_midway(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(OSError, match="disk full"):
        manager.save(_state(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    monkeypatch.undo()
    found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1


def test_trainer_state_is_weights_only_loadable_with_every_key(tmp_path: Path) -> None:
    """A real fp16 trainer's state (fused AdamW, scheduler) saves and loads weights_only."""
    model = nn.Linear(4, 2)
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=128.0))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    trainer = Trainer(model, [opt], policy, schedulers=[sched])
    x = torch.randn(8, 4)
    trainer.step([x], lambda m, b: m(b).float().pow(2).mean(), 8)
    path = CheckpointManager(tmp_path).save(trainer.state_dict())
    state = torch.load(path, weights_only=True)
    assert set(keys.REQUIRED) | {keys.STATS} <= set(state)
    assert state[keys.SCALER]["scale"] == 128.0 and state[keys.STEP] == 1
    assert state[keys.PRECISION]["used"] == "fp16"


def test_scaler_state_is_saved_in_fp32_runs_too() -> None:
    """The checkpoint carries a full scaler state even when loss scaling is off."""
    model = nn.Linear(4, 2)
    policy = PrecisionPolicy.create("fp32", "cpu")
    trainer = Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy)
    state = trainer.state_dict()[keys.SCALER]
    assert {"scale", "_growth_tracker"} <= set(state) and state["enabled"] is False


def test_rng_state_round_trips_for_torch_python_and_numpy() -> None:
    """Restoring a captured RNG state replays torch, random and numpy draws exactly."""
    state = capture_rng_state()
    first = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)
    restore_rng_state(state)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


def test_keep_must_be_positive(tmp_path: Path) -> None:
    """keep=0 is refused with the value in the message."""
    with pytest.raises(ValueError, match="keep=0"):
        CheckpointManager(tmp_path, keep=0)


def test_flipped_bytes_in_tensor_data_are_caught_by_the_digest(tmp_path: Path) -> None:
    """32 bytes flipped inside the weights: refused by the digest, the previous file used."""
    manager = CheckpointManager(tmp_path)
    manager.save(_state(1))
    big = {**_state(2), keys.MODEL: {"w": torch.arange(4096, dtype=torch.float32)}}
    newest = manager.save(big)
    raw = bytearray(newest.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 32] = bytes(b ^ 0xFF for b in raw[middle : middle + 32])
    newest.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="digest"):
        load_checkpoint(newest)
    found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1


def test_a_fifo_named_like_a_checkpoint_is_skipped_not_read(tmp_path: Path) -> None:
    """A FIFO called ckpt-*.pt would block a read forever: it is not listed or loaded."""
    manager = _saved(tmp_path, [1])
    fifo = manager.path_for(2)
    os.mkfifo(fifo)
    assert fifo not in manager.checkpoints()
    with pytest.raises(CheckpointError, match="not a regular file"):
        load_checkpoint(fifo)
    found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1


def test_pruning_keeps_the_file_just_written_and_sets_bad_ones_aside(tmp_path: Path) -> None:
    """Three unreadable higher-numbered files: a fresh save survives and resumes next time."""
    manager = CheckpointManager(tmp_path, keep=3)
    for step in (900, 901, 902):
        manager.path_for(step).write_bytes(b"unreadable")
    written = manager.save(_state(5))
    assert written.exists()
    assert sorted(p.name for p in tmp_path.glob("*.rejected")) == [
        "ckpt-0000000900.pt.rejected",
        "ckpt-0000000901.pt.rejected",
        "ckpt-0000000902.pt.rejected",
    ]
    found = manager.load_latest()
    assert found is not None and found[1] == written


def test_non_finite_weights_are_not_resumed_from(tmp_path: Path) -> None:
    """A newest file whose weights hold a NaN is skipped, naming the weight."""
    manager = _saved(tmp_path, [1])
    bad = {**_state(2), keys.MODEL: {"layer.w": torch.tensor([1.0, float("nan")])}}
    newest = manager.save(bad)
    with pytest.raises(CheckpointError, match=r"layer\.w"):
        load_checkpoint(newest)
    found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1


def test_a_file_the_caller_cannot_use_falls_back_to_the_one_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """accept() refusing the newest file (it does not fit the model) gives the previous one."""
    manager = _saved(tmp_path, [1, 2])

    def accept(state: dict[str, Any], path: Path) -> None:
        if state[keys.STEP] == 2:
            raise CheckpointError("shape mismatch for w")

    with caplog.at_level(logging.WARNING):
        found = manager.load_latest(accept)
    assert found is not None and found[0][keys.STEP] == 1
    assert any("shape mismatch" in r.getMessage() for r in caplog.records)


def test_stale_temp_files_are_removed_and_fresh_ones_left(tmp_path: Path) -> None:
    """Temp files older than the bound go; a younger one may be a save under way."""
    manager = _saved(tmp_path, [1])
    stale, fresh = tmp_path / ".tmp-abc.pt", tmp_path / ".tmp-def.pt"
    stale.write_bytes(b"x" * 100)
    fresh.write_bytes(b"y")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert manager.remove_stale_temps() == [stale]
    assert fresh.exists() and not stale.exists()


def test_a_file_from_before_digests_loads_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No digest beside it: loaded (older versions wrote none), with a warning saying so."""
    manager = CheckpointManager(tmp_path)
    torch.save(_state(3), manager.path_for(3))
    with caplog.at_level(logging.WARNING):
        found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 3
    assert any("no digest" in r.getMessage() for r in caplog.records)


def test_a_folder_at_the_next_checkpoints_name_is_set_aside_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory called ckpt-<next step>.pt made every later save fail (IsADirectoryError):
    it is renamed *.rejected with a warning naming it, and the save goes through."""
    manager = _saved(tmp_path, [1])
    blocker = manager.path_for(2)
    blocker.mkdir()
    (blocker / "inside.txt").write_text("an operator's file")
    with caplog.at_level(logging.WARNING):
        saved = manager.save(_state(2))
    assert saved.is_file() and load_checkpoint(saved)[keys.STEP] == 2
    aside = blocker.with_name(blocker.name + ".rejected")
    assert (aside / "inside.txt").read_text() == "an operator's file"  # kept, not deleted
    assert str(blocker) in caplog.text and "a folder" in caplog.text


def test_a_fifo_and_a_link_to_a_device_are_set_aside_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither is read nor silently passed over: each is renamed *.rejected and named in
    a warning, and the newest regular checkpoint is loaded."""
    manager = _saved(tmp_path, [1])
    fifo, link = manager.path_for(2), manager.path_for(3)
    os.mkfifo(fifo)
    link.symlink_to("/dev/zero")
    with caplog.at_level(logging.WARNING):
        found = manager.load_latest()
    assert found is not None and found[0][keys.STEP] == 1
    assert not fifo.exists() and not link.is_symlink()
    assert fifo.with_name(fifo.name + ".rejected").exists()
    assert os.readlink(link.with_name(link.name + ".rejected")) == "/dev/zero"
    assert "a FIFO" in caplog.text and "a link to /dev/zero" in caplog.text


def test_a_full_disk_while_saving_a_step_again_keeps_its_valid_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest used to be replaced before the file: ENOSPC on the file then left a valid
    checkpoint that failed its new digest. Now nothing is replaced until both are written."""
    manager = _saved(tmp_path, [1, 2])
    changed = {**_state(2), keys.CONFIG: {"run": "the last save of step 2"}}
    real_fdopen = os.fdopen

    def full_disk_on_the_checkpoint(fd: int, *args: Any, **kwargs: Any) -> Any:
        handle = real_fdopen(fd, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else ""
        if name.endswith(".pt"):  # the checkpoint's temp file, not the digest's
            handle.close()
            raise OSError(28, "No space left on device")
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk_on_the_checkpoint)
    with pytest.raises(OSError, match="No space left"):
        manager.save(changed)
    monkeypatch.undo()
    assert load_checkpoint(manager.path_for(2))[keys.CONFIG] == {}  # the earlier save, valid
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_same_state_saved_twice_is_written_once(tmp_path: Path) -> None:
    """A run that saves its last step again with nothing changed leaves the file as it was
    (same inode and mtime): no second write that a full disk could interrupt."""
    manager = _saved(tmp_path, [1])
    path = manager.path_for(1)
    before = path.stat()
    time.sleep(0.01)
    assert manager.save(_state(1)) == path
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
