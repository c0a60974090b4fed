"""What actually ran: the dtype seen inside the forward, host syncs, peak memory, device.

These are the benchmark's honesty checks. A runner can ask for bf16 and get fp32 (a
library that quietly ignores the request, an autocast disabled behind its back); the
`DtypeProbe` looks at a real layer's output inside the timed forward, so the row reports
what ran, not what was asked.
"""

from __future__ import annotations

import os
import platform
import resource
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from genesis_fp16.bench.report import device_slug

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def set_tf32(enabled: bool) -> None:
    """Allow or forbid TF32 for CUDA matmuls and cuDNN convolutions (process-wide)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


class DtypeProbe:
    """Records the output dtype of the model's first `nn.Linear`, once, when armed.

    >>> model = nn.Sequential(nn.Linear(4, 4))
    >>> probe = DtypeProbe(model)
    >>> probe.arm()
    >>> with torch.autocast("cpu", torch.bfloat16):
    ...     _ = model(torch.randn(2, 4))
    >>> probe.ran
    'bf16'
    """

    def __init__(self, model: nn.Module) -> None:
        layer = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
        if layer is None:
            raise ValueError(f"{type(model).__name__} has no nn.Linear for the dtype probe")
        self._armed = False
        self.ran: str | None = None
        self._device_type = next(layer.parameters()).device.type
        self._handle = layer.register_forward_hook(self._record)

    def arm(self) -> None:
        """Record the next forward (call this at the start of the timed steps)."""
        self._armed = True

    def _record(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._armed:
            return
        self._armed = False
        name = _DTYPE_NAMES.get(output.dtype, str(output.dtype))
        if name == "fp32" and self._device_type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
            name = "tf32"  # its matmuls may use TF32 tensor cores now
        self.ran = name

    def remove(self) -> None:
        self._handle.remove()


# The text of the warning c10 raises for each synchronising call in sync debug mode "warn"
# (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync; the same from torch 1.10 to 2.11).
# Other warnings in the counted region are not syncs: torch 2.11 also warns, once, that
# "Synchronization debug mode is a prototype feature", which a substring match on
# "synchroniz" counted as one sync of device-only work.
SYNC_WARNING = "called a synchronizing CUDA operation"


def count_sync_warnings(messages: Iterable[str]) -> int:
    """How many of ``messages`` report a synchronising CUDA call.

    >>> count_sync_warnings(["called a synchronizing CUDA operation",
    ...                      "Synchronization debug mode is a prototype feature"])
    1
    """
    return sum(SYNC_WARNING in message for message in messages)


class SyncCounter:
    """Counts host-device synchronisations on CUDA through torch's sync debug mode.

    In "warn" mode every synchronising call (`.item()`, a device-to-host copy, `nonzero`,
    ...) raises a UserWarning with :data:`SYNC_WARNING`; those are counted, and only
    those. Outside CUDA, `count` stays None: there is no device to wait for.
    """

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self.count: int | None = None

    @contextmanager
    def counting(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        previous = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        self.count = count_sync_warnings(str(w.message) for w in caught)


def current_rss_mb() -> float:
    """Resident set size of this process now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def machine_slug(device: torch.device) -> str:
    """A benchmark result file's machine part (``device_slug``): the GPU model, or the CPU
    model from /proc/cpuinfo and the core count; the CPUs this project runs on vary (AMD
    EPYC, Intel Xeon), and a figure is only worth its machine's name.

    >>> machine_slug(torch.device("cpu")).startswith("cpu-")
    True
    """
    if device.type == "cuda":
        return device_slug("cuda", torch.cuda.get_device_name(device))
    return device_slug("cpu", device_name(device).replace("(R)", "").replace("Processor", ""))


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU model, or the CPU model and core count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"
