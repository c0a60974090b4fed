"""What a measured ``auto`` keeps in the agent's folder, read by more than one reader:
its calibration (its type and codec are training's ``Calibration``, which a run also
reports) and the captured step's verdicts. Training's records, so training's module;
each file goes through the agent folder's one reader and atomic writer
(``agent_folder.files``). Read here, without torch, so the ``precision`` command reads
them as the run does, never by string keys::

    calibration = read_calibration(path)   # None: none, another version, or set aside
    other = other_release(path)            # another version's, said and kept
    verdicts = read_capture_verdicts(path)  # {key id: CaptureVerdict}

In a resident run process (its memory store: ``kept_in_memory``) the calibration record
is kept between runs while its file is the same, and so is the fact that this process
timed that record's winner itself (:func:`note_timed`): a later run here that reads the
same record back (:func:`timed_here`) need not time it again, for ``RETIME_AFTER_S``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CALIBRATION, CAPTURE_VERDICTS
from genesis_fp16_infrastructure.kept_in_memory import current, estimate_bytes, identity_of
from genesis_fp16_infrastructure.record_codec import LOCAL, Record
from genesis_fp16_infrastructure.training.reports import CACHE_VERSION, Calibration

logger = logging.getLogger(__name__)

CAPTURE_VERSION = 1

# How long a winner this process timed is trusted without timing it again. In one process
# on one device, with the key's validators and the file unchanged, what a live re-time can
# still catch is the host's load and state drifting (other tenants, clocks): a re-time once
# in a while bounds that, and an hourly daemon pays it one run in six.
RETIME_AFTER_S = 6 * 3600.0


@dataclass(frozen=True)
class _TimedHere:
    """This process timed ``calibration``'s winner (a measurement, or a re-time within
    its bound) at ``at`` (``time.monotonic``); ``pid``: which process (a fork's copy of
    the store is not the process that timed it)."""

    calibration: Calibration
    at: float
    pid: int


@dataclass(frozen=True)
class CaptureVerdict(Record):
    """The outcome of one verification of a captured step against eager: ``passed``, and
    ``detail`` (the first difference, or what was compared); ``cached`` when read back
    (about this read, never kept)."""

    passed: bool
    detail: str
    key: Mapping[str, str]
    steps: int
    measured_at: float = field(default_factory=time.time)
    cached: bool = field(default=False, metadata={LOCAL: True})

    @classmethod
    def from_json(cls, data: object, where: str = "") -> CaptureVerdict:
        return replace(super().from_json(data, where), cached=True)


def read_calibration(path: Path, unusable: files.Listener | None = None) -> Calibration | None:
    """The calibration kept at ``path`` (the typed record of
    :mod:`~genesis_fp16_infrastructure.training.reports`), whatever its key; None: none,
    one of another version (:func:`other_release` says which), or an unusable one (set
    aside, reported)."""

    def decode(data: Any) -> Calibration | None:
        version = data.get("version")
        if isinstance(version, int) and version != CACHE_VERSION:
            return None  # written by another release: other_release says which
        return Calibration.from_json(data)

    kept = current()  # a resident run process's memory: the record while its file is the same
    identity = None if kept is None else identity_of(path)
    key = ("calibration", str(path))
    if kept is not None and identity is not None:
        found = kept.get(key, identity)
        if found is not None:
            logger.info("reused from memory: calibration %s (its file unchanged)", path)
            return cast(Calibration, found)
    calibration = files.load(Path(path), CALIBRATION, decode, unusable)
    if kept is not None and calibration is not None and identity == identity_of(path):
        # unchanged while it was read: these are its bytes' record
        kept.put(key, identity, calibration, estimate_bytes(calibration), f"calibration {path}")
    return calibration


def note_timed(path: Path, calibration: Calibration) -> None:
    """Say that this process has just timed the winner of ``calibration``, the record it
    keeps for ``path`` (a measurement written there, or a kept one timed again): kept
    with the file's identity now, where this process keeps anything (a resident run
    process's store), else forgotten."""
    kept = current()
    identity = identity_of(path)
    if kept is None or identity is None:
        return
    mark = _TimedHere(calibration, time.monotonic(), os.getpid())
    kept.put(("calibration timed", str(path)), identity, mark, 64, f"calibration timed {path}")


def timed_here(path: Path, calibration: Calibration) -> float | None:
    """Seconds since this process timed the winner of ``calibration`` as read from
    ``path``, where it may be trusted untimed: the very record kept in this process's
    memory (so its file is the same file, unchanged since), timed by this process, less
    than ``RETIME_AFTER_S`` ago. None: time it again (never timed here, another process,
    a file rewritten since, past the bound, nothing kept)."""
    kept = current()
    identity = identity_of(path)
    if kept is None or identity is None:
        return None
    mark = kept.get(("calibration timed", str(path)), identity, given=False)
    if not isinstance(mark, _TimedHere) or mark.calibration is not calibration:
        return None  # a record read from the file again is not the one timed here
    age = time.monotonic() - mark.at
    if mark.pid != os.getpid() or age > RETIME_AFTER_S:
        return None
    kept.note_given(f"calibration {path}'s winner as timed here {age:.0f} s ago (not timed again)")
    return age


@dataclass(frozen=True)
class OtherRelease:
    """A calibration file of another version than this release's (``version``): this
    release cannot read its rows and never trusts them. An earlier release's record is
    obsolete here: the next ``auto`` run measures again and replaces it, saying so. A
    newer release's is kept as it is (after a downgrade, the upgrade back reuses it):
    each ``auto`` run measures for itself and writes nothing over it.

    >>> OtherRelease(Path("calibration.json"), CACHE_VERSION + 1).newer
    True
    """

    path: Path
    version: int

    @property
    def newer(self) -> bool:
        return self.version > CACHE_VERSION

    def describe(self) -> str:
        """The record, said as what it is (``precision show``, a run's reason)."""
        whose = "a newer release's" if self.newer else "an earlier release's"
        return (
            f"the kept measurement at {self.path} is of version {self.version}, {whose} "
            f"(this release reads version {CACHE_VERSION})"
        )

    def next_run(self) -> str:
        """What the next ``auto`` run does about it, and why."""
        if self.newer:
            return (
                "next auto run: measures for itself, as every auto run does while this file "
                "is here, and does not write over a newer release's record (`precision "
                "reset` forgets it; then this release keeps its own)"
            )
        return "next auto run: measures again and replaces it (an earlier release's record)"

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "version": self.version, "newer": self.newer}


def other_release(path: Path) -> OtherRelease | None:
    """The calibration file at ``path`` when another release wrote it (its ``version`` is
    not this release's); None: none, this release's, or unusable (set aside by
    :func:`read_calibration`, which a reader calls first)."""

    def decode(data: Any) -> OtherRelease | None:
        version = data.get("version") if isinstance(data, dict) else None
        if isinstance(version, int) and version != CACHE_VERSION:
            return OtherRelease(Path(path), version)
        return None

    return files.load(Path(path), CALIBRATION, decode)


def read_capture_verdicts(
    path: Path, unusable: files.Listener | None = None
) -> dict[str, CaptureVerdict]:
    """Every kept verdict by key id; {} without a usable file (another version; an
    unusable one is set aside and reported)."""

    def decode(data: Any) -> dict[str, CaptureVerdict]:
        if data.get("version") != CAPTURE_VERSION:
            return {}
        return {str(k): CaptureVerdict.from_json(v) for k, v in data["verdicts"].items()}

    return files.load(Path(path), CAPTURE_VERDICTS, decode, unusable) or {}


def write_capture_verdicts(path: Path, verdicts: Mapping[str, CaptureVerdict]) -> None:
    """Write every verdict atomically."""
    data = {k: v.to_json() for k, v in verdicts.items()}
    files.write_json(Path(path), CAPTURE_VERDICTS, {"version": CAPTURE_VERSION, "verdicts": data})
