"""Python's cycle collector paused while a read builds a million objects that hold no cycles.

The collector runs whenever allocations outnumber deallocations by a threshold, and each
of its oldest-generation passes walks every live container: building a pool's records
(tuples, dataclasses, lists; none of them in a cycle) set it off again and again over a
growing heap. Paused for the build: a warm read of 100,000 records from the record cache
took 4.2 s with it and 1.2-1.7 s without (benchmarks/pool_scale.py, issue 36). Reference
counting still frees everything as before; the collector runs again after the block.

    with paused_gc():
        data = build_many_objects()
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cycle collector for the block; enable it again after, if it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
