"""How much memory this process may use: the machine's RAM, or less under a cgroup limit.

>>> machine_memory_bytes() > 0
True

A container's limit is the cgroup's, not the host's RAM that ``/proc/meminfo`` reports:
a default sized from the host would let a run be killed by the kernel's OOM killer
instead of refused with a line that says why. Read from the files, never from the
environment, so the library stays free of settings.
"""

from __future__ import annotations

import os
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
