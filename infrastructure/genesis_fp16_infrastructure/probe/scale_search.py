"""The fp16 loss-scale search: halve from 2**16 until the gradients are finite.

The search answers one question for the probe: how large a loss scale does this model's
backward pass tolerate in fp16 on this batch? Each try is one forward and backward pass.

>>> result = search_loss_scale(lambda scale: [torch.tensor([scale * 2.0**10])
...                                           .half().float()])
>>> result.scale, result.halvings
(32.0, 11)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

START_SCALE = 2.0**16
MIN_SCALE = 1.0


@dataclass(frozen=True)
class ScaleSearch:
    """The outcome of a search: the first scale with finite gradients, and those gradients.

    ``grads`` are still multiplied by ``scale``. ``finite`` is False when even
    ``MIN_SCALE`` overflowed; then ``scale`` is that floor and ``grads`` are its.
    """

    scale: float
    halvings: int
    finite: bool
    grads: tuple[torch.Tensor | None, ...]


def all_finite(grads: Sequence[torch.Tensor | None]) -> bool:
    """True when every gradient element is finite. Reads the device: one host sync."""
    present = [g for g in grads if g is not None]
    if not present:
        return True
    return bool(torch.stack([torch.isfinite(g).all() for g in present]).all())


def search_loss_scale(
    scaled_grads: Callable[[float], Sequence[torch.Tensor | None]],
    hopeless: Callable[[], bool] | None = None,
) -> ScaleSearch:
    """Call ``scaled_grads(scale)`` with ``START_SCALE``, half of it, ... until finite.

    ``scaled_grads`` runs the forward and the backward of ``loss * scale`` and returns
    the resulting gradients. Stops at ``MIN_SCALE``: a model whose gradients overflow
    even there is reported with ``finite=False`` rather than scaled below it.
    ``hopeless()``, asked after a non-finite try, ends the search early: when the
    forward pass itself overflowed, no loss scale can help.
    """
    scale, halvings = START_SCALE, 0
    while True:
        grads = tuple(scaled_grads(scale))
        if all_finite(grads):
            return ScaleSearch(scale, halvings, True, grads)
        if scale / 2 < MIN_SCALE or (hopeless is not None and hopeless()):
            logger.warning("fp16 gradients overflow even at loss scale %g", scale)
            return ScaleSearch(scale, halvings, False, grads)
        scale /= 2
        halvings += 1
