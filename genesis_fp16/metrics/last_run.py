"""Each agent's last run, kept in the state folder for ``genesis-fp16 status`` and ``/``.

The daemon's metrics count runs and the log line ``training run finished`` tells each
one, but neither survives in a form a later command can read: after a restart, or with
no daemon at all, "what happened last time, and why" was in a log a newcomer may not
keep. So the step that records a run (the daemon's genesis_fp16/jobs/recording.py, and a
foreground ``train``, both through genesis_fp16/metrics/run_history.py's ``save_run``,
which also appends the run history) writes ``<state_dir>/agents/<agent>/last_run.json``,
atomically (the old record or the new one, never half of one)::

    save_last_run(paths, LastRun("success", "fp32", "fp32", 1_763_900_000.0, 4.2,
                                 "promoted: the first model", "daemon", 120))
    load_last_run(paths)  # LastRun(outcome='success', ...); None when no run was recorded

Writing it never fails a run: an error is logged and the run's outcome stands.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec
import structlog

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import LAST_RUN
from genesis_fp16_infrastructure.contract import TrainResult
from genesis_fp16_infrastructure.training.precision.precision_names import (
    PrecisionName,
    RequestedName,
)

log = structlog.get_logger("genesis_fp16.last_run")

FILE_NAME = LAST_RUN.name
VERSION = 1
# A record is a few hundred bytes; the reason is cut to REASON_CHARS.
MAX_BYTES = LAST_RUN.limit
REASON_CHARS = 400
# A measured auto on CUDA names six rows (three precisions, eager and captured).
PRECISION_REASON_CHARS = 1000


class LastRunUnreadable(ValueError):
    """The agent's last-run file exists but is not a record: one line naming it."""


@dataclass(frozen=True)
class LastRun:
    """One finished run: its outcome (``success``, ``up_to_date``, ``failed``,
    ``stopped``), the precision it trained in and was asked for, when it ended (Unix
    time), how long it took, why it ended so (one line), who ran it (``daemon`` or
    ``train``) and its optimizer steps."""

    outcome: str
    precision: PrecisionName | None
    precision_requested: RequestedName | None
    finished_at: float
    duration_seconds: float
    reason: str
    source: str
    steps: int | None
    eval: dict[str, float] | None = None  # the run's eval figures (`model list` shows them)
    # Why it ran in that precision (a measured auto: every timed precision, its spread).
    precision_reason: str = ""


def last_run_path(paths: AgentPaths) -> Path:
    return paths.root / FILE_NAME


def save_last_run(paths: AgentPaths, record: LastRun) -> None:
    """Write ``record`` as the agent's last run; a failure is logged, never raised."""
    path = last_run_path(paths)
    try:
        files.write_json(path, LAST_RUN, {"version": VERSION, **asdict(record)})
    except OSError as exc:
        log.error(
            "cannot keep the last run's record: `status` will show an older one",
            path=str(path),
            error=exc.strerror or str(exc),
        )


def load_last_run(paths: AgentPaths) -> LastRun | None:
    """The agent's last run, or None when none was recorded; :class:`LastRunUnreadable`
    for a file that is not a record (a FIFO or a huge file is never read whole)."""
    path = last_run_path(paths)
    try:
        data = files.read_json(path, LAST_RUN)
    except files.UnusableStateFile as exc:
        raise LastRunUnreadable(str(exc)) from None
    if data is None:
        return None
    try:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} record")
        data.pop("version")
        return msgspec.convert(data, LastRun)
    except (ValueError, msgspec.ValidationError) as exc:
        raise LastRunUnreadable(f"{path}: {exc}") from None


def from_result(
    result: TrainResult, duration: float, source: str, when: float | None = None
) -> LastRun:
    """The record of a run that returned a result."""
    return LastRun(
        outcome=result.outcome,
        precision=result.precision_used,
        precision_requested=result.precision_requested,
        finished_at=time.time() if when is None else when,
        duration_seconds=round(duration, 3),
        reason=_short(result_reason(result)),
        source=source,
        steps=result.steps,
        eval={
            k: float(v)
            for k, v in list(result.eval.items())[:12]
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        }
        or None,
        precision_reason=_short(result.precision_reason, PRECISION_REASON_CHARS),
    )


def from_error(outcome: str, reason: str, duration: float, source: str) -> LastRun:
    """The record of a run that ended without a result (failed, or stopped as it started)."""
    return LastRun(outcome, None, None, time.time(), round(duration, 3), _short(reason), source, 0)


def result_reason(result: TrainResult) -> str:
    """Why the run ended as it did, in one line: the learning failure, the gate's verdict,
    why the model was up to date, or that it trained."""
    if result.failure is not None:
        return f"learned nothing ({result.failure}): {result.failure_detail}".rstrip(": ")
    if result.up_to_date:
        why = result.up_to_date_against
        return f"up to date: {why}" if why else "up to date"
    if result.gate is not None:
        return f"{result.gate.outcome}: {result.gate.reason or 'no reason given'}"
    stopped = " (stopped early)" if result.stopped_early else ""
    return f"trained {result.steps} steps in {result.precision_used}{stopped}"


def _short(text: str, limit: int = REASON_CHARS) -> str:
    line = " ".join(str(text).split())  # one line: a traceback's newlines would break it
    return line if len(line) <= limit else line[: limit - 1] + "…"
