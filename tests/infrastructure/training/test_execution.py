"""resolve_execution(): eager or cuda_graph, decided once with a reason; 'on' never falls back."""

from __future__ import annotations

import re
from typing import NamedTuple

import pytest
import torch

from infrastructure.training import execution_names
from infrastructure.training.cuda_graph import flatten_tensors, signature
from infrastructure.training.execution import ExecutionError, resolve_execution

CUDA = torch.device("cuda", 0)  # resolve_execution only reads .type: no GPU needed


def _adamw(**kwargs: object) -> torch.optim.Optimizer:
    return torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), **kwargs)  # type: ignore[arg-type]


def test_off_is_eager_whatever_the_run() -> None:
    """cuda_graph=off runs eagerly and says it was asked to."""
    resolved = resolve_execution("off", CUDA, [_adamw(capturable=True)])
    assert (resolved.used, resolved.reason) == ("eager", "cuda_graph=off: eager steps requested")


@pytest.mark.parametrize(
    ("device", "optimizer", "schedulers", "sync", "world", "why"),
    [
        (torch.device("cpu"), {"capturable": True}, 0, False, 1, "need a CUDA device"),
        (CUDA, {}, 0, False, 1, "optimizer 0 (AdamW) is not capturable"),
        (CUDA, {"capturable": True}, 1, False, 1, "1 LR scheduler(s)"),
        (CUDA, {"capturable": True}, 0, True, 1, "reads the overflow flag on the host"),
        (CUDA, {"capturable": True}, 0, False, 2, "2 ranks under torchrun"),
    ],
)
def test_each_obstacle_is_named_by_auto_and_refused_by_on(
    device: torch.device,
    optimizer: dict[str, object],
    schedulers: int,
    sync: bool,
    world: int,
    why: str,
) -> None:
    """auto runs eagerly with the obstacle as its reason; on raises one line naming it."""
    opt = _adamw(**optimizer)
    scheds = [torch.optim.lr_scheduler.StepLR(opt, 1)] * schedulers
    auto = resolve_execution(
        "auto", device, [opt], scheds, host_sync_per_step=sync, world_size=world
    )
    assert auto.used == "eager" and why in auto.reason
    with pytest.raises(ExecutionError, match=re.escape(why)) as raised:
        resolve_execution("on", device, [opt], scheds, host_sync_per_step=sync, world_size=world)
    assert "\n" not in str(raised.value) and "cuda_graph=on" in str(raised.value)


def test_capturable_run_auto_stays_eager_until_verified_and_on_captures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A capturable run: 'on' captures; 'auto' captures only once the GPU tests have passed."""
    opt = _adamw(capturable=True)
    assert resolve_execution("on", CUDA, [opt]).used == "cuda_graph"
    auto = resolve_execution("auto", CUDA, [opt])
    if execution_names.CUDA_GRAPH_VERIFIED:
        assert auto.used == "cuda_graph"
    else:
        assert auto.used == "eager" and "GPU tests" in auto.reason
    monkeypatch.setattr("infrastructure.training.execution.CUDA_GRAPH_VERIFIED", True)
    assert resolve_execution("auto", CUDA, [opt]).used == "cuda_graph"


def test_unknown_request_names_the_choices() -> None:
    """A misspelt setting is one line with the valid values."""
    with pytest.raises(ExecutionError, match="valid: auto, on, off"):
        resolve_execution("yes", CUDA, [_adamw()])


class Pair(NamedTuple):
    x: torch.Tensor
    step: int


def test_batch_signature_covers_shapes_and_leaf_values_not_tensor_values() -> None:
    """Same shapes and leaves: same graph; another shape, dtype or int leaf: another graph."""
    base = signature([Pair(torch.zeros(4, 2), 1)])
    assert base is not None
    assert signature([Pair(torch.randn(4, 2), 1)]) == base
    assert signature([Pair(torch.zeros(3, 2), 1)]) != base  # an epoch's last partial batch
    assert signature([Pair(torch.zeros(4, 2, dtype=torch.float64), 1)]) != base
    assert signature([Pair(torch.zeros(4, 2), 2)]) != base  # an int is baked into a graph
    assert signature([Pair(torch.zeros(4, 2), 1), Pair(torch.zeros(4, 2), 1)]) != base
    assert signature([{"x": torch.zeros(1), "meta": ["unhashable", {}]}]) is not None
    assert signature([{"x": torch.zeros(1), "obj": bytearray(b"x")}]) is None  # never captured


def test_flatten_walks_the_same_order_for_copies() -> None:
    """The static buffers and a fresh batch flatten in the same order."""
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    assert [t.numel() for t in flatten_tensors([(a, {"k": b}), [c, 5]])] == [1, 2, 3]
