"""A run's child's stderr relayed through the daemon's logging, line by line, in order.

Each rank's stderr carries its JSON log records, torchrun's own text and any traceback;
:func:`relay_stderr` re-emits each through the ``genesis_fp16.torchrun`` logger, so that
every line carries the job's ``agent`` and ``run_id`` (the launcher runs it in a thread
with the job's context).
"""

from __future__ import annotations

import json
import logging
import re
from typing import IO, Any

import structlog

log = logging.getLogger("genesis_fp16.launcher")
relay_log = structlog.get_logger("genesis_fp16.torchrun")

_LEVELS = logging.getLevelNamesMapping() | {"EXCEPTION": logging.ERROR}
# A plain stderr line at warning: error words, or torchrun's own W/E/F records
# ("W0115 10:00:00.123 4242 torch/distributed/run.py:792] ...").
_LOOKS_LIKE_ERROR = re.compile(r"(?i:error|exception|traceback|fail|fatal)|^[WEF]\d{4} ")


def relay_stderr(stream: IO[str]) -> None:
    """Re-emit each line of ``stream`` through the ``genesis_fp16.torchrun`` logger, in order.

    A JSON object with an ``event`` is a rank's log record: it keeps its level and fields,
    its own ``timestamp`` and ``logger`` become ``child_timestamp`` and ``child_logger``.
    Any other line is one ``torchrun stderr`` record with ``line=``: at warning when it
    looks like an error (or belongs to a traceback), at info otherwise; blank lines are
    dropped.

    >>> import io, structlog.testing
    >>> with structlog.testing.capture_logs() as logs:  # the daemon's: in a thread, to EOF
    ...     relay_stderr(io.StringIO('{"event": "step 3", "logger": "x"}\\nOSError: full\\n'))
    >>> [(r["event"], r["log_level"], r.get("child_logger")) for r in logs]
    [('step 3', 'info', 'x'), ('torchrun stderr', 'warning', None)]
    """
    in_traceback = False
    for raw in stream:
        line = raw.rstrip("\n")
        if not line.strip():  # a blank record says nothing (the train command ends with one)
            continue
        try:
            record = _json_record(line)
            if record is not None:
                _relay_record(record)
            else:
                in_traceback = _relay_line(line, in_traceback)
        except Exception:  # one odd line must not stop the draining
            log.exception("could not relay a line of torchrun's stderr: %r", line)


def _json_record(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("event"), str) else None


def _relay_record(record: dict[str, Any]) -> None:
    fields = dict(record)
    event = fields.pop("event")
    level = _LEVELS.get(str(fields.pop("level", "info")).upper(), logging.INFO)
    for key in ("timestamp", "logger"):  # ours would overwrite them
        if key in fields:
            fields[f"child_{key}"] = fields.pop(key)
    relay_log.log(level, event, **fields)


def _relay_line(line: str, in_traceback: bool) -> bool:
    """Log one plain line; return whether the next line may still be in a traceback."""
    error = in_traceback or _LOOKS_LIKE_ERROR.search(line) is not None
    relay_log.log(logging.WARNING if error else logging.INFO, "torchrun stderr", line=line)
    # A traceback's frames are indented; its last line (the exception) is not.
    return line.startswith("Traceback") or (in_traceback and line[:1].isspace())
