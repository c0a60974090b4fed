"""Which GPUs a run occupies, and a counting slot per device that every agent's jobs share.

Two agents' runs on one GPU at once cost more than they save. Each child process makes a
CUDA context of its own (some hundreds of MB of the GPU's memory before any tensor), the
GPU time-slices between contexts rather than running them side by side, and one run's
memory peak can make the other fail out of memory. On the H100
(benchmarks/results/h100-2026-11-23.md) test runs that each took seconds alone took over
200 s with 5-15 processes on one GPU. So
a run waits for its devices' slots (``GENESIS_FP16_DEVICE_CONCURRENCY``, 1 by default);
an operator who knows two small agents fit side by side raises it.

The slot is the GPU, not the setting's spelling: ``cuda`` is ``cuda:0`` (the current
device of every process started with the daemon's ``CUDA_VISIBLE_DEVICES``), and a
torchrun job of N ranks on ``cuda`` holds ``cuda:0`` to ``cuda:N-1``, one per rank.

>>> slot_keys("cuda", nproc=2)
('cuda:0', 'cuda:1')
>>> slot_keys("cuda:0") == slot_keys("cuda")
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

# Device kinds with numbered devices; "cpu" and "mps" are one device each.
_INDEXED = ("cuda", "xpu")


def slot_keys(device: str, nproc: int = 1) -> tuple[str, ...]:
    """The devices a run on ``device`` with ``nproc`` processes occupies, sorted."""
    kind, _, index = device.partition(":")
    if kind not in _INDEXED:
        return (kind,)
    if index:  # cuda:N: every rank on GPU N (torchrun refuses NPROC > 1 there)
        return (f"{kind}:{int(index)}",)
    return tuple(f"{kind}:{rank}" for rank in range(max(nproc, 1)))


class DeviceSlots:
    """A counting semaphore per device, shared by every agent's jobs.

    A run that needs several devices takes them in sorted order, so two such runs cannot
    each hold one the other waits for.
    """

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def acquire(self, devices: Iterable[str], give_up: Callable[[], bool]) -> bool:
        """Wait for a slot on each of ``devices``; False (holding none) when ``give_up()``
        turns true first."""
        held: list[str] = []
        for device in sorted(set(devices)):
            with self._lock:
                slot = self._slots.setdefault(device, threading.BoundedSemaphore(self._concurrency))
            while not slot.acquire(timeout=0.2):
                if give_up():
                    self.release(held)
                    return False
            held.append(device)
        return True

    def release(self, devices: Iterable[str]) -> None:
        for device in sorted(set(devices)):
            self._slots[device].release()
