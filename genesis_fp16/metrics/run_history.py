"""Each agent's recent runs, kept in the state folder for the status page's memory.

``last_run.json`` says what the last run did; the page also answers "lately": the last
runs with their outcome, precision and why, the gate's scores of each candidate, the
loss scale and skipped steps, the guard's demotions, the quarantined records, the drift
warnings and the live watch's figures. So the step that records a run
(genesis_fp16/jobs/recording.py, and a foreground ``train``) also appends one line to
``<state_dir>/agents/<agent>/run_history.jsonl``::

    save_run(paths, record, result)    # last_run.json, and one JSON line at the end
    history = load_history(paths)      # oldest first, at most KEEP entries
    history.entries[-1].run.outcome    # 'success'

Bounded both ways. A line is at most LINE_BYTES (longer fields are cut before it is
written). When the file passes COMPACT_BYTES it is rewritten with its newest KEEP
lines, atomically (a reader sees the old file or the new one); the daemon runs one job
per agent at a time and a foreground ``train`` is refused while it owns the folder, so
the file has one writer. A read takes at most READ_BYTES from the end of a regular
file (a FIFO or a link is never opened for reading), and a line that is not an entry
(a torn last line after a kill, a hand edit) is skipped and counted, never raised:
the page says how many. Writing never fails a run: an error is logged.
"""

from __future__ import annotations

import math
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import structlog

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.metrics.last_run import LastRun, from_error, from_result, save_last_run
from genesis_fp16_infrastructure.contract import TrainResult
from genesis_fp16_infrastructure.contract.reports import GateReport, ScoresOn

log = structlog.get_logger("genesis_fp16.run_history")

FILE_NAME = "run_history.jsonl"
VERSION = 1
KEEP = 50  # entries kept after a compaction: the page shows 10, the charts all of them
LINE_BYTES = 4 * 1024
COMPACT_BYTES = 2 * KEEP * LINE_BYTES  # the file never grows past about this
READ_BYTES = COMPACT_BYTES + LINE_BYTES
TEXT_CHARS = 160  # a score's name, a model's id, a drift warning


class GateMark(msgspec.Struct, frozen=True):
    """The gate's verdict on the run's candidate: the outcome, the two models' ids and
    their scores on the gate's first set (``set``: ``current``, the run's own records,
    for the built-in gates; ``metric``: ``auc``, or a judged agent's ``loss``; None
    where a side has no finite score). The set that decided is in the run's reason."""

    outcome: str
    metric: str | None = None
    set: str | None = None
    candidate: float | None = None
    served: float | None = None
    candidate_id: str | None = None
    served_id: str | None = None


class LiveMark(msgspec.Struct, frozen=True):
    """The live watch's running figures after the run: the mean difference (served minus
    predecessor, in the watch's units), its anytime-valid bounds, the margin, the records
    scored, and whether it found a regression and rolled back."""

    difference: float | None
    lower: float | None
    upper: float | None
    margin: float | None
    records: int
    regression: bool
    rolled_back: bool

    @classmethod
    def of(cls, live: Mapping[str, Any]) -> LiveMark:
        """The figures of a live watch's JSON (a run's result or the served entry, which
        a hand may have edited): what is not a finite number, a count or true is left out."""
        records = live.get("records")
        return cls(
            difference=_finite(live.get("difference")),
            lower=_finite(live.get("lower")),
            upper=_finite(live.get("upper")),
            margin=_finite(live.get("margin")),
            records=records if isinstance(records, int) and not isinstance(records, bool) else 0,
            regression=live.get("regression") is True,
            rolled_back=live.get("rolled_back") is True,
        )


class RunEntry(msgspec.Struct, frozen=True):
    """One finished run as the history keeps it: its last-run record (why it trained in
    its precision too), its loss scale and skipped steps, the guard's demotions (one line
    each), the records it quarantined, the drift warning (None: none flagged), the gate's
    verdict and the live watch's figures."""

    run: LastRun
    loss_scale: float | None = None
    skipped_steps: int | None = None
    demotions: tuple[str, ...] = ()
    quarantined: int | None = None
    drift: str | None = None
    gate: GateMark | None = None
    live: LiveMark | None = None


@dataclass(frozen=True)
class RunHistory:
    """The entries read (oldest first) and the lines that were not entries."""

    entries: tuple[RunEntry, ...]
    unreadable: int = 0


def history_path(paths: AgentPaths) -> Path:
    return paths.root / FILE_NAME


def entry_of(result: TrainResult | None, record: LastRun) -> RunEntry:
    """The history's entry of a run: ``record`` (its last-run record), with what
    ``result`` reports beyond it (None: the run ended without a result)."""
    if result is None:
        return RunEntry(record)
    demotions = tuple(
        _cut(f"{d.from_} to {d.to} at step {d.step}: {d.reason}") for d in result.demotions[:4]
    )
    drift = result.drift
    return RunEntry(
        run=record,
        loss_scale=_finite(result.loss_scale),
        skipped_steps=result.skipped_steps,
        demotions=demotions,
        quarantined=result.quarantined,
        drift=_drift_warning(drift.flagged, drift.label_shift_flagged) if drift else None,
        gate=None if result.gate is None or result.up_to_date else gate_mark(result.gate),
        live=None if result.live is None else LiveMark.of(result.live.to_json()),
    )


def gate_mark(gate: GateReport) -> GateMark:
    """The gate's verdict as a mark: both models' scores on its first set."""
    metric = score_name(gate.candidate) or score_name(gate.served)
    named = gate.candidate or gate.served
    return GateMark(
        outcome=gate.outcome,
        metric=metric,
        set=None if named is None else _text(named.name),
        candidate=score_of(gate.candidate, metric),
        served=score_of(gate.served, metric),
        candidate_id=_text(gate.candidate_id),
        served_id=_text(gate.served_id),
    )


def score_name(scores: ScoresOn | dict[str, Any] | None) -> str | None:
    """Which score a model's figures are told by: a judged agent's ``loss`` where it
    has one (its AUC is not a number), else ``auc``, else ``log_loss``; None: none."""
    if scores is None:
        return None
    get = scores.get if isinstance(scores, dict) else lambda name: getattr(scores, name, None)
    for name in ("loss", "auc", "log_loss"):
        if _finite(get(name)) is not None:
            return name
    return None


def score_of(scores: ScoresOn | dict[str, Any] | None, name: str | None) -> float | None:
    """``scores``' figure ``name`` when it is a finite number, else None."""
    if scores is None or name is None:
        return None
    value = scores.get(name) if isinstance(scores, dict) else getattr(scores, name, None)
    return _finite(value)


def _drift_warning(flagged: tuple[str, ...], label_shift: bool) -> str | None:
    if not flagged and not label_shift:
        return None
    what = [f"features {', '.join(flagged[:8])}"] if flagged else []
    what += ["the success rate"] if label_shift else []
    return _cut("drift flagged: " + " and ".join(what))


def save_run(paths: AgentPaths, record: LastRun, result: TrainResult | None = None) -> None:
    """Keep a finished run: ``record`` as the agent's last run, and its entry (with what
    ``result`` reports) at the end of its history. Never raises for the disk."""
    save_last_run(paths, record)
    append_run(paths, entry_of(result, record))


def record_foreground(
    checkpoint_dir: Path, result: TrainResult | None, error: str, started: float
) -> None:
    """A foreground ``train``'s record, when it trained the state folder's model (its
    checkpoints in ``<state_dir>/agents/<agent>/checkpoints``): ``result``, or the
    one-line ``error`` it ended with. ``started``: ``time.monotonic()`` at its start."""
    duration = time.monotonic() - started
    paths = AgentPaths(Path(checkpoint_dir).parent)
    if result is not None:
        save_run(paths, from_result(result, duration, "train"), result)
    else:
        save_run(paths, from_error("failed", error, duration, "train"))


def append_run(paths: AgentPaths, entry: RunEntry) -> None:
    """Append ``entry`` to the agent's history (compacted past COMPACT_BYTES); a failure
    is logged, never raised: the run's outcome stands."""
    path = history_path(paths)
    line = encode_entry(entry)
    try:
        _append(path, line)
        if path.stat().st_size > COMPACT_BYTES:
            _compact(path)
    except OSError as exc:
        log.error(
            "cannot keep the run in the run history: the page will miss it",
            path=str(path),
            error=exc.strerror or str(exc),
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
    data = _tail(path, READ_BYTES)
    lines = [line for line in data.split(b"\n") if line.strip()][-KEEP:]
    kept = b"".join(line + b"\n" for line in lines)
    # A temp file beside it, synced, renamed over it: a reader or a kill finds the old
    # file or the new one. (Not the library's writer: the daemon's seam stays as narrow.)
    fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=".jsonl", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def load_history(paths: AgentPaths, last: int = KEEP) -> RunHistory:
    """The agent's ``last`` recent runs (at most KEEP), oldest first; no file: none.
    Only the file's last ``last`` lines are read, and counted when unreadable. Raises
    :class:`HistoryUnreadable` (one line) for a file that cannot be read."""
    path = history_path(paths)
    last = max(1, min(last, KEEP))
    try:
        data = _tail(path, min(READ_BYTES, (last + 1) * LINE_BYTES))
    except FileNotFoundError:
        return RunHistory(())
    except OSError as exc:
        raise HistoryUnreadable(f"{path}: {exc.strerror or exc}") from None
    entries, bad = [], 0
    for line in [line for line in data.split(b"\n") if line.strip()][-last:]:
        entry = decode_entry(line)
        if entry is None:
            bad += 1
        else:
            entries.append(entry)
    return RunHistory(tuple(entries), bad)


class HistoryUnreadable(ValueError):
    """The history file exists but cannot be read: one line naming it."""


# The latest Unix time a history line may carry (9999-12-31): the page's clock shows it.
LATEST_TIME = 253_402_300_799.0
_PREFIX = b'{"version":%d,' % VERSION  # how encode_entry begins every line it writes
_DECODER = msgspec.json.Decoder(RunEntry)  # typed: no dict in between (the page's cost)


def decode_entry(line: bytes) -> RunEntry | None:
    """One line's entry, or None when it is not one (torn, another version, edited:
    a line this module did not write as it writes them)."""
    if len(line) > LINE_BYTES or not line.startswith(_PREFIX):
        return None
    try:
        entry = _DECODER.decode(line)  # its "version" is no field: msgspec skips it
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None  # UnicodeDecodeError: bytes that are not UTF-8 in a string
    run = entry.run
    # A time no clock can show (1e308 is valid JSON) is no run this module wrote.
    if not (0.0 <= run.finished_at <= LATEST_TIME and 0.0 <= run.duration_seconds <= LATEST_TIME):
        return None
    return entry


def _tail(path: Path, limit: int) -> bytes:
    """The last lines of the regular file ``path`` within ``limit`` bytes (a line cut
    by the limit left out)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise OSError(0, kind)
        start = max(0, info.st_size - limit)
        data = os.pread(fd, info.st_size - start, start)
    finally:
        os.close(fd)
    return data.split(b"\n", 1)[-1] if start else data


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str | None:
    return None if value is None else _cut(str(value))


def _cut(text: str, chars: int = TEXT_CHARS) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= chars else line[: chars - 1] + "…"
