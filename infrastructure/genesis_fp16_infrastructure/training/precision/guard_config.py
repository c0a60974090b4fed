"""When the precision guard demotes a run, and to what: its config and its ladder.

Importable without torch, so that a daemon can check its guard settings at start-up
without loading it (the guard itself is :mod:`genesis_fp16_infrastructure.training.run.guard`)::

    config = GuardConfig(ladder=("fp16", "fp32"), check_interval=10)

The next rung a demotion runs is decided with every other precision choice, by
:func:`~genesis_fp16_infrastructure.training.precision.decide.next_precision`.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any

from genesis_fp16_infrastructure.training.precision.precision_names import (
    DEFAULT_LADDER,
    PRECISIONS,
    PrecisionName,
)

# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")


@dataclass(frozen=True)
class Bounds:
    """The range a numeric guard field must lie in (None: no bound on that side); the
    daemon's settings read it too, so a range is declared once, on the field."""

    ge: float | None = None
    gt: float | None = None
    lt: float | None = None

    def hold(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.lt is None or value < self.lt)
        )

    def describe(self) -> str:
        """``>= 1``, ``> 0 and < 1``: the range as the error messages say it."""
        parts = [(">=", self.ge), (">", self.gt), ("<", self.lt)]
        return " and ".join(f"{sign} {bound:g}" for sign, bound in parts if bound is not None)


def _bounded(
    default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None
) -> Any:
    """A dataclass field with its :class:`Bounds` in the field's metadata."""
    return field(default=default, metadata={"bounds": Bounds(ge, gt, lt)})


def bounds_of(item: Field[Any]) -> Bounds | None:
    """The :class:`Bounds` of one of ``GuardConfig``'s fields, None when it has none."""
    found = item.metadata.get("bounds")
    return found if isinstance(found, Bounds) else None


@dataclass(frozen=True)
class GuardConfig:
    """When the precision guard demotes a run, and to what. Every trigger can be turned off.

    - ``ladder``: precisions from first to last resort; a run demotes to the next entry
      (default fp16 -> bf16 -> fp32). A run whose precision is not on the ladder, or is
      its last entry, is not guarded.
    - ``bf16_needs_native``: skip bf16 on a device without native bf16 (a CPU without
      AVX512-BF16/AMX, a CUDA GPU older than compute capability 8.0). Default True.
    - ``check_interval``: steps between two checks; each check is one host read of the
      device counters (default 25). Also the spacing of the good-state snapshots.
    - ``on_unstable``: demote when the loss scaler reports ``unstable`` (its scale sat
      at ``min_scale`` while ``unstable_after`` consecutive steps overflowed). Default True.
    - ``nonfinite_limit`` / ``nonfinite_window``: demote when this many micro-batch losses
      were NaN or inf within the last ``nonfinite_window`` steps (default 3 within 100).
      None turns the trigger off.
    - ``overflow_rate_limit`` / ``overflow_window`` / ``overflow_warmup``: demote when more
      than this share of the steps of a window of ``overflow_window`` steps overflowed
      (default 0.5 over 50 steps). Windows start ``overflow_warmup`` steps (default 25)
      after the precision began in this run, so that the scale's first calibration from
      65536 down (at most 16 overflowing steps) does not count. None turns it off.
    - ``divergence_factor`` / ``divergence_ema_decay`` / ``divergence_warmup``: demote
      when the mean finite loss of a check interval exceeds ``divergence_factor`` times
      the exponential moving average of the previous intervals' means (default 10x, decay
      0.9), once ``divergence_warmup`` intervals (default 4) have fed the average. NaN and
      inf losses never enter the average. None turns it off.

    ::

        GuardConfig(check_interval=10, overflow_rate_limit=None)  # unstable/NaN/divergence
    """

    ladder: tuple[PrecisionName, ...] = DEFAULT_LADDER
    bf16_needs_native: bool = True
    check_interval: int = _bounded(25, ge=1)
    on_unstable: bool = True
    nonfinite_limit: int | None = _bounded(3, ge=1)
    nonfinite_window: int = _bounded(100, ge=1)
    overflow_rate_limit: float | None = _bounded(0.5, gt=0.0, lt=1.0)
    overflow_window: int = _bounded(50, ge=1)
    overflow_warmup: int = _bounded(25, ge=0)
    divergence_factor: float | None = _bounded(10.0, gt=1.0)
    divergence_ema_decay: float = _bounded(0.9, ge=0.0, lt=1.0)
    divergence_warmup: int = _bounded(4, ge=1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        for item in fields(self):
            value, limits = getattr(self, item.name), bounds_of(item)
            if limits is not None and value is not None and not limits.hold(value):
                raise ValueError(
                    f"invalid precision-guard setting: {item.name}={value!r} must be "
                    f"{limits.describe()}"
                )
