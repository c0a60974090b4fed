"""The least a fault bundle must hold for `replay` to load it, for the replay tests that
write their own (hostile, or naming an agent a refused allowlist leaves out)."""

from __future__ import annotations

from typing import Any

import torch


def minimal_bundle(agent: str, request: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """Every key ``load_bundle`` needs, for ``agent`` and its run's ``request``, changed
    by ``changes``."""
    return {
        "version": 1,
        "reason": "first_nonfinite",
        "step": 3,
        "precision": "fp16",
        "execution": "eager",
        "device": "cpu",
        "torch": str(torch.__version__),
        "config": {},
        "state": {"model": {}},
        "batches": [],
        "recorded": {"loss_bits": [0], "loss": [0.0], "loss_finite": [True], "skipped": False},
        "context": {"agent": agent, "request": request},
        **changes,
    }
