"""to_device(): every tensor of a nested batch on the run's device, other leaves untouched."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import pytest
import torch

from genesis_fp16_infrastructure.training import FitOptions, fit, to_device


class Pair(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


def test_nested_tensors_move_and_other_leaves_pass_through() -> None:
    """Tensors in (named) tuples, lists and dicts reach the device; ints, str and None stay."""
    batch = (3, Pair(torch.ones(2), torch.zeros(2)), [torch.arange(3), "tag"], {"m": None})
    moved = to_device(batch, "meta")  # a second device that exists on any host
    assert moved[0] == 3 and moved[2][1] == "tag" and moved[3] == {"m": None}
    assert isinstance(moved[1], Pair)
    assert moved[1].x.device.type == "meta" and moved[1].y.device.type == "meta"
    assert isinstance(moved[2], list) and moved[2][0].device.type == "meta"


def test_a_tensor_already_on_the_device_is_not_copied() -> None:
    """Same device: the very same tensor object comes back (no copy, no kernel)."""
    x = torch.randn(4)
    assert to_device(x, "cpu") is x
    assert to_device([x], torch.device("cpu"))[0] is x


class _Recorder:
    """A batch that moves itself through its own ``.to`` and remembers where to."""

    def __init__(self, value: torch.Tensor, moved_to: torch.device | None = None) -> None:
        self.value, self.moved_to = value, moved_to

    def to(self, device: torch.device) -> _Recorder:
        return _Recorder(self.value.to(device), device)


class _RecordingTask:
    def __init__(self) -> None:
        self.devices: list[Any] = []

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(2, 1)

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(model.parameters(), lr=0.1)]

    def build_schedulers(self, optimizers: object) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> list[tuple[_Recorder, int]]:
        return [(_Recorder(torch.ones(4, 2)), 4) for _ in range(3)]

    def loss(self, model: torch.nn.Module, batch: _Recorder) -> torch.Tensor:
        self.devices.append(batch.moved_to)
        return model(batch.value).float().pow(2).mean()

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {"loss": 0.0}

    def extra_state(self) -> dict[str, object]:
        return {}


def test_fit_moves_every_training_batch_to_the_runs_device() -> None:
    """Each batch reaches loss() after to_device(batch, policy.device), never as yielded."""
    task = _RecordingTask()
    result = fit(task, FitOptions(precision="fp32", device="cpu", steps=3))
    assert result.steps_run == 3
    assert task.devices == [torch.device("cpu")] * 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("pinned", [False, True])
def test_cpu_batches_train_on_cuda(pinned: bool) -> None:
    """A task that keeps its data on the CPU (pinned or not) trains on cuda through fit()."""

    class CpuTask(_RecordingTask):
        def train_batches(self, epoch: int, seed: int) -> list[tuple[Any, int]]:
            x = torch.randn(4, 8, 2, generator=torch.Generator().manual_seed(epoch))
            x = x.pin_memory() if pinned else x
            return [((x[i], x[i][:, :1]), 8) for i in range(4)]

        def loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
            self.devices.append(batch[0].device.type)
            return torch.nn.functional.mse_loss(model(batch[0]).float(), batch[1])

    task = CpuTask()
    result = fit(task, FitOptions(precision="bf16", device="cuda", steps=6))
    assert result.steps_run == 6 and task.devices == ["cuda"] * 6
    assert math.isfinite(result.summary.train_loss)
