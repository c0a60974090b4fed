"""Batches on the run's device: the one place ``fit()`` moves a task's data.

A task yields batches wherever it keeps its data (usually the CPU); ``fit()`` resolves
the device (``auto`` is cuda on a GPU host) and moves each batch there before the step::

    batch = to_device((x, y), torch.device("cuda"))   # (x on cuda, y on cuda)

A batch is a tensor, or a (named) tuple, list or dict of them, nested to any depth;
other leaves (ints, strings, None) pass through, and an object with its own ``.to`` is
asked to move itself. A tensor already on the device is returned as it is (no copy), so
a task that keeps its data on the device pays nothing. A CPU tensor in pinned memory
is copied with ``non_blocking=True``: the copy overlaps the previous step's kernels
instead of waiting for them (pageable memory cannot be copied asynchronously).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def to_device(batch: Any, device: torch.device | str) -> Any:
    """``batch`` with every tensor in it on ``device``; see the module docstring.

    >>> to_device({"x": torch.ones(2)}, "cpu")["x"].device.type
    'cpu'
    """
    dev = torch.device(device)
    if isinstance(batch, torch.Tensor):
        return _tensor_to(batch, dev)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple keeps its type
        return type(batch)(*(to_device(item, dev) for item in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(item, dev) for item in batch)
    if isinstance(batch, Mapping):
        return {key: to_device(value, dev) for key, value in batch.items()}
    move = getattr(batch, "to", None)
    return move(dev) if callable(move) else batch


def index_to(index: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host-made index (an epoch's permutation) on ``device`` in one copy that does not
    wait for the device: pinned, then copied with ``non_blocking=True``. A task slices
    the result per batch, on the device, and no batch reads the host.

    Slicing the CPU index per batch instead and moving each slice costs a host sync a
    step: a pageable copy to the GPU waits for the step before it.

    >>> index_to(torch.arange(3), "cpu").tolist()
    [0, 1, 2]
    """
    dev = torch.device(device)
    if dev.type == "cuda" and index.device.type == "cpu":
        index = index.pin_memory()  # on the host only: no sync
    return to_device(index, dev)


def _tensor_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    if _same_device(tensor.device, device):
        # .to() of a tensor already there returns it, no copy; called anyway so that the
        # device audit (genesis_fp16.testing.device_audit) sees the move on a CPU run.
        return tensor.to(device)
    # is_pinned() is only meaningful (and cheap) for a CPU tensor bound for an accelerator.
    pinned = tensor.device.type == "cpu" and device.type != "cpu" and tensor.is_pinned()
    return tensor.to(device, non_blocking=pinned)


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


def batch_shapes(value: Any, *, bucketed: bool = False) -> str:
    """A batch's dtypes and shapes as text (tensors inside mappings, lists and tuples):
    the part of a cache key that says which step a measurement or a verdict is for.
    ``bucketed`` rounds each tensor's first (batch) dimension up to a power of two, so a
    pool grown by a few records keeps its key.

    >>> batch_shapes((torch.zeros(244, 8), torch.zeros(244, dtype=torch.long)), bucketed=True)
    '(float32[256, 8],int64[256])'
    """
    if isinstance(value, torch.Tensor):
        shape = list(value.shape)
        if bucketed and shape:
            shape[0] = 1 << max(shape[0] - 1, 0).bit_length()
        return f"{str(value.dtype).removeprefix('torch.')}{shape}"
    if isinstance(value, Mapping):
        items = sorted(value.items())
        return "{" + ",".join(f"{k}:{batch_shapes(v, bucketed=bucketed)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "(" + ",".join(batch_shapes(v, bucketed=bucketed) for v in value) + ")"
    return type(value).__name__
