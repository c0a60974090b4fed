"""Whether a configured device can run on this torch, and whether a failure means it is gone.

Settings validation only checks a device's spelling (``check_device_name``): it is pure, and
tests build settings naming ``cuda`` on any host. Whether the device exists is asked here,
once, where it matters: ``config check``, ``serve`` and ``train`` at their start, and every
reload of the ``.env`` file; whether a torchrun job's ranks get a GPU each, before its
launch (:func:`check_layout`); what cuBLAS needs before the precision probe runs on
CUDA (:func:`deterministic_cublas`). A device that vanishes later (a GPU that falls off the bus, a
driver reset) shows as a failed run whose error :func:`device_lost` recognizes.

>>> device_problem("cpu") is None
True
>>> device_problem("cuda")  # on a CPU build of torch  # doctest: +SKIP
'this torch (2.13.0+cpu) was built without CUDA; use cpu or auto'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from genesis_fp16.config.settings import Settings, SettingsError, _env_name
from genesis_fp16.plugin_api import TrainRequest, TrainRequestError

# What torch raises when its device is missing or lost, not when a kernel is wrong: a
# device-side assert or an illegal address is a bug of the model, and counted as "error".
_LOST = (
    "no cuda gpus are available",
    "no cuda-capable device is detected",
    "cuda-capable device(s) is/are busy or unavailable",
    "found no nvidia driver",
    "not compiled with cuda enabled",
    "invalid device ordinal",
    "cuda error: unknown error",  # what a GPU that fell off the bus (Xid 79) reports
    "cuda error: unspecified launch failure",
    "uncorrectable ecc error",
    "cuda driver version is insufficient",
)


def device_problem(device: str, torch: Any = None) -> str | None:
    """Why ``device`` cannot run on this torch (naming the build and what it found), or None.

    ``cpu`` and ``auto`` always run (``auto`` falls back to the CPU), and need no torch.
    """
    kind, _, index_text = device.partition(":")
    if kind in ("cpu", "auto"):
        return None
    if torch is None:
        import torch
    build = f"this torch ({torch.__version__})"
    index = int(index_text) if index_text.isdigit() else 0
    if kind == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            return f"{build} was built without CUDA; use cpu or auto"
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return _count_problem(build, device, index, count, "CUDA")
    if kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        count = xpu.device_count() if xpu is not None and xpu.is_available() else 0
        return _count_problem(build, device, index, count, "XPU")
    if kind == "mps":
        if not torch.backends.mps.is_built():
            return f"{build} was built without MPS; use cpu or auto"
        if not torch.backends.mps.is_available():
            return f"{build} found no MPS device (macOS 12.3+ on Apple silicon); use cpu or auto"
    return None


def _count_problem(build: str, device: str, index: int, count: int, name: str) -> str | None:
    if count == 0:
        return f"{build} found no {name} device; use cpu or auto"
    if index >= count:
        plural = "s" if count > 1 else ""
        return f"{device} asked, {build} found {count} {name} device{plural} (0 to {count - 1})"
    return None


def check_devices(settings: Settings, torch: Any = None) -> None:
    """Raise :class:`SettingsError` with one line per configured device (the daemon's,
    then each enabled agent's own) this torch cannot run, e.g.
    ``GENESIS_FP16_DEVICE=cuda: this torch (2.13.0+cpu) was built without CUDA``.
    """
    named = [(_env_name(("device",)), settings.device)]
    for agent, spec in sorted(settings.agents.items()):
        if spec.device is not None and spec.enabled:
            named.append((_env_name(("agents", agent, "device")), spec.device))
    errors = []
    for variable, device in named:
        problem = device_problem(device, torch)
        if problem is not None:
            errors.append(f"{variable}={device}: {problem}")
    if errors:
        raise SettingsError(errors)


def device_lost(exc: BaseException) -> str | None:
    """The first line of ``exc`` (or of what caused it) when it says the device is missing
    or gone; None for any other error."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain, not a cycle
        if seen is None:
            return None
        text = str(seen)
        if any(phrase in text.lower() for phrase in _LOST):
            return text.strip().splitlines()[0] if text.strip() else type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return None


class LayoutError(TrainRequestError):
    """A torchrun layout this host cannot run; refused before launch, in one line."""


def cuda_device_count() -> int:
    """GPUs this process can see (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def deterministic_cublas(device: str) -> None:
    """Before the precision probe runs on ``device``, for ``genesis-fp16 probe`` and the
    daemon's probe gate alike: on CUDA, ``CUBLAS_WORKSPACE_CONFIG`` as cuBLAS needs it to
    be deterministic (the probe runs under deterministic algorithms, where torch refuses a
    cuBLAS call without it); a value already set is kept."""
    if device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def check_layout(
    request: TrainRequest, nproc: int, gpu_count: Callable[[], int] = cuda_device_count
) -> None:
    """Refuse, before launch, ``nproc`` ranks that this host cannot give a GPU each.

    Under NCCL every rank needs a GPU of its own (two ranks on one GPU make NCCL fail
    at its first collective, and torchrun exits without a result). A ``cuda:N`` device
    would put every rank on GPU N. CPU ranks (gloo) can share the host: not checked.
    """
    device = request.device
    if nproc <= 1 or not device.startswith("cuda"):
        return
    setting = f"{_env_name(('agents', request.agent, 'nproc'))}={nproc}"
    if device != "cuda":
        raise LayoutError(
            f"{setting} with device {device!r}: every rank would use that one GPU; set the "
            "device to cuda (one GPU per rank) or cpu (gloo)"
        )
    gpus = gpu_count()
    if nproc > gpus:
        raise LayoutError(
            f"{setting} on cuda needs {nproc} GPUs, one per rank (NCCL), and this host has "
            f"{gpus}; set NPROC to at most {gpus}, or the agent's DEVICE to cpu (gloo ranks)"
        )
