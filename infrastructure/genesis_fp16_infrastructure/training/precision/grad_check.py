"""Gradients that are not finite: finding them on the device, and skipping their step.

The loss scaler's overflow check (:meth:`LossScaler.unscale_`; :func:`check_finite` for
the precisions that scale no loss) and the project's one skip (:func:`step_or_skip`,
used by the scaler and by ``PrecisionPolicy.step``). Every function here stays on the
device except where ``step_or_skip`` says it reads the flag::

    found_inf = check_finite([optimizer], torch.zeros(()), torch.ones(()), None)  # 1.0: inf/NaN
    step_or_skip(optimizer, found_inf)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from genesis_fp16_infrastructure.training.precision.precision_names import (
    DTYPE_NAMES,
    LOW_PRECISIONS,
)

GradGroups = dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]

LOW_DTYPES: tuple[torch.dtype, ...] = tuple(getattr(torch, DTYPE_NAMES[n]) for n in LOW_PRECISIONS)
"""The 16-bit dtypes (``LOW_PRECISIONS``): a parameter or gradient in one was cast by
the agent, where AMP needs float32 master weights."""


def grads_by_device(optimizers: Iterable[torch.optim.Optimizer]) -> GradGroups:
    """The gradients of every optimizer, grouped by device and dtype (one op per group).

    A sparse gradient is coalesced in place first (its duplicate indices would be summed
    later: the summed values are what must be finite).
    """
    groups: GradGroups = {}
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.dtype in LOW_DTYPES:
                    raise ValueError(
                        f"a gradient is {grad.dtype}: the loss scaler needs float32 "
                        "parameters. AMP keeps FP32 master weights and autocast casts to "
                        "fp16 per operation, so do not call model.half()/.bfloat16()"
                    )
                if grad.is_sparse:
                    param.grad = grad.coalesce()
                    grad = param.grad._values()
                groups.setdefault((grad.device, grad.dtype), []).append(grad)
    return groups


def check_finite(
    optimizers: Sequence[torch.optim.Optimizer],
    found_inf: torch.Tensor,
    inv_scale: torch.Tensor,
    process_group: Any,
) -> torch.Tensor:
    """Set ``found_inf`` to 1.0 when a gradient of any optimizer is inf or NaN; return it,
    made the same on every rank of ``process_group`` (None: the default group).

    The overflow check of :meth:`LossScaler.unscale_`, which multiplies the gradients by
    ``inv_scale`` (a 0-dim tensor on ``found_inf``'s device). With a 1.0 the caller made
    once it only checks, for the precisions that scale no loss (fp32, bf16): a non-finite
    gradient there is as fatal to the weights and the Adam state as an fp16 overflow.
    ``found_inf`` is a zeroed 0-dim float32, which the caller owns (the trainer zeroes it
    for free). One op per device and dtype, no host sync; checked only, the gradients keep
    every bit (x * 1 == x). Gradients on other devices than ``found_inf``'s are checked
    into flags of their own, combined into it afterwards. ::

        flag = check_finite([optimizer], torch.zeros(()), torch.ones(()), None)
    """
    home = found_inf.device
    found: dict[torch.device, torch.Tensor] = {}
    with torch.no_grad():
        # Every optimizer's gradients of one device and dtype in one op, not one each.
        for (device, _), grads in grads_by_device(optimizers).items():
            if device not in found:
                found[device] = (
                    found_inf
                    if device == home
                    else torch.zeros((), dtype=torch.float32, device=device)
                )
            torch._amp_foreach_non_finite_check_and_unscale_(
                grads, found[device], inv_scale.to(device, non_blocking=True)
            )
        # Gradients on other devices: combine with max, so the flag stays 0.0 or 1.0.
        for device, flag in found.items():
            if device != home:
                torch.maximum(found_inf, flag.to(home, non_blocking=True), out=found_inf)
    # One collective per optimizer per step, queued on the device: every rank then
    # skips (or not) together and their scales stay identical.
    distributed = dist.is_available() and dist.is_initialized()
    if distributed and dist.get_world_size(process_group) > 1:
        dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=process_group)
    return found_inf


def combine_flags(flags: list[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """Several optimizers' overflow flags as one (into ``out`` when given)."""
    # One optimizer (the common case) needs no stack and max: two launches saved per call.
    # max, not sum: the flag stays 0.0 or 1.0, which LossScaler._calm's arithmetic relies on.
    if len(flags) == 1:
        return flags[0]
    stacked = torch.stack(flags)
    return stacked.amax() if out is None else torch.amax(stacked, dim=0, out=out)


def step_or_skip(
    optimizer: torch.optim.Optimizer,
    found_inf: torch.Tensor | None,
    grad_scale: torch.Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """The project's one skip: step ``optimizer`` unless ``found_inf`` (a 0-dim device
    flag, 1.0 when a gradient was not finite) is set. Used by :meth:`LossScaler.step`
    and ``PrecisionPolicy.step``.

    ``found_inf=None``: the caller has read the flag on the host and it was clear, so a
    plain step. A fused optimizer (torch's ``fused=True`` Adam, AdamW, SGD) is handed the
    flag and ``grad_scale`` (None: gradients already unscaled) and skips on the device,
    with no host sync; any other optimizer costs one host read of the flag.
    """
    if found_inf is None:
        return optimizer.step(*args, **kwargs)
    if getattr(optimizer, "_step_supports_amp_scaling", False):
        # torch's fused kernels read these two attributes and skip when found_inf > 0.
        optimizer.grad_scale = grad_scale  # type: ignore[attr-defined]
        optimizer.found_inf = found_inf  # type: ignore[attr-defined]
        try:
            return optimizer.step(*args, **kwargs)
        finally:
            del optimizer.grad_scale  # type: ignore[attr-defined]
            del optimizer.found_inf  # type: ignore[attr-defined]
    if bool(found_inf.item()):  # the host read
        return None
    return optimizer.step(*args, **kwargs)
