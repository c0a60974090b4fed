"""``OpCounter``: how many aten ops ran under it, every op or one named, for the tests that
count what a step or a loop dispatches (gathers, host reads, its whole op count)."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts in ``count`` the ops that run under it: ``op`` alone (an overload such as
    ``torch.ops.aten.index.Tensor``), or every op when it is None."""

    def __init__(self, op: Any = None) -> None:
        super().__init__()
        self.op = op
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.op is None or func is self.op:
            self.count += 1
        return func(*args, **(kwargs or {}))
