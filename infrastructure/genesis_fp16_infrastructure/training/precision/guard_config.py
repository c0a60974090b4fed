"""When the precision guard demotes a run, and to what: its config and its ladder.

Importable without torch, so that a daemon can check its guard settings at start-up
without loading it (the guard itself is :mod:`genesis_fp16_infrastructure.training.run.guard`)::

    config = GuardConfig(ladder=("fp16", "fp32"), check_interval=10)

The next rung a demotion runs is decided with every other precision choice, by
:func:`~genesis_fp16_infrastructure.training.precision.decide.next_precision`.
"""

from __future__ import annotations

from dataclasses import dataclass

from genesis_fp16_infrastructure.training.precision.precision_names import (
    DEFAULT_LADDER,
    PRECISIONS,
)

# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")


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

    ladder: tuple[str, ...] = DEFAULT_LADDER
    bf16_needs_native: bool = True
    check_interval: int = 25
    on_unstable: bool = True
    nonfinite_limit: int | None = 3
    nonfinite_window: int = 100
    overflow_rate_limit: float | None = 0.5
    overflow_window: int = 50
    overflow_warmup: int = 25
    divergence_factor: float | None = 10.0
    divergence_ema_decay: float = 0.9
    divergence_warmup: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        checks = [
            (self.check_interval >= 1, f"check_interval={self.check_interval!r} must be >= 1"),
            (self.nonfinite_limit is None or self.nonfinite_limit >= 1, "nonfinite_limit >= 1"),
            (self.nonfinite_window >= 1, f"nonfinite_window={self.nonfinite_window!r} >= 1"),
            (self.overflow_window >= 1, f"overflow_window={self.overflow_window!r} >= 1"),
            (self.overflow_warmup >= 0, f"overflow_warmup={self.overflow_warmup!r} >= 0"),
            (self.divergence_warmup >= 1, f"divergence_warmup={self.divergence_warmup!r} >= 1"),
            (0.0 <= self.divergence_ema_decay < 1.0, "divergence_ema_decay must be in [0, 1)"),
        ]
        rate = self.overflow_rate_limit
        checks.append((rate is None or 0.0 < rate < 1.0, f"overflow_rate_limit={rate!r} in (0, 1)"))
        factor = self.divergence_factor
        checks.append((factor is None or factor > 1.0, f"divergence_factor={factor!r} > 1"))
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid precision-guard setting: {message}")
