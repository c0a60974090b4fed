"""Precision policies: everything a training step does differently per precision.

:func:`~genesis_fp16_infrastructure.training.precision.decide.decide` picks the precision
(the one place that does); ``PrecisionPolicy`` is built from its answer and bundles
everything a step does differently per precision (autocast, the scaled backward, unscale
and overflow check, the optimizer step that skips on overflow, the scale update, FSDP2's
dtypes), so the training loop never branches on a precision or asks whether loss scaling
is on. Every precision skips a step whose gradients are not finite: where no loss is
scaled, the overflow check runs with a scale of 1. The names themselves live in
:mod:`genesis_fp16_infrastructure.precision_names`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.errors import PrecisionError
from genesis_fp16_infrastructure.precision_names import (
    DTYPE_NAMES,
    LOSS_SCALED,
    PRECISIONS,
    PrecisionName,
    RequestedName,
)
from genesis_fp16_infrastructure.training.precision.decide import (
    ResolvedPrecision,
    as_device,
    decide,
    same_device,
)
from genesis_fp16_infrastructure.training.precision.loss_scaler import (
    LOW_DTYPES,
    LossScaler,
    ScalerConfig,
    step_or_skip,
)
from genesis_fp16_infrastructure.training.precision.precision_request import (
    PrecisionRequest,
    as_request,
)

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy


logger = logging.getLogger(__name__)


def dtype_of(precision: PrecisionName) -> torch.dtype:
    """The torch dtype a precision name computes in: ``dtype_of("bf16") is torch.bfloat16``."""
    try:
        return getattr(torch, DTYPE_NAMES[precision])
    except KeyError:
        raise PrecisionError(
            f"unknown precision {precision!r}; valid precisions: {', '.join(PRECISIONS)}"
        ) from None


def autocast_to(
    dtype: torch.dtype, device_type: str, cache_enabled: bool = True
) -> contextlib.AbstractContextManager[None]:
    """``torch.autocast`` to ``dtype``; for float32 an autocast that is disabled.

    A disabled autocast also switches off any enclosing one, so fp32 really is fp32
    (an fp32 module inside a bf16 region relies on it).

    >>> with autocast_to(torch.float32, "cpu"):
    ...     pass
    """
    return torch.autocast(
        device_type,
        dtype=dtype,
        enabled=dtype != torch.float32,
        cache_enabled=cache_enabled,
    )


@dataclass(frozen=True)
class PrecisionPolicy:
    """One precision, ready to train with: its dtype and every hook a step needs.

    The trainer asks the policy, never a precision name or the scaler's state::

        policy = PrecisionPolicy.create("auto", "cpu")
        policy.check_model(model)                  # fails early on misuse
        with policy.autocast():
            loss = loss_fn(model(x).float(), y)
        policy.backward(loss)                      # scaled in fp16 only
        found_inf = policy.unscale([optimizer])    # 0-dim device flag: a grad not finite
        policy.step([optimizer], found_inf, policy.needs_host_read([optimizer]))  # or skip
        policy.update()

    ``scaler`` always exists (for its scale and state); it is enabled only for fp16.
    """

    name: PrecisionName
    resolved: ResolvedPrecision
    device: torch.device
    compute_dtype: torch.dtype
    scaler: LossScaler

    @classmethod
    def create(
        cls,
        requested: PrecisionRequest | RequestedName,
        device: torch.device | str,
        scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
        announce: bool = True,
    ) -> PrecisionPolicy:
        """The policy for a request (a plugin's ``request.precision``) or a bare precision
        name: ``decide`` it on ``device`` (by the rule: nothing is timed here, and a
        measured ``auto`` says so in its reason), then
        :meth:`from_decision`. ``announce=False`` leaves the INFO line to a caller that
        knows the better reason (a calibration candidate)."""
        resolved = decide(as_request(requested), device)
        return cls.from_decision(resolved, device, scaler, announce)

    @classmethod
    def from_decision(
        cls,
        resolved: ResolvedPrecision,
        device: torch.device | str,
        scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
        announce: bool = True,
    ) -> PrecisionPolicy:
        """The policy that runs ``resolved`` (what :func:`decide` answered) on ``device``;
        logs the decision (and any warning) once."""
        dev = as_device(device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if announce:
            logger.info("precision %s (%s)", resolved.used, resolved.reason)
        if resolved.warning:
            logger.warning("precision %s: %s", resolved.used, resolved.warning)
        if resolved.used in LOSS_SCALED and not scaler.enabled:
            logger.warning("precision fp16 with loss scaling disabled: small gradients underflow")
        config = replace(scaler, enabled=scaler.enabled and resolved.used in LOSS_SCALED)
        return cls(
            name=resolved.used,
            resolved=resolved,
            device=dev,
            compute_dtype=dtype_of(resolved.used),
            scaler=LossScaler.from_config(dev, config),
        )

    def autocast(
        self, dtype: torch.dtype | None = None, cache_enabled: bool = True
    ) -> contextlib.AbstractContextManager[None]:
        """Autocast to ``compute_dtype`` (or ``dtype``) on this policy's device.

        For float32, an autocast that is disabled (see :func:`autocast_to`).
        ``cache_enabled=False`` recasts a weight each time it is used (what a step captured
        into a CUDA graph needs); the values are the same either way.
        """
        return autocast_to(dtype or self.compute_dtype, self.device.type, cache_enabled)

    # ------------------------------------------------------------------ one step's hooks

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate ``loss``, scaled first when this precision scales losses."""
        self.scaler.scale(loss).backward()

    def unscale(
        self, optimizers: Sequence[Optimizer], found_inf: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Unscale every optimizer's gradients; return the step's overflow flag.

        The flag is a 0-dim float32 on the device, 1.0 when a gradient was inf or NaN and
        0.0 otherwise, so it can be counted as it is: reading it is free, only ``.item()``
        syncs. With loss scaling it is the scaler's own; without, the same check runs with
        a scale of 1 and writes into ``found_inf``, a zeroed flag the caller passes (one
        op fewer per step than zeroing one here; None allocates it).
        """
        if self.scaler.is_enabled():
            for optimizer in optimizers:
                self.scaler.unscale_(optimizer)
            return self.scaler.found_inf_tensor()
        if found_inf is None:
            found_inf = torch.zeros((), dtype=torch.float32, device=self.device)
        return self.scaler.check_finite(optimizers, found_inf)

    def needs_host_read(
        self, optimizers: Sequence[Optimizer], schedulers: Sequence[LRScheduler] = ()
    ) -> bool:
        """True when :meth:`step` must read the overflow flag on the host.

        In every precision: when an optimizer cannot skip on the device (not a fused
        Adam/AdamW/SGD), or a scheduler must not advance on a skipped step.
        """
        fused = all(getattr(o, "_step_supports_amp_scaling", False) for o in optimizers)
        return not fused or bool(schedulers)

    def step(
        self, optimizers: Sequence[Optimizer], found_inf: torch.Tensor, host_read: bool
    ) -> bool:
        """Step every optimizer unless a gradient was not finite; return whether it was taken.

        ``host_read`` is :meth:`needs_host_read`. Without it the decision stays on the
        device (the fused kernels skip on ``found_inf`` themselves) and True is returned:
        nothing on the host needs to know.
        """
        if host_read and bool(found_inf.item()):  # the one host read of that path
            return False
        for optimizer in optimizers:
            # Read on the host and finite: a plain step (a None flag); else on the device.
            step_or_skip(optimizer, None if host_read else found_inf)
        return True

    def update(self) -> None:
        """Advance the loss scale after a step (a no-op without loss scaling)."""
        self.scaler.update()

    def overflowed(self, found_inf: torch.Tensor) -> torch.Tensor | None:
        """The step's loss-scale overflow flag as a bool tensor, or None without loss scaling.

        None lets the caller skip the overflow window and the kept norm, each an op per
        step: without loss scaling a step with a non-finite gradient is still skipped
        (:meth:`unscale`, :meth:`step`) and counted among the skipped steps, but it does
        not move a scale, so the window of loss-scale overflows stays zero.
        """
        return found_inf > 0 if self.scaler.is_enabled() else None

    def fsdp_mixed_precision(self) -> MixedPrecisionPolicy:
        """FSDP2's policy for this precision: parameters cast to ``compute_dtype`` for the
        forward and backward (fp32 leaves them alone), gradients reduced in fp32."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        low = None if self.compute_dtype == torch.float32 else self.compute_dtype
        return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)

    def check_model(self, model: nn.Module) -> None:
        """Raise :class:`PrecisionError` unless ``model`` can train under this policy.

        Catches a model on another device and a model already cast with ``.half()`` or
        ``.bfloat16()``: AMP needs float32 parameters (the master weights).
        """
        for name, param in model.named_parameters():
            if not same_device(param.device, self.device):
                raise PrecisionError(
                    f"model parameter {name!r} is on {param.device} but the precision "
                    f"policy is for {self.device}: call model.to({str(self.device)!r}) "
                    "first, or create the policy for the model's device"
                )
            if param.dtype in LOW_DTYPES:
                raise PrecisionError(
                    f"model parameter {name!r} is {param.dtype}, but precision "
                    f"{self.name!r} needs float32 parameters: mixed precision keeps FP32 "
                    f"master weights and autocast casts to {self.compute_dtype} per "
                    "operation. Do not call model.half()/.bfloat16(); use model.float()"
                )
