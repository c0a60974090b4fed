"""How one ``LossScaler.update()`` moves the scale with hysteresis, in small ops.

With ``hysteresis=1`` the scaler uses torch's own fused ``_amp_update_scale_``;
:func:`move_scale` is the general path, with the same arithmetic (a test checks both
agree bit for bit). Every tensor is moved in place, on the device, with no host sync::

    move_scale(scale, growth_tracker, hysteresis_left, found_inf, ScalerConfig(hysteresis=2))
"""

from __future__ import annotations

import torch

from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig


def move_scale(
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
