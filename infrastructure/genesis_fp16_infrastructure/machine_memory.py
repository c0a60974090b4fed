"""This process's memory: how much it may use (the machine's RAM, or less under a cgroup
limit), how much it has used at its peak (:func:`peak_rss_mib`), and where a run's time
and memory went, phase by phase (:class:`PhaseClock`); and the cycle collector paused
while a read builds many objects (:func:`paused_gc`).

>>> machine_memory_bytes() > 0
True

A container's limit is the cgroup's, not the host's RAM that ``/proc/meminfo`` reports:
a default sized from the host would let a run be killed by the kernel's OOM killer
instead of refused with a line that says why. Read from the files, never from the
environment, so the library stays free of settings.

The phase clock: wall seconds per named phase, measured with one clock::

    clock = PhaseClock()
    with clock.phase("read"):
        data = read(...)
    clock.move("train", "eval", seconds_spent_evaluating)  # a phase nested in another
    result["phases"], result["wall_seconds"] = clock.to_json(), clock.elapsed()
    clock.peaks()  # the process's peak resident memory (MiB) as each phase ended

The collector runs whenever allocations outnumber deallocations by a threshold, and each
of its oldest-generation passes walks every live container: building a pool's records
(tuples, dataclasses, lists; none of them in a cycle) set it off again and again over a
growing heap. Paused for the build: a warm read of 100,000 records from the record cache
took 4.2 s with it and 1.2-1.7 s without (benchmarks/pool_scale.py, issue 36). Reference
counting still frees everything as before; the collector runs again after the block::

    with paused_gc():
        data = build_many_objects()
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# cgroup v2, then v1; "max" (v2) or a huge number (v1: 2**63 rounded to pages) is no limit.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def machine_memory_bytes(cgroup_files: tuple[Path, ...] = CGROUP_LIMIT_FILES) -> int:
    """The smaller of physical RAM and this process's cgroup memory limit, in bytes."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = [physical]
    for path in cgroup_files:
        limit = _cgroup_limit(path)
        if limit is not None:
            limits.append(limit)
    return min(limits)


def _cgroup_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None  # no such cgroup controller here
    if not text.isdigit():
        return None  # "max": unlimited
    value = int(text)
    return value if 0 < value < 2**60 else None


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB: Linux's ``VmHWM``, the high
    water mark of this program's own memory. ``ru_maxrss`` is not used there: it keeps the
    parent's resident size across fork and exec (a run started by a 300 MiB daemon would
    never report less); elsewhere it is all there is."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes there, KiB here


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


class PhaseClock:
    """Seconds per phase, in the order phases were first timed, and the run's real time
    since the clock was made (phases need not cover all of it), by ``clock`` (a test's
    fake one, or a calibration's)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.peak_mib: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.seconds[name] += self.clock() - start
            self.peak_mib[name] = peak_rss_mib()

    def move(self, source: str, target: str, seconds: float) -> None:
        """Count ``seconds`` of ``source`` as ``target``'s (time measured inside it)."""
        seconds = min(seconds, self.seconds.get(source, 0.0))
        self.seconds[source] -= seconds
        self.seconds[target] += seconds

    def elapsed(self) -> float:
        return self.clock() - self.started

    def to_json(self) -> dict[str, float]:
        return {name: round(value, 6) for name, value in self.seconds.items()}

    def peaks(self) -> dict[str, float]:
        """The process's peak resident memory in MiB as each phase last ended: the phase
        where it first reaches the run's peak is where the memory went."""
        return {name: round(value, 1) for name, value in self.peak_mib.items()}
