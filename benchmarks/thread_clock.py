"""One call timed by its thread's CPU clock, for the in-process A/Bs (a loaded host moves
a thread's CPU time far less than its wall time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def thread_ms(call: Callable[[], Any]) -> tuple[float, Any]:
    """``call()``'s thread CPU milliseconds and its result."""
    started = time.thread_time()
    out = call()
    return 1000 * (time.thread_time() - started), out
