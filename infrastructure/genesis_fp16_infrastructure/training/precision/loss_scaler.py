"""Dynamic loss scaling for fp16 training, without a host-device sync per step.

:class:`LossScaler` has the methods of ``torch.amp.GradScaler`` (``scale``, ``unscale_``,
``step``, ``update``, ``get_scale``, ``is_enabled``, ``state_dict``, ``load_state_dict``)
and adds a floor and a ceiling for the scale, hysteresis (DeepSpeed's with
``consecutive_hysteresis=True``, not its default: see the class docstring), an ``unstable``
flag for a run that keeps overflowing at the floor, and device-side overflow counters.

All of its state lives in tensors on the scaler's device, and the per-step methods never
read them back to the host, with one documented exception: ``step()`` of an optimizer
that cannot skip on its own (anything but ``fused=True`` Adam/AdamW/SGD) needs one host
read to decide whether to call ``optimizer.step()`` at all, exactly as ``GradScaler`` does.

What a step costs (one optimizer, on one device), in aten ops, each a kernel launch on
CUDA: ``unscale_`` two (one reciprocal that also zeroes the overflow flag, and torch's
fused check-and-unscale), where ``GradScaler``'s takes seven; ``update`` five (torch's
fused scale update, the clamp to floor and ceiling, one op to tell an overflow at the
floor, torch's fused update again to count those and raise ``unstable``, and the overflow
count), where ``GradScaler``'s takes one. No host read either way, so a CUDA graph can
capture it.

Gradients that are not finite are found here for every precision, on the device: the
scaler's overflow check (:meth:`LossScaler.unscale_`; :func:`check_finite` for the
precisions that scale no loss) and the project's one skip (:func:`step_or_skip`, used by
the scaler and by ``PrecisionPolicy.step``). Both stay on the device except where
``step_or_skip`` says it reads the flag::

    found_inf = check_finite([optimizer], torch.zeros(()), torch.ones(()), None)  # 1.0: inf/NaN
    step_or_skip(optimizer, found_inf)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from genesis_fp16_infrastructure.precision_names import DTYPE_NAMES, LOW_PRECISIONS
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import (
    ScalerConfig,
    config_from_state,
)

T = TypeVar("T")

# Stages of one optimizer within one step (between two update() calls).
_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"

STATE_VERSION = 1


class LossScaler:
    """A ``torch.amp.GradScaler`` with a floor, a ceiling, hysteresis and an unstable flag.

    Use it exactly like ``GradScaler``::

        scaler = LossScaler("cpu")                 # or PrecisionPolicy.create(...).scaler
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)                 # optional: clip unscaled grads here
        scaler.step(optimizer)                     # skipped if any grad is inf/nan
        scaler.update()                            # back off or grow the scale

    How the scale moves, per ``update()``:

    - a step whose gradients hold inf/nan is always skipped. It backs the scale off
      (``scale * backoff_factor``, never below ``min_scale``) unless hysteresis tolerates
      it. With ``hysteresis=h`` the first ``h - 1`` overflows in a row only spend the
      budget; the budget refills to ``h`` after every step without overflow, so a run of
      overflows backs off on its ``h``-th and every later step. Any overflow, tolerated
      or not, restarts the growth interval. This is DeepSpeed's ``DynamicLossScaler``
      with ``consecutive_hysteresis=True``; DeepSpeed's default (``False``) refills the
      budget only when the scale grows, so there overflows spread over a growth
      interval add up and back off sooner than here.
    - after ``growth_interval`` steps in a row without overflow the scale grows
      (``scale * growth_factor``, never above ``max_scale``, and never to inf).
    - with ``min_scale=0.0, max_scale=float("inf"), hysteresis=1`` the trajectory equals
      ``GradScaler``'s step for step.

    ``unstable`` turns true (and stays true) once ``unstable_after`` consecutive steps
    overflowed while the scale was already at ``min_scale``: the precision cannot train
    this model, and skipping steps forever in silence would hide that.

    A disabled scaler (fp32, bf16) passes everything through, reports a scale of 1.0
    and still has a full ``state_dict()`` so that checkpoints always carry one.
    """

    def __init__(
        self, device: torch.device | str, process_group: Any = None, **settings: Any
    ) -> None:
        # The settings it runs with (restored by load_state_dict): ``settings`` are
        # ScalerConfig's fields, its defaults for those not given.
        self.config = ScalerConfig(**settings)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            # The gradients say cuda:N: a bare "cuda" would never match them, and each
            # step would pay for a second flag and the ops that combine the two.
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._process_group = process_group
        self._init_state(self.config.init_scale)

    @classmethod
    def from_config(cls, device: torch.device | str, config: ScalerConfig) -> LossScaler:
        """Build a scaler from a :class:`ScalerConfig`: ``LossScaler.from_config("cpu", c)``."""
        return cls(device, **asdict(config))

    def _init_state(self, scale: float) -> None:
        def full(value: float | int, dtype: torch.dtype) -> torch.Tensor:
            return torch.full((), value, dtype=dtype, device=self.device)

        self._per_optimizer: dict[int, dict[str, Any]] = {}  # this step's, by id()
        # [scale, inf]: its reciprocal is [1 / scale, 0], the inverse scale and a zeroed
        # overflow flag in one kernel. _scale, _inv_scale and _found_inf are views, made
        # here once: a view made per step is one more op (and no kernel) each time.
        self._scale_and_inf = torch.tensor([scale, math.inf], device=self.device)
        self._inverse = torch.zeros(2, device=self.device)
        self._scale, self._inv_scale, self._found_inf = (
            self._scale_and_inf[0],
            self._inverse[0],
            self._inverse[1],
        )
        self._last_found_inf = self._found_inf  # the last update()'s flag, not a copy of it
        # Several optimizers' flags combined by update(), made here: a flag made inside a
        # step would outlive it, and a captured step's memory is reused (cuda_graph.py).
        self._combined_inf = full(0.0, torch.float32)
        self._growth_tracker = full(0, torch.int32)
        self._hysteresis_left = full(self.config.hysteresis, torch.int32)
        # The unstable verdict is kept as a second scale that torch's fused update grows:
        # its "growth tracker" counts consecutive overflows at the floor, and on the
        # unstable_after-th one the mark grows from 1.0 (and the count starts again).
        self._floor_overflows = full(0, torch.int32)
        self._unstable_mark = full(1.0, torch.float32)
        self._overflow_total = full(0, torch.float64)  # float64: exact to 2**53, and one add_
        self._one = full(1.0, torch.float32)
        # The floor as the scale's float32 sees it (what clamp_ compares with).
        self._min_scale_f32 = float(torch.tensor(self.config.min_scale, dtype=torch.float32))

    # ------------------------------------------------------------------ per step

    def is_enabled(self) -> bool:
        """True when this scaler scales losses (the fp16 policy); False passes through."""
        return self.config.enabled

    def scale(self, outputs: T) -> T:
        """Multiply a loss (or a list/tuple of them) by the current scale, on the device."""
        if not self.config.enabled:
            return outputs
        scaled: T = self._apply_scale(outputs)
        return scaled

    def _apply_scale(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value * self._scale.to(value.device, non_blocking=True)
        if isinstance(value, Iterable):
            scaled = [self._apply_scale(v) for v in value]
            return type(value)(scaled) if isinstance(value, list | tuple) else scaled
        raise TypeError(f"scale() takes a Tensor or an iterable of Tensors, got {type(value)!r}")

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the optimizer's gradients by the scale in place and record inf/nan.

        Call it before clipping so that clipping sees true gradient magnitudes. At most
        once per optimizer per step; ``step()`` calls it when you have not. No host sync.
        """
        if not self.config.enabled:
            return
        state = self._state_of(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() was already called on this optimizer since update()")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() was called after step(); call it before step()")
        state["found_inf"] = self._check_grads(optimizer, unscale=True)
        state["stage"] = _UNSCALED

    def check_finite(
        self, optimizers: Sequence[torch.optim.Optimizer], found_inf: torch.Tensor
    ) -> torch.Tensor:
        """:func:`check_finite` on this scaler's device and process group, for the
        precisions that scale no loss."""
        return check_finite(optimizers, found_inf, self._one, self._process_group)

    def _check_grads(self, optimizer: torch.optim.Optimizer, unscale: bool) -> torch.Tensor:
        """Unscale by 1/scale (or only check) and return found_inf, 0.0 or 1.0, on our device."""
        if any("found_inf" in s for s in self._per_optimizer.values()):
            flag = torch.zeros((), dtype=torch.float32, device=self.device)  # this check's own
        else:
            # The step's first check. float32 1/scale is correctly rounded, so it equals
            # GradScaler's float64 reciprocal rounded to float32 (one kernel, not three).
            torch.reciprocal(self._scale_and_inf, out=self._inverse)
            flag = self._found_inf  # zeroed by that reciprocal
        inv_scale = self._inv_scale if unscale else self._one
        return check_finite([optimizer], flag, inv_scale, self._process_group)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Run ``optimizer.step()`` unless this step's gradients hold inf/nan.

        Host syncs: none for optimizers with ``_step_supports_amp_scaling`` (torch's
        ``fused=True`` Adam, AdamW and SGD): they get ``found_inf`` (and the scale, if the
        gradients are still scaled) and skip on the device. Any other optimizer must be
        told on the host whether to step, which costs one host read of found_inf per
        step: on CUDA prefer ``fused=True`` optimizers.
        """
        if not self.config.enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("step(closure=...) is not supported while loss scaling is enabled")
        state = self._state_of(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() was already called on this optimizer since update()")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            grad_scale = getattr(optimizer, "grad_scale", None)
            if state["stage"] == _READY:
                state["found_inf"] = self._check_grads(optimizer, unscale=False)
                # The fused kernel divides by grad_scale itself (product with any user value).
                grad_scale = self._scale * getattr(optimizer, "grad_scale", 1)
            state["stage"] = _STEPPED  # before the step: one that raises is not retried
            return step_or_skip(optimizer, state["found_inf"], grad_scale, *args, **kwargs)
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        # A non-fused optimizer cannot skip by itself: one host read of the flag.
        result = step_or_skip(optimizer, state["found_inf"], None, *args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Move the scale once per step, after ``step()`` of every optimizer. No host sync.

        ``new_scale`` sets the scale directly (as ``GradScaler.update(new_scale)`` does)
        and leaves every counter as it is.
        """
        if not self.config.enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, torch.Tensor):
                self._scale.copy_(new_scale.detach().reshape(()))
            else:
                self._scale.fill_(float(new_scale))
        else:
            flags = [s["found_inf"] for s in self._per_optimizer.values() if "found_inf" in s]
            if not flags:
                raise RuntimeError(
                    "update() found no inf checks this step: call scaler.step(optimizer) "
                    "(or unscale_) for at least one optimizer first"
                )
            found_inf = combine_flags(flags, out=self._combined_inf)
            self._advance(found_inf, fused=self.config.hysteresis == 1)
            self._last_found_inf = found_inf
        self._per_optimizer = {}

    def _advance(self, found_inf: torch.Tensor, fused: bool) -> None:
        """Move the scale and count the overflow; ``found_inf`` is 0.0 or 1.0. No host sync.

        ``fused`` (hysteresis 1): torch's own ``_amp_update_scale_`` (one kernel) backs off
        or grows the scale and moves the growth tracker; the floor and ceiling then clamp
        it. With hysteresis 1 the budget is always full, so ``_hysteresis_left`` never
        changes. The general path does the same in small ops, with the same arithmetic
        (a test checks both agree bit for bit). Each op is a kernel launch on CUDA, where
        a small model's step is launch-bound: the fused path takes five.
        """
        c = self.config
        calm = self._calm(found_inf)  # before the scale moves
        if fused:
            torch._amp_update_scale_(
                self._scale,
                self._growth_tracker,
                found_inf,
                c.growth_factor,
                c.backoff_factor,
                c.growth_interval,
            )
            self._scale.clamp_(c.min_scale, c.max_scale)
        else:
            _move_scale(self._scale, self._growth_tracker, self._hysteresis_left, found_inf, c)
        # The same kernel counts consecutive overflows at the floor: a calm step (nonzero)
        # resets the count, and the unstable_after-th in a row doubles the mark (which
        # never shrinks: backoff 1.0). Every later unstable_after-th doubles it again.
        torch._amp_update_scale_(
            self._unstable_mark, self._floor_overflows, calm, 2.0, 1.0, c.unstable_after
        )
        self._overflow_total.add_(found_inf)

    def _calm(self, found_inf: torch.Tensor) -> torch.Tensor:
        """0.0 exactly when this step overflowed with the scale at the floor; one op."""
        if self._min_scale_f32 > 0:
            # The scale never drops below the floor, so scale - floor * found_inf is
            # scale (> 0) on a clean step and is 0 on an overflow only at the floor.
            return torch.sub(self._scale, found_inf, alpha=self.config.min_scale)
        # A floor of 0 is reached by underflow alone: 1 on a clean step, else the scale.
        return torch.lerp(self._one, self._scale, found_inf)

    def _state_of(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY})

    # ------------------------------------------------------------------ device-side reads

    def found_inf_tensor(self) -> torch.Tensor:
        """0-dim float32 on the device: 1.0 when the current step overflowed, else 0.0.

        Before ``update()`` it covers the optimizers stepped (or unscaled) so far this
        step; after ``update()`` it is the flag of the step just finished. Reading it
        is free; only turning it into a Python value syncs.
        """
        flags = [s["found_inf"] for s in self._per_optimizer.values() if "found_inf" in s]
        return combine_flags(flags) if flags else self._last_found_inf

    def overflow_count_tensor(self) -> torch.Tensor:
        """0-dim float64 on the device (exact counts): steps that overflowed so far.

        Counted since construction, or since the step a loaded state dict was saved at.
        """
        return self._overflow_total

    def scale_tensor(self) -> torch.Tensor:
        """0-dim float32 on the device: the current scale (1.0 semantics if disabled)."""
        return self._scale if self.config.enabled else torch.ones((), device=self.device)

    def unstable_tensor(self) -> torch.Tensor:
        """0-dim bool on the device: the ``unstable`` verdict, without a sync (one op)."""
        return self._unstable_mark > 1.0

    # ------------------------------------------------------------------ host reads

    def get_scale(self) -> float:
        """The current scale as a float (1.0 when disabled). Reads the device: a host sync."""
        return float(self._scale.item()) if self.config.enabled else 1.0

    @property
    def unstable(self) -> bool:
        """True once ``unstable_after`` consecutive steps overflowed at ``min_scale``.

        Reads the device: a host sync. Read it at log intervals, not every step.
        """
        return bool(self._unstable_mark.item() > 1.0)

    def state_dict(self) -> dict[str, Any]:
        """Scale, counters and settings as plain Python values (``weights_only``-safe).

        Reads the device: a host sync. A disabled scaler returns a full state too.
        The keys ``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval``
        and ``_growth_tracker`` mean what they mean in ``GradScaler.state_dict()``.
        """
        return {
            "version": STATE_VERSION,
            "scale": float(self._scale.item()),
            **asdict(self.config),  # the settings: what config_from_state restores
            "_growth_tracker": int(self._growth_tracker.item()),
            "hysteresis_left": int(self._hysteresis_left.item()),
            "floor_overflows": int(self._floor_overflows.item()),
            "unstable": self.unstable,
            "overflow_steps_total": int(self._overflow_total.item()),
            "last_found_inf": float(self._last_found_inf.item()),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()`` bit for bit (settings included, ``enabled`` excepted).

        ``enabled`` stays what the precision policy says, so an fp16 run can resume from
        an fp32 or bf16 checkpoint. A ``torch.amp.GradScaler`` state dict loads too; the
        keys it lacks keep their defaults.

        ``floor_overflows`` counts the current run of overflows at the floor, modulo
        ``unstable_after`` once the run made the scaler unstable (states saved before
        2026-11-23 kept counting past it: they load as that count modulo it).
        """
        if "scale" not in state or "_growth_tracker" not in state:
            raise ValueError(
                "not a loss-scaler state dict (needs 'scale' and '_growth_tracker'); "
                f"got keys {sorted(state)}"
            )
        self.config = config_from_state(state, self.config)
        self._init_state(float(state["scale"]))
        self._growth_tracker.fill_(int(state["_growth_tracker"]))
        self._hysteresis_left.fill_(int(state.get("hysteresis_left", self.config.hysteresis)))
        floor_overflows = int(state.get("floor_overflows", 0))
        self._floor_overflows.fill_(floor_overflows % self.config.unstable_after)
        self._unstable_mark.fill_(2.0 if state.get("unstable", False) else 1.0)
        self._overflow_total.fill_(int(state.get("overflow_steps_total", 0)))
        self._found_inf.fill_(float(state.get("last_found_inf", 0.0)))

    def __repr__(self) -> str:
        c = self.config
        return (
            f"LossScaler(device={str(self.device)!r}, enabled={c.enabled}, "
            f"min_scale={c.min_scale}, max_scale={c.max_scale}, hysteresis={c.hysteresis})"
        )


def _move_scale(
    scale: torch.Tensor,
    growth_tracker: torch.Tensor,
    hysteresis_left: torch.Tensor,
    found_inf: torch.Tensor,
    c: ScalerConfig,
) -> None:
    """Back off, grow or keep ``scale`` for one step whose flag is ``found_inf`` (0.0 or 1.0),
    and move the growth tracker (int32) and the hysteresis budget left (int32) with it."""
    overflow = found_inf > 0
    back_off = overflow & (hysteresis_left <= 1)
    tracker_next = growth_tracker + 1
    grow = ~overflow & (tracker_next >= c.growth_interval)
    # Products in float64, then rounded to float32: the arithmetic of torch's own
    # _amp_update_scale_ kernels, so the trajectories agree bit for bit.
    scale64 = scale.double()
    grown = (scale64 * c.growth_factor).float()
    grown = torch.where(torch.isfinite(grown), grown, scale).clamp(max=c.max_scale)
    shrunk = (scale64 * c.backoff_factor).float().clamp(min=c.min_scale)

    # In place, so that tensors handed out by scale_tensor() & co. stay current.
    zero = torch.zeros_like(growth_tracker)
    scale.copy_(torch.where(back_off, shrunk, torch.where(grow, grown, scale)))
    growth_tracker.copy_(torch.where(overflow | grow, zero, tracker_next))
    spent = torch.where(back_off, hysteresis_left, hysteresis_left - 1)
    hysteresis_left.copy_(
        torch.where(overflow, spent, torch.full_like(hysteresis_left, c.hysteresis))
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
