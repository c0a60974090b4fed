"""A checkpoint's state as the Trainer saves it, at its smallest: one weight tensor and
every key the loader checks. Tests that write a checkpoint by hand start from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from genesis_fp16_infrastructure.training import checkpoint_keys as keys


def checkpoint_state(
    step: int = 1,
    weight: torch.Tensor | None = None,
    scale: float = 1.0,
    precision: tuple[str, str] = ("fp32", "fp32"),
    more: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The state of a checkpoint at ``step``: model ``{"w": weight}`` (zeros(2) unless
    given), the scaler at ``scale``, ``precision`` as (requested, used), and ``more``
    keys on top (a stats or extra section)."""
    return {
        keys.SCHEMA: keys.SCHEMA_VERSION,
        keys.MODEL: {"w": torch.zeros(2) if weight is None else weight},
        keys.OPTIMIZER: [],
        keys.SCHEDULER: [],
        keys.SCALER: {"scale": scale, "_growth_tracker": 0},
        keys.PRECISION: {"requested": precision[0], "used": precision[1], "reason": "test"},
        keys.STEP: step,
        keys.RNG: {},
        keys.CONFIG: {},
        **(more or {}),
    }
