"""CheckpointManager: atomic writes, keep-last-N, weights_only loading, fallback past bad files."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from infrastructure.training import CheckpointManager, PrecisionPolicy, ScalerConfig, Trainer
from infrastructure.training import checkpoint_keys as keys
from infrastructure.training.rng import capture_rng_state, restore_rng_state


def _state(step: int) -> dict[str, Any]:
    return {
        keys.SCHEMA: keys.SCHEMA_VERSION,
        keys.MODEL: {"w": torch.full((3,), float(step))},
        keys.OPTIMIZER: [],
        keys.SCHEDULER: [],
        keys.SCALER: {"scale": 1.0, "_growth_tracker": 0},
        keys.PRECISION: {"requested": "fp32", "used": "fp32", "reason": "test"},
        keys.STEP: step,
        keys.RNG: {},
        keys.CONFIG: {},
    }


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
    """keep=3 leaves the three newest files and nothing else in the folder."""
    manager = _saved(tmp_path, [1, 2, 3, 4, 5], keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-0000000003.pt",
        "ckpt-0000000004.pt",
        "ckpt-0000000005.pt",
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
