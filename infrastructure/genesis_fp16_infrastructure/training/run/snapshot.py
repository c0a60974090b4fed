"""Where the precision guard keeps its last good state, and what keeping it costs.

The guard copies the trainer's state (weights, optimizer moments, scaler, RNG) and the
task's extra state at every spotless check, every ``check_interval`` steps (25 by
default), and loads it back on a demotion. A copy on the GPU costs the model and its
optimizer once more in device memory (12 bytes a parameter with fp32 AdamW: 151 MB for
the 12.6M-parameter world model) but little time; a copy on the host costs no device
memory but one device-to-host transfer per check. So :class:`SnapshotStore` decides once,
at the first snapshot of a run, and says why::

    store = SnapshotStore()
    store.save(trainer.state_dict())   # copies into buffers it keeps and reuses
    state = store.load()               # a fresh copy, safe to load into a trainer
    store.where, store.reason          # 'host', 'the state is 6.1 GiB, over 5% of ...'

- **on the device** while the state's CUDA tensors take at most :data:`DEVICE_SHARE`
  (5%) of the GPU's memory: a device-to-device copy, for the world model about 0.1 ms
  (151 MB read and written at ~3 TB/s; an estimate);
- **on the host** above that, in pinned buffers allocated at the first snapshot and
  written in place afterwards (no allocation per check): one transfer per check, about
  3-6 ms for 151 MB at 25-50 GB/s (PCIe 5; an estimate), which for a model that size
  would be some 15% of 25 captured 1 ms steps, and is a few percent of a large model's
  slower steps. The copies are queued without a host wait; :meth:`load` waits for them.
- on a CPU run the host is the device: a copy in memory, as before.

The buffers are reused: a :meth:`save` overwrites the previous snapshot in place, and
:meth:`load` returns a copy (an optimizer's ``load_state_dict`` keeps tensors already on
its device as they are, so loading the buffers themselves would alias them).
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

DEVICE_SHARE = 0.05


class SnapshotStore:
    """One snapshot of a state tree (dicts, lists, tuples of tensors and plain values)."""

    def __init__(self) -> None:
        self.where: str | None = None  # "device" or "host", decided by the first save
        self.reason = ""
        self._state: Any = None
        self._pinned = False  # CUDA state copied to the host: the copies do not wait
        self._copied: torch.cuda.Event | None = None

    def save(self, state: Mapping[str, Any]) -> None:
        """Copy ``state`` into the store (queued on the current stream; no host wait)."""
        if self.where is None:
            self.where, self.reason = placement(state)
            self._pinned = self.where == "host" and _on_cuda(state)
            # On a CPU run device and host are one memory: nothing to know (DEBUG).
            said = logger.info if _on_cuda(state) else logger.debug
            said("precision guard: snapshots on the %s (%s)", self.where, self.reason)
        self._state = _copy_into(state, self._state, self.where == "host")
        self._copied = None
        if self._pinned:  # non-blocking copies into pinned memory: record when they land
            self._copied = torch.cuda.Event()
            self._copied.record()

    @property
    def saved(self) -> Any:
        """The buffers themselves (overwritten by the next save): read, never load."""
        return self._state

    def load(self) -> Any:
        """A fresh copy of the saved state, once every queued copy has landed."""
        if self._state is None:
            raise RuntimeError("no snapshot saved")
        if self._copied is not None:
            self._copied.synchronize()
        return copy.deepcopy(self._state)


def placement(state: Any, share: float | None = None) -> tuple[str, str]:
    """``("device" | "host", why)`` for a state tree (``share``: :data:`DEVICE_SHARE`)."""
    share = DEVICE_SHARE if share is None else share
    tensors = [t for t in _tensors(state) if t.is_cuda]
    if not tensors:
        return "device", "the run's tensors are in host memory: a copy there"
    size = sum(t.numel() * t.element_size() for t in tensors)
    total = torch.cuda.get_device_properties(tensors[0].device).total_memory
    measure = f"the state is {_gib(size)}, {size / total:.1%} of the GPU's {_gib(total)}"
    if size <= share * total:
        return "device", f"{measure}: at most {share:.0%}, a device copy is the fast one"
    return "host", f"{measure}: over {share:.0%}, pinned host memory keeps the GPU's free"


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _on_cuda(state: Any) -> bool:
    return any(t.is_cuda for t in _tensors(state))


def _copy_into(value: Any, previous: Any, to_host: bool) -> Any:
    """``value`` copied into ``previous``'s tensors where they match, else into new ones."""
    if isinstance(value, torch.Tensor):
        return _copy_tensor(value.detach(), previous, to_host)
    if isinstance(value, Mapping):
        kept: dict[Any, Any] = previous if isinstance(previous, dict) else {}
        copied = {k: _copy_into(v, kept.get(k), to_host) for k, v in value.items()}
        if not isinstance(value, OrderedDict):
            return copied
        # A module's state dict: an OrderedDict whose _metadata load_state_dict reads.
        ordered: Any = OrderedDict(copied)
        if hasattr(value, "_metadata"):
            ordered._metadata = copy.deepcopy(value._metadata)
        return ordered
    if isinstance(value, list | tuple):
        old: Sequence[Any] = previous if isinstance(previous, list | tuple) else ()
        parts = [
            _copy_into(v, old[i] if i < len(old) else None, to_host) for i, v in enumerate(value)
        ]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*parts)
        return type(value)(parts)
    return copy.deepcopy(value)


def _copy_tensor(value: torch.Tensor, previous: Any, to_host: bool) -> torch.Tensor:
    device = torch.device("cpu") if to_host else value.device
    reusable = (
        isinstance(previous, torch.Tensor)
        and previous.shape == value.shape
        and previous.dtype == value.dtype
        and previous.device == device
        and previous.stride() == value.stride()
    )
    if reusable:
        target = previous
    else:
        pinned = to_host and value.is_cuda  # only pinned memory copies without a host wait
        target = torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=device, pin_memory=pinned
        )
    target.copy_(value, non_blocking=target.is_pinned())
    return target
