"""What a kept calibration (``calibration``) holds for, and whether a run may reuse it:
its key of validators (the device, its driver and capability, torch and CUDA, the
model's parameter shapes, the batch's shapes bucketed, the candidates, the TF32 flags,
the margin and the scaler), the fields that changed when one did, the kept record read
for a request's candidates (:func:`read_kept`), and whether this release may write over
the file (:func:`ours_to_write`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.precision_names import PrecisionName

# The module too: its cpuinfo is looked up on each call (a test's one patch).
from genesis_fp16_infrastructure.training.precision import decide as decide_module
from genesis_fp16_infrastructure.training.precision import kept_measurements
from genesis_fp16_infrastructure.training.precision.choice import among
from genesis_fp16_infrastructure.training.precision.decide import MARGIN, DeviceCapabilities
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.reports import Calibration, Measured
from genesis_fp16_infrastructure.training.run.task import batch_shapes
from genesis_fp16_infrastructure.training.step.trainer import TrainerConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kept:
    """A kept measurement that may be reused: its candidates' rows only, ``winner``, the
    row they choose (what the run would train in), to be timed again first, and
    ``record``, the record as read (the object a resident process keeps)."""

    found: Calibration
    winner: Measured
    record: Calibration


def measurement_key(
    caps: DeviceCapabilities,
    device: torch.device,
    model: nn.Module,
    batch: Any,
    candidates: list[PrecisionName],
    config: TrainerConfig,
    scaler: ScalerConfig,
) -> dict[str, str]:
    """What a measurement holds for: each field a validator, named when it changes."""
    params = [(n, tuple(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
    return {
        "device": f"{device.type} ({caps.source})",
        "device_name": _device_name(device),
        "capability": _capability(device, caps),
        "torch": str(torch.__version__),  # a str subclass: not JSON to every encoder
        "cuda_runtime": str(torch.version.cuda) if device.type == "cuda" else "none",
        "driver": _driver_version() if device.type == "cuda" else "none",
        "model": hashlib.sha256(repr(params).encode()).hexdigest()[:16],
        "batch": batch_shapes(batch, bucketed=True),
        "candidates": ",".join(candidates),
        "cuda_graph": config.cuda_graph,
        "tf32": f"matmul {torch.backends.cuda.matmul.allow_tf32}, cudnn "
        f"{torch.backends.cudnn.allow_tf32}, float32 {torch.get_float32_matmul_precision()}",
        "margin": str(MARGIN),
        "scaler": json.dumps(asdict(scaler), sort_keys=True),
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return (decide_module.cpuinfo() or {}).get("model name", "cpu")


def _capability(device: torch.device, caps: DeviceCapabilities) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return f"native bf16 {caps.native_bf16}, native fp16 {caps.native_fp16}"


def _driver_version() -> str:
    """The NVIDIA kernel driver's version (Linux), or "unknown"."""
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
    words = [w for w in line.split() if w[:1].isdigit() and "." in w]
    return words[0] if words else "unknown"


def key_changes(kept: Mapping[str, str], key: Mapping[str, str]) -> str:
    """The fields of ``key`` that differ from ``kept``, each with both values, or "".

    >>> key_changes({"torch": "2.10", "model": "a"}, {"torch": "2.11", "model": "a"})
    'torch (2.10 -> 2.11)'
    """
    changed = sorted(k for k in {*key, *kept} if key.get(k) != kept.get(k))
    return ", ".join(f"{k} ({kept.get(k, 'none')} -> {key.get(k, 'none')})" for k in changed)


def read_kept(
    path: Path | None, key: Mapping[str, str], candidates: list[PrecisionName]
) -> tuple[Kept | None, str | None]:
    """The kept measurement for ``key``, if it may be reused, read for ``candidates``
    only; else None, with why a kept one was not (another release's file, a field of its
    key changed, rows that do not choose what it says, taken under load with a choice
    the noise could flip), for the new one's reason and record."""
    found = None if path is None else kept_measurements.read_calibration(path)
    if found is None:
        other = None if path is None else kept_measurements.other_release(path)
        if other is None:
            return None, None
        then = "not written over it" if other.newer else "replacing it"
        why = f"{other.describe()}: measured again, {then}"
        logger.info("precision calibration not reused: %s", why)
        return None, why
    if dict(found.key) != dict(key):
        changed = key_changes(found.key, key)
        logger.info("precision calibration cache is stale: %s changed", changed)
        return None, f"the kept measurement's key changed: {changed}: measured again"
    winner = found.reusable_winner(candidates)
    if isinstance(winner, str):  # its run used it; no later run trusts it
        why = f"{winner}: measured again"
        logger.info("precision calibration at %s not reused: %s", path, why)
        return None, why
    return Kept(replace(found, rows=among(found.rows, candidates)), winner, found), None


def ours_to_write(path: Path) -> bool:
    """Whether this release may write its measurement at ``path``: not over a newer
    release's (after a downgrade, the upgrade back reuses it); asked just before the
    write, so a newer release that wrote meanwhile is kept too."""
    other = kept_measurements.other_release(path)
    if other is not None and other.newer:
        logger.info("precision calibration not kept: %s, left as it is", other.describe())
        return False
    return True
