"""A recorded step: what a fault bundle keeps of one optimizer step, and the step run
once with its losses read back. The flight recorder records a step with these
(``recorder``) and a replay runs it again with them (``replay``); a bundle's file
(``bundle``) holds what they give and imports neither.

A step's micro-batches are kept as data ``weights_only`` loads: tensors on the CPU,
named tuples and dataclasses as tagged dicts, rebuilt only into the types a replay
declares (nothing a bundle names is imported)::

    plain = plain_batch(batch)                               # in the bundle
    batch = rebuilt_batch(plain, allowed_types([Pair]))      # in a replay
    outcome = run_recorded_step(trainer, loss, micro, samples)
    outcome["loss_bits"], outcome["skipped"]                 # what is compared
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.training.run.task import to_device
from genesis_fp16_infrastructure.training.step.trainer import Trainer

_TYPE = "__bundle_type__"


def plain_batch(value: Any) -> Any:
    """``value`` as data ``weights_only`` loads: tensors to the CPU, named tuples and
    dataclasses as tagged dicts (rebuilt by :func:`rebuilt_batch`)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = {f: plain_batch(getattr(value, f)) for f in value._fields}
        return {_TYPE: type_name(type(value)), "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: plain_batch(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_TYPE: type_name(type(value)), "fields": fields}
    if isinstance(value, Mapping):
        return {k: plain_batch(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_batch(v) for v in value)
    return value


def rebuilt_batch(value: Any, types: Mapping[str, type] | None = None) -> Any:
    """The inverse of :func:`plain_batch`. A tagged type is looked up in ``types`` (names
    to classes, :func:`allowed_types`); a name not there is refused in one line and
    nothing is imported: a bundle is data, and a name in it chooses no code."""
    if isinstance(value, Mapping) and _TYPE in value:
        name = str(value[_TYPE])
        cls = (types or {}).get(name)
        if cls is None:
            known = ", ".join(sorted(types or {})) or "none"
            raise BundleError(
                f"the bundle's batch type {name[:120]!r} is not one this agent declares "
                f"(declared: {known}); nothing was imported"
            )
        fields = {k: rebuilt_batch(v, types) for k, v in dict(value.get("fields", {})).items()}
        try:
            return cls(**fields)
        except TypeError as error:
            raise BundleError(f"the bundle's batch of {name!r} does not fit it: {error}") from None
    if isinstance(value, Mapping):
        return {k: rebuilt_batch(v, types) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(rebuilt_batch(v, types) for v in value)
    return value


def allowed_types(classes: Iterable[type]) -> dict[str, type]:
    """The batch types a replay may build, by the name :func:`plain_batch` tags them with;
    only named tuples and dataclasses (built from their fields, nothing else runs)."""
    out = {}
    for cls in classes:
        is_named = isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")
        if not (is_named or dataclasses.is_dataclass(cls)):
            raise ValueError(f"batch type {cls!r}: only named tuples and dataclasses are rebuilt")
        out[type_name(cls)] = cls
    return out


def type_name(cls: type) -> str:
    """The name a bundle gives a class (a batch's, an optimizer's): ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def run_recorded_step(
    trainer: Trainer, loss: Callable[..., torch.Tensor], micro: list[Any], samples: int
) -> dict[str, Any]:
    """One eager step of ``trainer`` with a host read after it: each micro-batch's loss
    bits (float32 as int32), whether each was finite, and whether the step was skipped."""
    losses: list[torch.Tensor] = []

    def recording(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        value = loss(model, batch)
        losses.append(value.detach().float().reshape(()).clone())
        return value

    skipped_before = float(trainer.stats.skipped_steps_tensor().item())
    trainer.step(to_device(micro, trainer.policy.device), recording, samples)
    skipped = float(trainer.stats.skipped_steps_tensor().item()) > skipped_before
    return {
        "loss_bits": [int(v.cpu().view(torch.int32).item()) for v in losses],
        "loss": [float(v.item()) for v in losses],
        "loss_finite": [bool(torch.isfinite(v).item()) for v in losses],
        "skipped": skipped,
    }
