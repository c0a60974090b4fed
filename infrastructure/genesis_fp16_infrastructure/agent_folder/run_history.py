"""The run history, ``<agent folder>/run_history.jsonl``: an agent's recent runs, a
:class:`~genesis_fp16_infrastructure.agent_folder.run_records.RunEntry` a line,
kept for the status page's memory.

``last_run.json`` says what the last run did; the page also answers "lately": the last
runs with their outcome, precision and why, the gate's scores of each candidate, the
loss scale and skipped steps, the guard's demotions, the quarantined records, the drift
warnings and the live watch's figures. So the step that records a run (the daemon's, and
a foreground ``train``) also appends one line to ``<agent folder>/run_history.jsonl``
(:data:`~genesis_fp16_infrastructure.agent_folder.layout.RUN_HISTORY`)::

    append_run(root, entry)            # one JSON line at the end
    history = load_history(root)       # oldest first, at most KEEP entries
    history.entries[-1].run.outcome    # 'success'

Bounded both ways. A line is at most LINE_BYTES (longer fields are cut before it is
written). When the file passes COMPACT_BYTES it is rewritten with its newest KEEP
lines by the folder's one atomic writer (a reader sees the old file or the new one);
the daemon runs one job per agent at a time and a foreground ``train`` is refused while
it owns the folder, so the file has one writer. A folder, FIFO or link at its name is
set aside before a write, as for every file of the folder. A read takes at most
READ_BYTES from the end of a regular file (a FIFO or a link is never opened for
reading), and a line that is not an entry (a torn last line after a kill, a hand edit)
is skipped and counted, never raised: the page says how many. Writing never fails a
run: an error is logged.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import RUN_HISTORY
from genesis_fp16_infrastructure.agent_folder.run_records import LiveMark, RunEntry

logger = logging.getLogger(__name__)

VERSION = 2  # 1: the marks of one column, before their maps (read and upgraded)
KEEP = 50  # entries kept after a compaction: the page shows 10, the charts all of them
LINE_BYTES = 4 * 1024
COMPACT_BYTES = 2 * KEEP * LINE_BYTES  # the file never grows past about this
READ_BYTES = RUN_HISTORY.limit  # COMPACT_BYTES + LINE_BYTES


@dataclass(frozen=True)
class RunHistory:
    """The entries read (oldest first) and the lines that were not entries."""

    entries: tuple[RunEntry, ...]
    unreadable: int = 0


def append_run(root: Path, entry: RunEntry) -> None:
    """Append ``entry`` to the history of the agent whose folder is ``root`` (compacted
    past COMPACT_BYTES); a failure is logged, never raised: the run's outcome stands."""
    path = RUN_HISTORY.at(root)
    line = encode_entry(entry)
    try:
        files.clear_way(path, RUN_HISTORY)  # a folder, FIFO or link at its name: set aside
        _append(path, line)
        if path.stat().st_size > COMPACT_BYTES:
            _compact(path)
    except (OSError, files.UnusableStateFile) as exc:  # the latter: replaced meanwhile
        logger.error(
            "cannot keep the run in the run history: the page will miss it: %s (%s)",
            path,
            getattr(exc, "strerror", None) or exc,
        )


def encode_entry(entry: RunEntry) -> bytes:
    """One JSON line of at most LINE_BYTES: the long texts go first when it is over."""
    line = msgspec.json.encode({"version": VERSION, **msgspec.to_builtins(entry)})
    if len(line) >= LINE_BYTES:  # 4 demotions, a reason and a drift line of 400 chars each
        trimmed = RunEntry(
            run=entry.run, gate=entry.gate, live=entry.live, loss_scale=entry.loss_scale
        )
        line = msgspec.json.encode({"version": VERSION, **msgspec.to_builtins(trimmed)})
    return line + b"\n"


def _append(path: Path, line: bytes) -> None:
    """One write with O_APPEND; a torn last line (a kill mid-write) gets its newline
    first, so that it stays one unreadable line and the new entry a line of its own."""
    # Read and write (pread checks the last byte); never blocking on a FIFO at its name.
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        if info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)


def _compact(path: Path) -> None:
    """Rewrite the file with its newest KEEP lines, atomically."""
    data = files.read_bytes(path, READ_BYTES, tail=True) or b""
    lines = [line for line in data.split(b"\n") if line.strip()][-KEEP:]
    # the folder's one atomic writer: a reader or a kill finds the old file or the new one
    files.write_bytes(path, RUN_HISTORY, b"".join(line + b"\n" for line in lines))


def load_history(root: Path, last: int = KEEP) -> RunHistory:
    """The ``last`` recent runs (at most KEEP) of the agent whose folder is ``root``,
    oldest first; no file: none. Only the file's last ``last`` lines are read, and
    counted when unreadable. Raises ``UnusableStateFile`` (one line) for a file that
    cannot be read."""
    last = max(1, min(last, KEEP))
    bound = min(READ_BYTES, (last + 1) * LINE_BYTES)
    data = files.read_bytes(RUN_HISTORY.at(root), bound, tail=True)
    if data is None:
        return RunHistory(())
    lines = [line for line in data.split(b"\n") if line.strip()][-last:]
    entries = tuple(entry for entry in map(decode_entry, lines) if entry is not None)
    return RunHistory(entries, unreadable=len(lines) - len(entries))


# The latest Unix time a history line may carry (9999-12-31): the page's clock shows it.
LATEST_TIME = 253_402_300_799.0
_PREFIX = b'{"version":%d,' % VERSION  # how encode_entry begins every line it writes
_DECODER = msgspec.json.Decoder(RunEntry)  # typed: no dict in between (the page's cost)
_PREFIX_1 = b'{"version":1,'


def _upgraded(data: Any) -> Any:
    """A version-1 entry's JSON with its marks as maps: the gate's scores of its one
    ``metric`` (None: no finite score) and the live figures beside the rest."""
    gate, live = (data.get(k) if isinstance(data, dict) else None for k in ("gate", "live"))
    if isinstance(gate, dict):
        metric = gate["primary"] = gate.get("metric")
        for side in ("candidate", "served"):
            gate[side] = {} if gate.get(side) is None else {metric: gate[side]}
    if isinstance(live, dict):
        data["live"] = msgspec.to_builtins(LiveMark.of(live))
    return data


def decode_entry(line: bytes) -> RunEntry | None:
    """One line's entry, or None when it is not one (torn, another version, edited:
    a line this module did not write as it writes them, or a version-1 line's upgrade)."""
    if len(line) > LINE_BYTES or not line.startswith((_PREFIX, _PREFIX_1)):
        return None
    try:
        if line.startswith(_PREFIX):
            entry = _DECODER.decode(line)  # its "version" is no field: msgspec skips it
        else:  # through a dict: only lines written before the maps pay for one
            entry = msgspec.convert(_upgraded(msgspec.json.decode(line)), RunEntry)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None  # UnicodeDecodeError: bytes that are not UTF-8 in a string
    run = entry.run
    # A time no clock can show (1e308 is valid JSON) is no run this module wrote.
    if not (0.0 <= run.finished_at <= LATEST_TIME and 0.0 <= run.duration_seconds <= LATEST_TIME):
        return None
    return entry
