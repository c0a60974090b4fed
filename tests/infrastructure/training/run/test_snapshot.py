"""The guard's snapshot store: buffers written in place, loads that are copies, placement."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import (
    GuardConfig,
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
    TrainerConfig,
)
from genesis_fp16_infrastructure.training import checkpoint_keys as keys
from genesis_fp16_infrastructure.training.run.guard import (
    PrecisionGuard,
    SnapshotStore,
    placement,
)
from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _state(value: float, device: str = "cpu") -> dict[str, Any]:
    """A tree shaped like a trainer's state: fp16, bf16 and fp32 tensors, plain values."""
    return {
        "model": {
            "w": torch.full((4, 3), value, dtype=torch.float16, device=device),
            "b": torch.arange(3, dtype=torch.bfloat16, device=device) * value,
        },
        "optimizer": [
            {
                "state": {0: {"exp_avg": torch.full((4,), value, device=device)}},
                "param_groups": [{"betas": (0.9, 0.999), "params": [0]}],
            }
        ],
        "step": int(value),
        "rng": torch.tensor([1, 2, 3], dtype=torch.uint8),
    }


def _assert_equal(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y)
    else:
        assert a == b


def test_a_second_save_lands_in_the_first_ones_buffers_with_its_own_values() -> None:
    """No allocation per check: the next snapshot writes the same tensors, and holds the
    values it was given, not the live ones that move on afterwards."""
    store = SnapshotStore()
    store.save(_state(1.0))
    buffers = [t.data_ptr() for t in flatten_tensors(store.saved)]
    live = _state(2.5)
    store.save(live)
    assert [t.data_ptr() for t in flatten_tensors(store.saved)] == buffers
    live["model"]["w"].add_(1.0)  # training goes on in place
    live["optimizer"][0]["state"][0]["exp_avg"].mul_(3.0)
    _assert_equal(store.load(), _state(2.5))


def test_load_is_a_copy_that_the_next_save_leaves_alone() -> None:
    """What restore hands a trainer shares no memory with the buffers the next save writes."""
    store = SnapshotStore()
    store.save(_state(2.0))
    loaded = store.load()
    buffers = {t.data_ptr() for t in flatten_tensors(store.saved)}
    assert not buffers & {t.data_ptr() for t in flatten_tensors(loaded)}
    store.save(_state(3.0))
    _assert_equal(loaded, _state(2.0))
    with pytest.raises(RuntimeError, match="no snapshot saved"):
        SnapshotStore().load()


def test_a_cpu_run_keeps_its_snapshot_in_memory_and_says_so() -> None:
    """On the CPU the host is the device: placement says so, whatever the share."""
    assert placement(_state(1.0)) == (
        "device",
        "the run's tensors are in host memory: a copy there",
    )
    assert placement(_state(1.0), share=0.0)[0] == "device"


def test_a_cpu_snapshots_placement_is_debug_not_info(caplog: pytest.LogCaptureFixture) -> None:
    """Where a CPU run keeps its snapshot is nothing an operator can act on: DEBUG, so the
    default INFO log leaves it out (a CUDA run's placement stays INFO, tested below)."""
    with caplog.at_level("DEBUG", logger="genesis_fp16_infrastructure.training.run.guard"):
        SnapshotStore().save(_state(1.0))
    (record,) = [r for r in caplog.records if "snapshots on the device" in r.getMessage()]
    assert record.levelname == "DEBUG"


def test_the_guard_restores_the_last_spotless_check_from_reused_buffers() -> None:
    """A real fp16 run: every spotless check writes the same buffers, and restore() gives
    the trainer state of the last check bit for bit, after the live state moved on."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=256.0))
    trainer = Trainer(
        model, [torch.optim.AdamW(model.parameters(), lr=1e-2)], policy, TrainerConfig()
    )
    guard = PrecisionGuard(GuardConfig(check_interval=4, bf16_needs_native=False))
    loss_fn = guard.watch_loss(lambda m, b: F.mse_loss(m(b[0]).float(), b[1]))
    guard.start(trainer, epoch=0, batch=0)
    g = torch.Generator().manual_seed(1)
    buffers: list[list[int]] = []
    for step in range(1, 11):
        x = torch.randn(32, 8, generator=g)
        trainer.step([(x, x.sum(dim=1, keepdim=True))], loss_fn, 32)
        assert not guard.after_step(trainer, epoch=0, batch=step)
        if step == 8:  # the last spotless check of the run
            live = trainer.state_dict()  # aliases the parameters: copied
            expected = copy.deepcopy(
                {k: live[k] for k in (keys.MODEL, keys.OPTIMIZER, keys.SCALER)}
            )
        if step % 4 == 0:
            buffers.append([t.data_ptr() for t in flatten_tensors(guard.store.saved)])
    assert buffers[0] == buffers[1]  # step 4's and step 8's snapshots: the same memory
    restored = guard.restore()
    assert restored.step == 8
    _assert_equal({k: restored.trainer[k] for k in expected}, expected)
    trainer.load_state_dict(restored.trainer)
    assert trainer.step_count == 8
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[keys.MODEL][name]), name


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("share", "where"), [(None, "device"), (0.0, "host")])
def test_a_cuda_state_stays_on_the_gpu_while_small_and_goes_to_pinned_host_memory_above(
    share: float | None, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule on a GPU: a small state is copied on the device; above the share it is
    copied into pinned host buffers (non-blocking), reused by the next save, loaded intact."""
    from genesis_fp16_infrastructure.training.run import guard as run_guard

    if share is not None:
        monkeypatch.setattr(run_guard, "DEVICE_SHARE", share)
    store = SnapshotStore()
    store.save(_state(1.0, "cuda"))
    assert store.where == where and "of the GPU's" in store.reason
    saved = store.saved["model"]["w"]
    assert saved.is_cuda == (where == "device")
    assert saved.is_pinned() == (where == "host")
    live = _state(2.0, "cuda")
    store.save(live)
    assert store.saved["model"]["w"].data_ptr() == saved.data_ptr()
    live["model"]["w"].add_(1.0)
    _assert_equal(store.load(), _state(2.0))


@pytest.mark.gpu
@needs_cuda
def test_a_guard_rollback_from_pinned_host_memory_equals_one_from_the_gpu(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """fp16 overflows on CUDA demote to bf16 with a rollback: the run whose snapshots go to
    pinned host memory ends bit for bit where the run that keeps them on the GPU ends."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "step"))
    from test_cuda_graph import _GuardTask

    from genesis_fp16_infrastructure.training import FitOptions, fit
    from genesis_fp16_infrastructure.training.run import guard as run_guard

    guard = GuardConfig(check_interval=4, overflow_window=4, overflow_warmup=0)
    results = {}
    for share in (run_guard.DEVICE_SHARE, 0.0):
        monkeypatch.setattr(run_guard, "DEVICE_SHARE", share)
        options = FitOptions(
            precision="fp16",
            device="cuda",
            steps=32,
            cuda_graph="off",
            guard=guard,
            checkpoint_dir=tmp_path / str(share),
        )
        with caplog.at_level("INFO", logger="genesis_fp16_infrastructure.training.run.guard"):
            results[share] = fit(_GuardTask(), options)
    assert "snapshots on the device" in caplog.text and "snapshots on the host" in caplog.text
    device, host = results.values()
    assert [d.rollback_step for d in host.demotions] == [d.rollback_step for d in device.demotions]
    assert host.demotions and host.summary.train_loss == device.summary.train_loss
    a = torch.load(host.checkpoint, weights_only=True)["model"]
    b = torch.load(device.checkpoint, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in b)
