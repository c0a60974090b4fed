"""The memory a run may size itself by: physical RAM, or a smaller cgroup limit."""

from __future__ import annotations

import os
from pathlib import Path

from genesis_fp16_infrastructure.machine_memory import machine_memory_bytes


def test_a_cgroup_limit_below_the_ram_wins_and_no_limit_is_ignored(tmp_path: Path) -> None:
    """memory.max of 1 GiB caps the answer; "max" or a v1 "unlimited" leaves the RAM."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limited, unlimited, v1_unlimited = (tmp_path / n for n in ("a", "b", "c"))
    limited.write_text(f"{2**30}\n")
    unlimited.write_text("max\n")
    v1_unlimited.write_text("9223372036854771712\n")
    assert machine_memory_bytes((limited, unlimited)) == min(ram, 2**30)
    assert machine_memory_bytes((unlimited, v1_unlimited, tmp_path / "none")) == ram
