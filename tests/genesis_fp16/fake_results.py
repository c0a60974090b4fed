"""A TrainResult with plain, plausible values, for tests of what the daemon does with one."""

from __future__ import annotations

from typing import Any

from genesis_fp16.plugin_api import TrainResult


def train_result(**fields: Any) -> TrainResult:
    """A finished 10-step bf16 run; ``fields`` replace any of its values."""
    values: dict[str, Any] = {
        "agent": "agent",
        "precision_requested": "auto",
        "precision_used": "bf16",
        "precision_reason": "test",
        "device": "cpu",
        "steps": 10,
        "skipped_steps": 0,
        "overflow_rate": 0.0,
        "loss_scale": 1.0,
        "final_train_loss": 0.1,
        "eval": {"loss": 0.1},
        "samples_per_second": 1.0,
        "wall_seconds": 1.0,
        "checkpoint": None,
        "quarantined": 0,
    }
    return TrainResult(**{**values, **fields})
