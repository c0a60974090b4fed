"""Where a read's malformed records go: the quarantine file, with each one's reason.

:class:`QuarantineSink` counts every quarantined record and writes it, with its source,
position and reason, to the run's quarantine file; :class:`Recorder` also keeps one
file's entries for the record cache. Everything written is UTF-8 all through: text UTF-8
cannot carry (a lone surrogate, which a JSON escape can spell) is written as an escape,
and :func:`unencodable` finds it in a record so that the read quarantines that record.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, TextIO

from genesis_fp16_infrastructure.data.file_records import Rejected
from genesis_fp16_infrastructure.data.sources import Source

logger = logging.getLogger(__name__)

_RAW_LIMIT = 2000  # characters of a bad record kept in the quarantine file


class QuarantineSink:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.count = 0
        self._handle: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One file per run: a stale list from an earlier read would mislead.
            self._handle = path.open("w", encoding="utf-8")

    def add(self, source: Source, reason: str, raw: Any) -> None:
        self.count += 1
        reason, where = safe_text(reason), safe_text(source.where)
        logger.warning("quarantined a record from %s (%s): %s", source.path, where, reason)
        if self._handle is None:
            return
        entry = {
            "source": str(source.path),
            "where": where,
            "reason": reason,
            "record": raw_text(raw),
        }
        self._handle.write(json.dumps(entry) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


class Recorder:
    """A quarantine sink that also keeps one file's entries, as written, for a cache."""

    def __init__(self, sink: QuarantineSink) -> None:
        self.sink = sink
        self.rejected: list[Rejected] = []
        self.vanished = False

    def add(self, source: Source, reason: str, raw: Any) -> None:
        self.sink.add(source, reason, raw)
        if source.where == "file" and reason.startswith("vanished"):
            self.vanished = True  # nothing to remember: the file is gone
        # As the quarantine file has it, and UTF-8 all through: the record cache keeps it.
        self.rejected.append(Rejected(safe_text(source.where), safe_text(reason), raw_text(raw)))


def raw_text(raw: Any) -> str:
    """A quarantined record as the quarantine file keeps it: its first characters."""
    text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
    return safe_text(text[:_RAW_LIMIT])


def safe_text(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (a lone surrogate) written as an escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unencodable(record: Any) -> str | None:
    """Where a parsed record holds text that is not Unicode (a lone surrogate such as
    ``"\\ud800"``, which a JSON escape can spell and UTF-8 cannot carry), as a quarantine
    reason; None when all of it is. Only the slow path's records are asked: msgspec refuses
    such an escape itself. A walk with a stack, not recursion: the parse allowed the depth."""
    stack: list[tuple[str, Any]] = [("", record)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                name = safe_text(str(key))
                stack.append((f"{where}.{name}" if where else name, item))
                stack.append((f"{where} key {name}" if where else f"key {name}", key))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                char = ascii(value[exc.start])
                return (
                    f"{where or 'record'}: not Unicode text (a lone surrogate, {char}, at "
                    f"character {exc.start}): UTF-8 cannot carry it"
                )
    return None
