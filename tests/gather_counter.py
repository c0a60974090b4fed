"""``GatherCounter``: how many gathers (advanced-index kernels) ran under it, for the tests
that hold a loop to gathering its rows once an epoch, not once a batch."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class GatherCounter(TorchDispatchMode):
    """Counts the gathers (advanced-index kernels) that run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.gathers = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.index.Tensor:
            self.gathers += 1
        return func(*args, **(kwargs or {}))
