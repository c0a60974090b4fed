"""Where a read's malformed records go: the quarantine file, with each one's reason.

:class:`QuarantineSink` counts every quarantined record and writes it, with its source,
position and reason, to the run's quarantine file; :class:`Recorder` also keeps one
file's entries for the record cache. Everything written is UTF-8 all through: text UTF-8
cannot carry (a lone surrogate, which a JSON escape can spell) is written as an escape,
and :func:`unencodable` finds it in a record so that the read quarantines that record.

Each run writes a file of its own (:func:`new_quarantine_file`), in a folder kept to the
newest ``KEEP_FILES`` files and ``KEEP_BYTES`` bytes: a later run never rewrites an
earlier one's list, and the folder does not grow without end.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import QUARANTINE_LOG
from genesis_fp16_infrastructure.data.file_records import Rejected
from genesis_fp16_infrastructure.data.sources import Source

logger = logging.getLogger(__name__)

_RAW_LIMIT = 2000  # characters of a bad record kept in the quarantine file
QUARANTINE_FILE_BYTES = 16 * 2**20  # one read's file: past this, entries are only counted
# The quarantine folder keeps the newest files of this many runs, of at most this many bytes
KEEP_FILES = 20
KEEP_BYTES = 64 * 2**20


class QuarantineSink:
    """Counts quarantined records and writes each to ``path`` (None: counts only).

    The file is opened at the first entry, so a read that quarantines nothing leaves no
    file; past ``max_bytes`` entries are counted, not written, and one closing entry
    says how many. ``first`` keeps the first few (source, where, reason), for an error
    that names the cause.

    The log gets one warning per data file, not per record (a file of 10,000 bad lines
    is one line, naming the file, its count, its first reason and where every reason is
    kept): a read passes its files one after the other, so a file's line is written when
    the next file's first entry comes, or at :meth:`close`."""

    def __init__(self, path: Path | None, max_bytes: int = QUARANTINE_FILE_BYTES) -> None:
        self.path = path
        self.count = 0
        self.first: list[tuple[Path, str, str]] = []
        self.max_bytes = max_bytes
        self._written = 0
        self._unwritten = 0
        self._handle: TextIO | None = None
        # The data file whose entries come now: its path, count and first (where, reason).
        self._file: tuple[Path, int, str, str] | None = None

    def add(self, source: Source, reason: str, raw: Any) -> Rejected:
        self.count += 1
        text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        entry = Rejected(safe_text(source.where), safe_text(reason), safe_text(text[:_RAW_LIMIT]))
        self._count_file(source.path, entry.where, entry.reason)
        if len(self.first) < 3:
            self.first.append((source.path, entry.where, entry.reason))
        if self.path is None:
            return entry
        line = json.dumps(
            {"source": str(source.path), "where": entry.where, "reason": entry.reason,
             "record": entry.text}
        )  # fmt: skip
        if self._written + len(line) > self.max_bytes:
            self._unwritten += 1
        else:
            self._write(line)
        return entry

    def _write(self, line: str) -> None:
        if self._handle is None:
            assert self.path is not None
            # a file of this read's own; a folder or FIFO at its name is set aside (counted)
            self._handle = files.open_log(self.path, QUARANTINE_LOG)
        self._handle.write(line + "\n")
        self._written += len(line) + 1

    def _count_file(self, file: Path, where: str, reason: str) -> None:
        if self._file is not None and self._file[0] == file:
            self._file = (file, self._file[1] + 1, *self._file[2:])
            return
        self._say_file()
        self._file = (file, 1, where, reason)

    def _say_file(self) -> None:
        """The one log line of the data file whose entries just ended."""
        if self._file is None:
            return
        file, count, where, reason = self._file
        kept = f"; kept with its reason in {self.path}" if self.path is not None else ""
        if where == "file" and count == 1:
            logger.warning("quarantined data file %s: %s%s", file, reason, kept)
        else:
            logger.warning(
                "quarantined %d record(s) of %s, the first at %s: %s%s",
                count,
                file,
                where,
                reason,
                kept.replace("its reason", "each one's reason"),
            )
        self._file = None

    def close(self) -> None:
        self._say_file()
        if self._unwritten:
            reason = (
                f"{self._unwritten:,} more quarantined records not written: this file "
                f"reached its limit of {self.max_bytes // 2**20} MiB"
            )
            self._write(json.dumps({"source": "", "where": "", "reason": reason, "record": ""}))
        if self._handle is not None:
            self._handle.close()


def new_quarantine_file(
    folder: Path, keep_files: int = KEEP_FILES, keep_bytes: int = KEEP_BYTES
) -> Path:
    """Where this run's quarantined records go: a new file in ``folder``, named by the
    UTC time (names sort oldest first). The folder is bounded first: the oldest files go
    until at most ``keep_files - 1`` remain, holding at most ``keep_bytes``, so that
    with this run's file it keeps ``keep_files``. Nothing is created until a record is
    quarantined (:class:`QuarantineSink`)."""
    now = datetime.now(UTC)
    path = folder / f"{now:%Y%m%dT%H%M%S.%fZ}.jsonl"
    try:
        kept = sorted(folder.glob("*.jsonl"), reverse=True)  # newest first
        total = 0
        for index, old in enumerate(kept):
            total += old.stat().st_size
            if index >= keep_files - 1 or total > keep_bytes:
                old.unlink(missing_ok=True)
    except OSError as exc:  # a run is not refused for a copy of its bad records
        logger.warning("quarantine folder %s: cannot prune (%s)", folder, exc)
    return path


class Recorder:
    """A quarantine sink that also keeps one file's entries, as written, for a cache."""

    def __init__(self, sink: QuarantineSink) -> None:
        self.sink = sink
        self.rejected: list[Rejected] = []

    def add(self, source: Source, reason: str, raw: Any) -> None:
        # The entry as the sink wrote it, UTF-8 all through: the record cache keeps it.
        self.rejected.append(self.sink.add(source, reason, raw))


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
