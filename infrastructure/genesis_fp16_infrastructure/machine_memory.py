"""How much memory this process may use: the machine's RAM, or less under a cgroup limit;
and how much it has used at its peak (:func:`peak_rss_mib`).

>>> machine_memory_bytes() > 0
True

A container's limit is the cgroup's, not the host's RAM that ``/proc/meminfo`` reports:
a default sized from the host would let a run be killed by the kernel's OOM killer
instead of refused with a line that says why. Read from the files, never from the
environment, so the library stays free of settings.
"""

from __future__ import annotations

import os
import resource
import sys
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
