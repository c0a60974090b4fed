"""The precision guard's configuration: when a run demotes, and along which ladder.

:class:`GuardConfig` (``decide`` takes it with the request). The guard itself is
:mod:`genesis_fp16_infrastructure.training.run.guard`; what it remembers of an agent's
demotions is :mod:`~genesis_fp16_infrastructure.training.precision.precision_memory`'s.
Torch-free, so that a daemon checks its guard settings at start-up without loading torch::

    config = GuardConfig(ladder=("fp16", "fp32"), check_interval=10)
"""

from __future__ import annotations

from dataclasses import dataclass

from genesis_fp16_infrastructure.config_bounds import Bounded, bounded
from genesis_fp16_infrastructure.precision_names import DEFAULT_LADDER, PRECISIONS, PrecisionName
from genesis_fp16_infrastructure.record_codec import Record

# The fixed set of reasons a demotion can have (a bounded metric label).
REASONS: tuple[str, ...] = ("scaler_unstable", "nonfinite_loss", "overflow_rate", "divergence")


@dataclass(frozen=True)
class GuardConfig(Record, Bounded):
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
    check_interval: int = bounded(25, ge=1)
    on_unstable: bool = True
    nonfinite_limit: int | None = bounded(3, ge=1)
    nonfinite_window: int = bounded(100, ge=1)
    overflow_rate_limit: float | None = bounded(0.5, gt=0.0, lt=1.0)
    overflow_window: int = bounded(50, ge=1)
    overflow_warmup: int = bounded(25, ge=0)
    divergence_factor: float | None = bounded(10.0, gt=1.0)
    divergence_ema_decay: float = bounded(0.9, ge=0.0, lt=1.0)
    divergence_warmup: int = bounded(4, ge=1)

    SETTING = "precision-guard"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ladder", tuple(self.ladder))
        unknown = [p for p in self.ladder if p not in PRECISIONS]
        if unknown or not self.ladder or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(
                f"guard ladder={list(self.ladder)!r}: needs distinct precisions from "
                f"{', '.join(PRECISIONS)}, e.g. fp16,bf16,fp32"
            )
        super().__post_init__()  # the fields' ranges
