"""What a device computes natively: the facts :func:`~.decide.decide` decides from.

A CPU's native bf16/fp16 comes from its ``/proc/cpuinfo`` flags (or, without that file,
torch's CPUID probe); a CUDA device's from torch. Nothing here picks a precision::

    >>> detect_capabilities(torch.device("cpu")).device_type
    'cpu'
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from genesis_fp16_infrastructure.errors import PrecisionError

DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda")

CPU_FP16_SLOWDOWN = (
    "fp16 matmuls on a CPU without native fp16 (AVX512-FP16 or AMX-FP16) are 10-100x "
    "slower than fp32: measured on this project's machines, one step of a 1024-wide MLP "
    "took 1.46 s in fp16 against 0.059 s in fp32"
)


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device does natively, and how we know (``source``)."""

    device_type: str
    native_bf16: bool
    native_fp16: bool
    source: str


def _cpuinfo_flags(path: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def _torch_cpu_flags() -> set[str]:
    # Private torch API (present in 2.x): a dict of CPUID feature booleans.
    probe = getattr(getattr(torch._C, "_cpu", None), "_get_cpu_capability", None)
    if probe is None:
        return set()
    return {name for name, value in probe().items() if value is True}


@functools.lru_cache(maxsize=1)
def cpu_capabilities() -> DeviceCapabilities:
    """Native bf16/fp16 of this CPU, from /proc/cpuinfo flags or, without it, torch's CPUID."""
    flags = _cpuinfo_flags()
    source = "/proc/cpuinfo"
    if flags is None:
        flags, source = _torch_cpu_flags(), "torch CPUID probe"
    bf16 = sorted(flags & {"avx512_bf16", "amx_bf16"})
    fp16 = sorted(flags & {"avx512_fp16", "amx_fp16"})
    found = ", ".join(bf16 + fp16) or "no avx512_bf16, amx_bf16, avx512_fp16 or amx_fp16"
    return DeviceCapabilities("cpu", bool(bf16), bool(fp16), f"{source}: {found}")


def detect_capabilities(device: torch.device) -> DeviceCapabilities:
    """Native low-precision support of ``device`` (cpu or cuda)."""
    if device.type == "cpu":
        return cpu_capabilities()
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise PrecisionError(f"device {str(device)!r} requested but CUDA is not available")
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        name = torch.cuda.get_device_name(device)
        return DeviceCapabilities("cuda", bf16, True, f"CUDA device {name}")
    raise PrecisionError(
        f"unsupported device type {device.type!r}; valid device types: {', '.join(DEVICE_TYPES)}"
    )


def as_device(device: torch.device | str) -> torch.device:
    """``device`` as a :class:`torch.device`; a bad name is a :class:`PrecisionError`."""
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise PrecisionError(f"invalid device {device!r}: {exc}") from None


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether ``a`` and ``b`` are one device: a device without an index matches every
    index of its type."""
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index
