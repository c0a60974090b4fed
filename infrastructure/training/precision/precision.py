"""Precision policies: the one place that knows which dtype a training run computes in.

``resolve_precision`` turns a requested name (``fp32``, ``bf16``, ``fp16`` or ``auto``)
into what will run on a device, with the reason; ``PrecisionPolicy`` bundles that answer
with everything a step does differently per precision (autocast, the scaled backward,
unscale and overflow check, the optimizer step that skips on overflow, the scale update,
FSDP2's dtypes), so the training loop never branches on a precision or asks whether
loss scaling is on. Every precision skips a step whose gradients are not finite: where
no loss is scaled, the overflow check runs with a scale of 1. The names themselves live in
:mod:`genesis_fp16_infrastructure.training.precision.precision_names`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.training.precision.loss_scaler import LossScaler, ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision_names import (
    DTYPE_NAMES,
    LOSS_SCALED,
    REQUESTABLE,
)
from genesis_fp16_infrastructure.training.precision.precision_names import PRECISIONS as PRECISIONS

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

logger = logging.getLogger(__name__)

DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda")


def dtype_of(precision: str) -> torch.dtype:
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
    (rlhf_ppo's fp32 critic inside a bf16 region relies on it).

    >>> with autocast_to(torch.float32, "cpu"):
    ...     pass
    """
    return torch.autocast(
        device_type,
        dtype=dtype,
        enabled=dtype != torch.float32,
        cache_enabled=cache_enabled,
    )


CPU_FP16_SLOWDOWN = (
    "fp16 matmuls on a CPU without native fp16 (AVX512-FP16 or AMX-FP16) are 10-100x "
    "slower than fp32: measured on this project's machines, one step of a 1024-wide MLP "
    "took 1.46 s in fp16 against 0.059 s in fp32"
)


class PrecisionError(ValueError):
    """A precision request or a model that cannot run as asked; the message says why."""


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device does natively, and how we know (``source``)."""

    device_type: str
    native_bf16: bool
    native_fp16: bool
    source: str


@dataclass(frozen=True)
class ResolvedPrecision:
    """The answer to a precision request: ``used`` is what runs, ``reason`` says why.

    ``warning`` is set when the request runs as asked but badly (fp16 on a CPU
    without native fp16); it is None otherwise.
    """

    requested: str
    used: str
    device_type: str
    reason: str
    warning: str | None = None


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


def _as_device(device: torch.device | str) -> torch.device:
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise PrecisionError(f"invalid device {device!r}: {exc}") from None


def resolve_precision(requested: str, device: torch.device | str) -> ResolvedPrecision:
    """Decide what runs for ``requested`` on ``device``, once, with the reason.

    >>> resolve_precision("fp32", "cpu").used
    'fp32'

    ``auto``: CUDA -> fp16; a CPU with native bf16 (AVX512-BF16 or AMX) -> bf16;
    otherwise fp32. An explicit name runs as asked, or fails here with a clear error
    (bf16 on a CUDA device without bf16); it never falls back silently.
    """
    if requested not in REQUESTABLE:
        raise PrecisionError(
            f"unknown precision {requested!r}; valid precisions: {', '.join(REQUESTABLE)}"
        )
    dev = _as_device(device)
    caps = detect_capabilities(dev)
    if requested == "auto":
        return _resolve_auto(caps)
    return _resolve_explicit(requested, caps)


def _resolve_auto(caps: DeviceCapabilities) -> ResolvedPrecision:
    if caps.device_type == "cuda":
        used, why = "fp16", "CUDA device: fp16 autocast with dynamic loss scaling"
    elif caps.native_bf16:
        used, why = "bf16", f"CPU with native bf16 ({caps.source})"
    else:
        used, why = "fp32", f"CPU without native bf16 ({caps.source}); fp16 would be slow"
    return ResolvedPrecision("auto", used, caps.device_type, f"auto -> {used}: {why}")


def _resolve_explicit(requested: str, caps: DeviceCapabilities) -> ResolvedPrecision:
    reason = f"{requested} requested explicitly on {caps.device_type} ({caps.source})"
    warning = None
    if requested == "bf16" and not caps.native_bf16:
        if caps.device_type == "cuda":
            raise PrecisionError(
                f"precision 'bf16' is not supported by {caps.source} (needs compute "
                "capability 8.0 or newer); valid precisions here: fp32, fp16, auto"
            )
        warning = (
            f"bf16 on a CPU without native bf16 ({caps.source}): it runs, but bf16 "
            "matmuls are emulated and may be slower than fp32"
        )
    if requested == "fp16" and caps.device_type == "cpu" and not caps.native_fp16:
        alternative = "bf16 (native here)" if caps.native_bf16 else "fp32"
        warning = f"{CPU_FP16_SLOWDOWN} ({caps.source}); consider {alternative}"
    return ResolvedPrecision(requested, requested, caps.device_type, reason, warning)


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

    name: str
    resolved: ResolvedPrecision
    device: torch.device
    compute_dtype: torch.dtype
    scaler: LossScaler

    @classmethod
    def create(
        cls,
        requested: str,
        device: torch.device | str,
        scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
        announce: bool = True,
    ) -> PrecisionPolicy:
        """Resolve ``requested`` on ``device`` and log the result (and any warning) once;
        ``announce=False`` leaves the INFO line to a caller that knows the better reason
        (a measured ``auto``, a calibration candidate)."""
        resolved = resolve_precision(requested, device)
        dev = _as_device(device)
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
        if not host_read:
            for optimizer in optimizers:
                _fused_step(optimizer, found_inf)
            return True
        if bool(found_inf.item()):  # the one host read of that path
            return False
        for optimizer in optimizers:
            optimizer.step()
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
            if not _same_device(param.device, self.device):
                raise PrecisionError(
                    f"model parameter {name!r} is on {param.device} but the precision "
                    f"policy is for {self.device}: call model.to({str(self.device)!r}) "
                    "first, or create the policy for the model's device"
                )
            if param.dtype in (torch.float16, torch.bfloat16):
                raise PrecisionError(
                    f"model parameter {name!r} is {param.dtype}, but precision "
                    f"{self.name!r} needs float32 parameters: mixed precision keeps FP32 "
                    f"master weights and autocast casts to {self.compute_dtype} per "
                    "operation. Do not call model.half()/.bfloat16(); use model.float()"
                )


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    return a.index is None or b.index is None or a.index == b.index


def _fused_step(optimizer: Optimizer, found_inf: torch.Tensor) -> None:
    # torch's fused Adam/AdamW/SGD read these two attributes and skip on the device when
    # found_inf > 0; grad_scale is None because the gradients are already unscaled.
    optimizer.grad_scale = None  # type: ignore[attr-defined]
    optimizer.found_inf = found_inf  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.grad_scale  # type: ignore[attr-defined]
        del optimizer.found_inf  # type: ignore[attr-defined]
