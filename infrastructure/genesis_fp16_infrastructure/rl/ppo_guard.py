"""The precision guard's config for a PPO run (docs/precision-guard.md).

The divergence trigger is off: the clipped surrogate of whitened advantages hovers around
zero and changes sign, so "mean loss > factor x its moving average" fires on noise (two
clean 240-step fp16 runs both "diverged"); the scaler, non-finite-loss and overflow-rate
triggers stay. ``fit()`` checks a task with iterations at the first iteration end after
each ``check_interval`` steps. A setting an operator chose that a PPO run cannot honour
as set is a warning; at the defaults, a debug line (nothing to act on)::

    guard = ppo_guard(request.guard, steps_per_iteration=4)
"""

from __future__ import annotations

import dataclasses
import logging

from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig

logger = logging.getLogger(__name__)


def ppo_guard(config: GuardConfig | None, steps_per_iteration: int) -> GuardConfig | None:
    """``config`` without its divergence trigger (None stays None: no guard)."""
    if config is None:
        return None
    defaults = GuardConfig()
    if config.divergence_factor is not None:
        chosen = config.divergence_factor != defaults.divergence_factor
        (logger.warning if chosen else logger.debug)(
            "precision guard: divergence_factor=%g is not used by a PPO run (its loss "
            "hovers around zero, so a ratio to its moving average is noise); the scaler, "
            "non-finite-loss and overflow-rate triggers still apply",
            config.divergence_factor,
        )
    if config.check_interval % steps_per_iteration:
        chosen = config.check_interval != defaults.check_interval
        (logger.warning if chosen else logger.debug)(
            "precision guard: check_interval=%d is not a multiple of the %d optimizer steps "
            "of a PPO iteration; the guard checks at the first iteration end after each %d",
            config.check_interval,
            steps_per_iteration,
            config.check_interval,
        )
    return dataclasses.replace(config, divergence_factor=None)
