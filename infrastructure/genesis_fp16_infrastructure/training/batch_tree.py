"""The one walk over a batch's (or a state's) tensors: inside (named) tuples, lists and
mappings. A step, a run, the process group, the guard and the flight recorder all walk
with it, so that they agree on what a batch holds and in which order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch


def map_tensors(
    value: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] = lambda v: v
) -> Any:
    """``value`` with ``fn`` applied to each tensor in it and ``other`` (default: none) to
    each other leaf. A (named) tuple or list keeps its type; a mapping comes back a dict.

    >>> map_tensors({"x": (torch.ones(1), 2)}, lambda t: t * 3)
    {'x': (tensor([3.]), 2)}
    """
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        items = [map_tensors(v, fn, other) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, Mapping):
        return {k: map_tensors(v, fn, other) for k, v in value.items()}
    return other(value)


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value``, in the order :func:`map_tensors` walks them."""
    found: list[torch.Tensor] = []
    map_tensors(value, found.append)
    return found
