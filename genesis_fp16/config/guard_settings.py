"""The precision guard's settings, ``GENESIS_FP16_GUARD_*``; mixed into ``Settings``.

Each maps onto a field of :class:`genesis_fp16_infrastructure.training.GuardConfig` (see its
docstring for what the triggers mean); ``0`` turns a numeric trigger off.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from genesis_fp16_infrastructure.training.precision.guard_config import GuardConfig
from genesis_fp16_infrastructure.training.precision.precision_names import PRECISIONS

# The defaults are GuardConfig's own, read from it: one place says what the guard does
# out of the box (an optional trigger's None is the setting's 0, "off").
_DEFAULT = GuardConfig()


def _off_is_zero(value: float | None) -> float:
    return 0 if value is None else value


class GuardSettings(BaseModel):
    """``GENESIS_FP16_GUARD_*``: triggers, ladder, and promotion after clean runs."""

    guard_enabled: bool = True
    guard_ladder: str = ",".join(_DEFAULT.ladder)
    # false: keep bf16 on the ladder where it is emulated (a CPU without AVX512-BF16/AMX).
    guard_bf16_needs_native: bool = _DEFAULT.bf16_needs_native
    guard_check_interval: int = Field(default=_DEFAULT.check_interval, ge=1)
    guard_on_unstable: bool = _DEFAULT.on_unstable
    guard_nonfinite_limit: int = Field(default=int(_off_is_zero(_DEFAULT.nonfinite_limit)), ge=0)
    guard_nonfinite_window: int = Field(default=_DEFAULT.nonfinite_window, ge=1)
    guard_overflow_rate_limit: float = Field(
        default=_off_is_zero(_DEFAULT.overflow_rate_limit), ge=0.0, lt=1.0
    )
    guard_overflow_window: int = Field(default=_DEFAULT.overflow_window, ge=1)
    guard_overflow_warmup: int = Field(default=_DEFAULT.overflow_warmup, ge=0)
    guard_divergence_factor: float = Field(default=_off_is_zero(_DEFAULT.divergence_factor), ge=0.0)
    guard_divergence_ema_decay: float = Field(default=_DEFAULT.divergence_ema_decay, ge=0.0, lt=1.0)
    guard_divergence_warmup: int = Field(default=_DEFAULT.divergence_warmup, ge=1)
    guard_promote_after_runs: int = Field(default=0, ge=0)

    @field_validator("guard_ladder")
    @classmethod
    def _check_ladder(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",") if name.strip()]
        if not names or len(set(names)) != len(names) or set(names) - set(PRECISIONS):
            raise ValueError(
                f"{value!r} must be distinct precisions from {', '.join(PRECISIONS)}, "
                "comma-separated, e.g. fp16,bf16,fp32"
            )
        return ",".join(names)

    @field_validator("guard_divergence_factor")
    @classmethod
    def _check_factor(cls, value: float) -> float:
        if value != 0.0 and value <= 1.0:
            raise ValueError(f"{value!r} must be > 1 (or 0 to turn the trigger off)")
        return value
