"""A checkpoint's model weights as a judged plugin's ``score_records`` loads them
(:func:`model_weights`): the contract's one read of a checkpoint a plugin makes itself,
checked as a resume checks it. :mod:`.judging` names it too: a plugin imports it from
there, or from ``genesis_fp16.plugin_api``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_weights(checkpoint: Path) -> dict[str, Any]:
    """The model's weights (its ``state_dict``) in ``checkpoint``, checked as a resume
    checks them (digest, schema, finite weights), for ``score_records`` to load into a
    fresh model; a :class:`~genesis_fp16_infrastructure.training.CheckpointError` (a
    ValueError: the judged run reports it in one line) when it cannot be read."""
    from genesis_fp16_infrastructure.training import checkpoint_keys
    from genesis_fp16_infrastructure.training.checkpoint_load import load_checkpoint

    return dict(load_checkpoint(Path(checkpoint))[checkpoint_keys.MODEL])
