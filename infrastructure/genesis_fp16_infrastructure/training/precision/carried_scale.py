"""The loss scale an agent's fp16 run ended with, carried to its next run.

Every fp16 run that starts without a checkpoint of its own starts at the initial scale
(65,536) and skips its first steps finding the scale again: 1-4 per run on the H100
(``benchmarks/results/h100-2026-11-23.md``); DeepSpeed's users report 6 of the first 10
(DeepSpeed #931). A daemon knows each agent's last scale, so it keeps it in a small JSON
file per agent and starts the next fp16 run there. Importable without torch::

    carried = carry_after_run(requested="fp16", used="fp16", scale=2048.0, demoted=False)
    write_carried_scale(path, carried)
    start = read_carried_scale(path)          # CarriedScale(requested='fp16', scale=2048.0, ...)
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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CARRIED_SCALE
from genesis_fp16_infrastructure.training.precision.loss_scaler_config import ScalerConfig
from genesis_fp16_infrastructure.training.precision.precision_names import (
    LOSS_SCALED,
    PrecisionName,
    RequestedName,
    requested_name,
)

CARRIED_VERSION = 1


@dataclass(frozen=True)
class CarriedScale:
    """The scale an fp16 run of the agent ended with, and the precision it had asked for."""

    requested: RequestedName
    scale: float
    at: str

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


def read_carried_scale(path: Path) -> CarriedScale | None:
    """The carried scale, or None: no file, another version, or an unusable one (set
    aside as ``loss_scale.json.unusable-*`` and reported: a fresh start)."""
    return files.load(Path(path), CARRIED_SCALE, _decode)


def _decode(data: dict[str, Any]) -> CarriedScale | None:
    if data.get("version") != CARRIED_VERSION:
        return None
    carried = CarriedScale(requested_name(data["requested"]), float(data["scale"]), str(data["at"]))
    if not (math.isfinite(carried.scale) and carried.scale > 0):
        raise ValueError(f"scale {carried.scale!r} is not a positive number")
    return carried


def write_carried_scale(path: Path, carried: CarriedScale | None) -> None:
    """Write it atomically; None deletes the file (forgotten)."""
    if carried is None:
        Path(path).unlink(missing_ok=True)
        return
    files.write_json(Path(path), CARRIED_SCALE, {"version": CARRIED_VERSION, **asdict(carried)})
