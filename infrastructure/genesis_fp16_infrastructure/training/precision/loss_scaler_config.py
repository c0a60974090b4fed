"""The loss scaler's settings: one frozen, validated value, what a saved state restores,
and the scale an agent's last fp16 run ended with, carried to its next run.

:class:`~genesis_fp16_infrastructure.training.precision.loss_scaler.LossScaler` takes them as
keyword arguments or through ``LossScaler.from_config``; ``load_state_dict`` takes them
from a checkpoint through :func:`config_from_state`. Importable without torch, so that a
config can be built and checked without loading it::

    config = ScalerConfig(growth_interval=500, hysteresis=2)

Every fp16 run that starts without a checkpoint of its own starts at the initial scale
(65,536) and skips its first steps finding the scale again: 1-4 per run on the H100
(``benchmarks/results/h100-2026-11-23.md``); DeepSpeed's users report 6 of the first 10
(DeepSpeed #931). A daemon knows each agent's last scale, so it keeps it in a small JSON
file per agent and starts the next fp16 run there::

    carried = carry_after_run(requested="fp16", used="fp16", scale=2048.0, demoted=False)
    folder.save_carried_scale(carried)        # AgentFolder: loss_scale.json
    start = folder.carried_scale()            # CarriedScale(requested='fp16', scale=2048.0, ...)
    start.for_request("fp16")                 # 2048.0; another request: None (forgotten)
    clamp_scale(2048.0, ScalerConfig())       # within the run's floor and ceiling

- Carried only from a run that ended in fp16 without a demotion, with a finite positive
  scale; anything else (a demotion, a run in another precision) forgets it.
- Used only by a run asking for the same precision as the run it came from (a changed
  request forgets it); a run that resumes its own checkpoint takes the checkpoint's scale.
- Clamped to the next run's floor and ceiling (``ScalerConfig.min_scale``, ``max_scale``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.precision_names import (
    INITIAL_LOSS_SCALE,
    LOSS_SCALED,
    PrecisionName,
    RequestedName,
)
from genesis_fp16_infrastructure.record_codec import Record


@dataclass(frozen=True)
class ScalerConfig(Bounded):
    """The keyword arguments of :class:`LossScaler`, as one frozen value.

    Defaults are Precision-RL's (65536 / 2.0 / 0.5 / 2000) plus a floor of 1.0, a
    ceiling of 2**24, no hysteresis and an ``unstable`` verdict after 50 consecutive
    overflowing steps at the floor::

        config = ScalerConfig(growth_interval=500, hysteresis=2)
        scaler = LossScaler.from_config("cpu", config)
    """

    SETTING = "loss-scaler"
    init_scale: float = INITIAL_LOSS_SCALE
    growth_factor: float = bounded(2.0, gt=1.0)
    backoff_factor: float = bounded(0.5, gt=0.0, lt=1.0)
    growth_interval: int = bounded(2000, ge=1)
    min_scale: float = bounded(1.0, ge=0.0)
    max_scale: float = 2.0**24
    hysteresis: int = bounded(1, ge=1)  # 1: no hysteresis
    unstable_after: int = bounded(50, ge=1)
    enabled: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields' ranges; then the rule across fields (which
        # also refuses max_scale < min_scale, naming both)
        if not self.min_scale <= self.init_scale <= self.max_scale:
            raise ValueError(
                f"invalid loss-scaler setting: init_scale={self.init_scale!r} must lie in "
                f"[min_scale={self.min_scale!r}, max_scale={self.max_scale!r}]"
            )


def config_from_state(state: Mapping[str, Any], current: ScalerConfig) -> ScalerConfig:
    """The settings a scaler ``state_dict()`` restores; keys it lacks keep ``current``'s.

    ``enabled`` always stays ``current``'s: the precision policy decides it, not the
    checkpoint. A ``torch.amp.GradScaler`` state (no floor, no ceiling) loads too.
    """
    # Every setting (state_dict() wrote them with asdict), in its default's type (float
    # or int); ``enabled`` is replaced below.
    restored = {
        name: type(default)(state.get(name, getattr(current, name)))
        for name, default in asdict(ScalerConfig()).items()
    }
    # A GradScaler state has no floor or ceiling: widen ours to admit its scale.
    scale = float(state["scale"])
    restored["min_scale"] = min(restored["min_scale"], scale)
    restored["max_scale"] = max(restored["max_scale"], scale)
    return ScalerConfig(**{**restored, "enabled": current.enabled})


@dataclass(frozen=True)
class CarriedScale(Record):
    """The scale an fp16 run of the agent ended with, and the precision it had asked for
    (``loss_scale.json``, with its ``version``: ``to_json`` and ``from_json`` are the
    record codec's)."""

    VERSION = 1

    requested: RequestedName
    scale: float
    at: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale {self.scale!r} is not a positive number")

    def for_request(self, requested: RequestedName) -> float | None:
        """The scale to start a run asking ``requested`` with; None when the request changed."""
        return self.scale if requested == self.requested else None


def carry_after_run(
    requested: RequestedName, used: PrecisionName, scale: float, demoted: bool
) -> CarriedScale | None:
    """What to carry after a run: its last scale when it ended in a loss-scaled precision
    (``LOSS_SCALED``: fp16) undemoted, else None."""
    if used not in LOSS_SCALED or demoted or not (math.isfinite(scale) and scale > 0):
        return None
    return CarriedScale(requested, float(scale), datetime.now(UTC).isoformat(timespec="seconds"))


def clamp_scale(scale: float, config: ScalerConfig) -> float:
    """``scale`` within ``config``'s floor and ceiling."""
    return min(max(scale, config.min_scale), config.max_scale)
