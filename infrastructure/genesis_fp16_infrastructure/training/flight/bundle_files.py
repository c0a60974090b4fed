"""A fault bundle folder's files (names, bounds, listing) and its FlightConfig, without torch.

``precision show`` lists an agent's bundles with this module alone; reading a bundle
(``bundle.load_bundle``) needs torch. A bundle's name says when, which step and why::

    20261125T071500-123456789-step18-first_nonfinite.fault.pt
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from genesis_fp16_infrastructure.agent_folder.files import write_atomic
from genesis_fp16_infrastructure.agent_folder.layout import BUNDLES_FOLDER, agent_root
from genesis_fp16_infrastructure.config_bounds import Bounded, bounded

SUFFIX = ".fault.pt"
_STAMP = "%Y%m%dT%H%M%S"
# A bundle's name less SUFFIX: time (its two parts when digits), step, reason.
_NAME = re.compile(r"((\d{8}T\d{6})-(\d{9})|[^-]*-[^-]*)-step([^-]*)-(.*)", re.S)


def bundle_folder(state_dir: Path, agent: str) -> Path:
    """An agent's bundle folder inside the daemon's state folder."""
    return agent_root(state_dir, agent) / BUNDLES_FOLDER


@dataclass(frozen=True)
class BundleLimits(Bounded):
    """How much the bundle folder may hold: files and bytes, oldest out first."""

    SETTING = "fault-bundle"
    max_count: int = bounded(20, ge=1)
    max_bytes: int = bounded(2 * 2**30, ge=1)
    # A single file larger than this is refused when read (a read is whole).
    max_file_bytes: int = 8 * 2**30


@dataclass(frozen=True)
class FlightConfig:
    """Where bundles go and how many: ``folder`` (the agent's state folder's
    ``fault_bundles``), ``limits``, and ``context`` (plain data saved in every bundle:
    the agent and the run's request; or a function that makes it, called only when a
    bundle is written). Each bundle's record is in ``FlightRecorder.bundles``."""

    folder: Path
    limits: BundleLimits = field(default_factory=BundleLimits)
    context: Mapping[str, Any] | Callable[[], Mapping[str, Any]] = field(default_factory=dict)

    def context_data(self) -> Mapping[str, Any]:
        """The context a bundle saves (made now, when ``context`` is a function)."""
        return self.context() if callable(self.context) else self.context


def save_into(
    folder: Path, step: int, reason: str, limits: BundleLimits, write: Callable[[IO[bytes]], object]
) -> Path:
    """Name a new bundle in ``folder``, ``write`` it to a handle there (atomically), then
    remove the oldest bundles until ``limits`` hold (the new one stays even alone over the
    byte bound: it was just asked for); its path. One listing serves the name and the trim.

    The name starts with the UTC time, so names sort oldest first. The time is one clock
    read, moved to a nanosecond after the folder's newest bundle when it is not later: a
    clock stepped back, or two saves in one instant, must not sort a new bundle before an
    older one (trimming removes by this order)."""
    files = _bundle_files(folder)
    now = time.time_ns()
    for old in reversed(files):
        if (named := _NAME.fullmatch(old.name.removesuffix(SUFFIX))) and named[2]:
            try:
                seconds = calendar.timegm(time.strptime(named[2], _STAMP))
            except ValueError:  # digits that are no time: not a bundle's name
                continue
            now = max(now, seconds * 10**9 + int(named[3]) + 1)
            break
    stamp = time.strftime(_STAMP, time.gmtime(now // 10**9))
    path = folder / f"{stamp}-{now % 10**9:09d}-step{int(step)}-{reason}{SUFFIX}"
    write_atomic(path, write)
    files = sorted([*files, path])
    sizes = {p: p.stat().st_size for p in files}
    while len(files) > limits.max_count or sum(sizes[p] for p in files) > limits.max_bytes:
        if files == [path]:
            break
        victim = files[0] if files[0] != path else files[1]
        files.remove(victim)
        victim.unlink(missing_ok=True)
    return path


def list_bundles(folder: Path) -> list[dict[str, Any]]:
    """The bundles in ``folder``, oldest first: name, path, bytes and, from the name, step
    and reason (nothing is unpickled to list them)."""
    rows = []
    for path in _bundle_files(folder):
        named = _NAME.fullmatch(path.name.removesuffix(SUFFIX))
        rows.append(
            {
                "name": path.name,
                "path": str(path),
                "bytes": path.stat().st_size,
                "step": named[4] if named else "?",
                "reason": named[5] if named else "?",
            }
        )
    return rows


def _bundle_files(folder: Path) -> list[Path]:
    """The bundle files in ``folder``, sorted by name (oldest first)."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(SUFFIX) and p.is_file() and not p.is_symlink()
    )
