"""The loss scaler's settings: one frozen, validated value, and what a saved state restores.

:class:`~genesis_fp16_infrastructure.training.precision.loss_scaler.LossScaler` takes them as
keyword arguments or through ``LossScaler.from_config``; ``load_state_dict`` takes them
from a checkpoint through :func:`config_from_state`. Importable without torch, so that a
config can be built and checked without loading it::

    config = ScalerConfig(growth_interval=500, hysteresis=2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from genesis_fp16_infrastructure.training.precision.precision_names import INITIAL_LOSS_SCALE


@dataclass(frozen=True)
class ScalerConfig:
    """The keyword arguments of :class:`LossScaler`, as one frozen value.

    Defaults are Precision-RL's (65536 / 2.0 / 0.5 / 2000) plus a floor of 1.0, a
    ceiling of 2**24, no hysteresis and an ``unstable`` verdict after 50 consecutive
    overflowing steps at the floor::

        config = ScalerConfig(growth_interval=500, hysteresis=2)
        scaler = LossScaler.from_config("cpu", config)
    """

    init_scale: float = INITIAL_LOSS_SCALE
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 2.0**24
    hysteresis: int = 1
    unstable_after: int = 50
    enabled: bool = True

    def __post_init__(self) -> None:
        _validate(self)


def _validate(c: ScalerConfig) -> None:
    checks = [
        (c.growth_factor > 1.0, f"growth_factor={c.growth_factor!r} must be > 1.0"),
        (0.0 < c.backoff_factor < 1.0, f"backoff_factor={c.backoff_factor!r} must be in (0, 1)"),
        (c.growth_interval >= 1, f"growth_interval={c.growth_interval!r} must be >= 1"),
        (c.min_scale >= 0.0, f"min_scale={c.min_scale!r} must be >= 0"),
        (c.max_scale >= c.min_scale, f"max_scale={c.max_scale!r} must be >= min_scale"),
        (
            c.min_scale <= c.init_scale <= c.max_scale,
            f"init_scale={c.init_scale!r} must lie in [min_scale={c.min_scale!r}, "
            f"max_scale={c.max_scale!r}]",
        ),
        (c.hysteresis >= 1, f"hysteresis={c.hysteresis!r} must be >= 1 (1 = no hysteresis)"),
        (c.unstable_after >= 1, f"unstable_after={c.unstable_after!r} must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"invalid loss-scaler setting: {message}")


def config_from_state(state: Mapping[str, Any], current: ScalerConfig) -> ScalerConfig:
    """The settings a scaler ``state_dict()`` restores; keys it lacks keep ``current``'s.

    ``enabled`` always stays ``current``'s: the precision policy decides it, not the
    checkpoint. A ``torch.amp.GradScaler`` state (no floor, no ceiling) loads too.
    """
    c = current
    scale = float(state["scale"])
    return ScalerConfig(
        init_scale=float(state.get("init_scale", c.init_scale)),
        growth_factor=float(state.get("growth_factor", c.growth_factor)),
        backoff_factor=float(state.get("backoff_factor", c.backoff_factor)),
        growth_interval=int(state.get("growth_interval", c.growth_interval)),
        # A GradScaler state has no floor or ceiling: widen ours to admit its scale.
        min_scale=min(float(state.get("min_scale", c.min_scale)), scale),
        max_scale=max(float(state.get("max_scale", c.max_scale)), scale),
        hysteresis=int(state.get("hysteresis", c.hysteresis)),
        unstable_after=int(state.get("unstable_after", c.unstable_after)),
        enabled=c.enabled,
    )
