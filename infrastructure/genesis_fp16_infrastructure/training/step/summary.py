"""The immutable report of a training run, per log interval and at the end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from genesis_fp16_infrastructure.json_numbers import finite, number
from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName


@dataclass(frozen=True)
class TrainingSummary:
    """What a :class:`~genesis_fp16_infrastructure.training.Trainer` has done so far, read from
    the device.

    Building one is a host sync, so the trainer does it only at log intervals and when
    asked through ``trainer.summary()``. The daemon turns these into metrics::

        def on_log(s: TrainingSummary) -> None:
            print(f"step {s.step}: loss {s.train_loss:.4f}, skipped {s.skipped_steps}")

    Fields:

    - ``precision``: the precision that ran (``fp32``, ``bf16`` or ``fp16``).
    - ``step``: optimizer steps so far, skipped ones included (continues across resume).
    - ``optimizer_steps``: steps whose update was applied; ``skipped_steps``: steps
      skipped because a gradient overflowed (only fp16 skips).
    - ``overflow_rate``: ``skipped_steps / step`` over the whole run;
      ``overflow_rate_window``: the same over the last ``overflow_window`` steps.
    - ``loss_scale``: the current loss scale (1.0 when loss scaling is off).
    - ``grad_norm``: the unscaled gradient norm of the last applied step, before clipping.
    - ``train_loss``: mean of the finite step losses since the previous log interval
      (NaN when there was none); ``nonfinite_losses``: micro-batch losses that were
      inf or NaN, over the whole run.
    - ``samples``, ``samples_per_second``, ``wall_seconds``: counted by this process since
      its first step (a resumed run starts these afresh).
    - ``unstable``: the loss scaler gave up (overflowing at its floor for too long).
    """

    precision: PrecisionName
    step: int
    optimizer_steps: int
    skipped_steps: int
    overflow_rate: float
    overflow_rate_window: float
    loss_scale: float
    grad_norm: float
    train_loss: float
    nonfinite_losses: int
    samples: int
    samples_per_second: float
    wall_seconds: float
    unstable: bool

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON logs)."""
        return asdict(self)

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON-ready data: NaN and infinities become null."""
        out: dict[str, Any] = finite(asdict(self))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainingSummary:
        """The inverse of :meth:`to_json` (null floats come back as NaN)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data[f.name]
            values[f.name] = number(value) if f.type in ("float", float) else value
        return cls(**values)
