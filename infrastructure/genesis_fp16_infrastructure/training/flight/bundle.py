"""A fault bundle: one optimizer step that went non-finite, saved so it can be run again.

A bundle is one ``torch.save`` file of plain data and tensors (``weights_only``-safe):
the step's micro-batches (on the CPU), the trainer state before the step (model,
optimizers, schedulers, scaler, RNG: ``Trainer.state_dict()``), what the step gave
(each micro-batch's loss bits, whether its gradients were finite) and where it ran::

    path = save_bundle(folder, bundle, BundleLimits(max_count=20, max_bytes=2**30))
    bundle = load_bundle(path)      # BundleError, one line, for a damaged file
    for row in list_bundles(folder): print(row["name"], row["reason"], row["step"])

The folder is bounded: after each save the oldest bundles go until at most
``max_count`` files and ``max_bytes`` bytes remain (the newest is always kept, even
alone over the byte bound: it is the one an operator asked for).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from genesis_fp16_infrastructure.atomic import write_atomic
from genesis_fp16_infrastructure.training.flight.bundle_files import (
    BundleLimits,
    bundle_name,
    list_bundles,
    trim_folder,
)

__all__ = [
    "BundleError",
    "BundleLimits",
    "list_bundles",
    "load_bundle",
    "plain_batch",
    "rebuilt_batch",
    "save_bundle",
]

BUNDLE_VERSION = 1
# Keys every bundle holds; load_bundle refuses a file without them.
REQUIRED = (
    "version",
    "reason",
    "step",
    "precision",
    "execution",
    "device",
    "torch",
    "config",
    "state",
    "batches",
    "recorded",
)


class BundleError(ValueError):
    """A bundle that cannot be used: missing, too big, not a bundle, or damaged."""


def save_bundle(folder: Path, bundle: Mapping[str, Any], limits: BundleLimits) -> Path:
    """Write ``bundle`` into ``folder`` atomically, then trim the folder; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / bundle_name(int(bundle["step"]), str(bundle["reason"]))
    data = {"version": BUNDLE_VERSION, **bundle}
    write_atomic(path, lambda f: torch.save(data, f))
    trim_folder(folder, limits, keep=path)
    return path


def load_bundle(
    path: Path, map_location: str | torch.device = "cpu", max_bytes: int | None = None
) -> dict[str, Any]:
    """The bundle at ``path``, its tensors on ``map_location``; :class:`BundleError` (one
    line naming the file and why) for anything that is not an intact bundle."""
    limit = BundleLimits().max_file_bytes if max_bytes is None else max_bytes
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError as error:
        raise BundleError(f"{path}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise BundleError(f"{path}: not a regular file")
    if info.st_size > limit:
        raise BundleError(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # a truncated zip, a pickle of other objects, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BundleError(f"{path}: not an intact fault bundle ({first[:160]})") from None
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise BundleError(f"{path}: not a fault bundle (keys missing)")
    if data["version"] != BUNDLE_VERSION:
        raise BundleError(
            f"{path}: bundle version {data['version']!r}, this reads {BUNDLE_VERSION}"
        )
    return data


# ---------------------------------------------------------------------- batches as plain data

_TYPE = "__bundle_type__"


def plain_batch(value: Any) -> Any:
    """``value`` as data ``weights_only`` loads: tensors to the CPU, named tuples and
    dataclasses as tagged dicts (rebuilt by :func:`rebuilt_batch`)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = {f: plain_batch(getattr(value, f)) for f in value._fields}
        return {_TYPE: _type_name(value), "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain_batch(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_TYPE: _type_name(value), "fields": fields}
    if isinstance(value, Mapping):
        return {k: plain_batch(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_batch(v) for v in value)
    return value


def rebuilt_batch(value: Any) -> Any:
    """The inverse of :func:`plain_batch`. A tagged type must be a named tuple or a
    dataclass of an importable module; anything else is refused in one line."""
    if isinstance(value, Mapping) and _TYPE in value:
        cls = _resolve_type(str(value[_TYPE]))
        fields = {k: rebuilt_batch(v) for k, v in value["fields"].items()}
        return cls(**fields)
    if isinstance(value, Mapping):
        return {k: rebuilt_batch(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(rebuilt_batch(v) for v in value)
    return value


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_type(name: str) -> type:
    module_name, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise BundleError(f"the bundle's batch type {name!r} cannot be imported here") from None
    is_named = isinstance(found, type) and issubclass(found, tuple) and hasattr(found, "_fields")
    if not (is_named or dataclasses.is_dataclass(found)):
        raise BundleError(f"the bundle's batch type {name!r} is not a named tuple or dataclass")
    return found
