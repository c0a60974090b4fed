"""The records of the agent's folder that more than one reader parses: a measured
``auto``'s calibration (its type and codec are training's ``Calibration``, which a run
also reports) and the captured step's verdicts. Read here, without torch, so the
``precision`` command reads them as the run does, never by string keys::

    calibration = read_calibration(path)   # None: none, another version, or set aside
    verdicts = read_capture_verdicts(path)  # {key id: CaptureVerdict}
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import CALIBRATION, CAPTURE_VERDICTS
from genesis_fp16_infrastructure.record_codec import LOCAL, Record
from genesis_fp16_infrastructure.training.reports import CACHE_VERSION, Calibration

CAPTURE_VERSION = 1


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
    one of an earlier version (measured again), or an unusable one (set aside, reported)."""

    def decode(data: Any) -> Calibration | None:
        version = data.get("version")
        if isinstance(version, int) and version != CACHE_VERSION:
            return None  # written by another release: measured again, then replaced
        return Calibration.from_json(data)

    return files.load(Path(path), CALIBRATION, decode, unusable)


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
