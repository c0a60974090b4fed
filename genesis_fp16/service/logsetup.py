"""Logging for the daemon: structlog for our records, the same pipeline for the stdlib's.

``configure_logging`` is called once by a command, never at import. Records of a
training job carry ``agent`` and ``run_id`` because the job binds them with
``structlog.contextvars``; the standard-library records of APScheduler, torch and
``genesis_fp16_infrastructure.*`` go through structlog's ``ProcessorFormatter`` and pick up the same
context variables.

Every value of every line, the message included, is cut at ``LOG_VALUE_BOUND``
characters, its length said (a 1 MB value in an error, a library's message quoting a
whole file); a traceback or a stack at ``TRACEBACK_BOUND``, keeping its start and its end
(the frames and the exception's line). Only what is logged is cut, never the data.

>>> configure_logging("json", "INFO")
'json'
>>> structlog.get_logger("genesis_fp16").info("started", port=9464)  # doctest: +SKIP
{"port": 9464, "event": "started", "level": "info", "logger": "genesis_fp16", ...}
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from genesis_fp16.config.settings_sources import LOG_VALUE_BOUND, bounded

# A traceback is many lines, each a frame: cut at twenty values' worth, start and end kept.
TRACEBACK_BOUND = 20 * LOG_VALUE_BOUND
_MULTILINE = ("exception", "stack")
# Loggers that are chatty at INFO about each job execution; WARNING keeps the problems.
_QUIET = {"apscheduler.executors": logging.WARNING, "apscheduler.scheduler": logging.INFO}
# Called once per exception that ends a thread (the daemon counts them in a metric).
_thread_exception_listeners: list[Callable[[], None]] = []


def on_thread_exception(listener: Callable[[], None]) -> None:
    """Call ``listener()`` for every exception that ends a thread, after its log line."""
    _thread_exception_listeners.append(listener)


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook``: an exception that ends any thread (ours, or a library's,
    like TensorBoard's writer) is one structured log line with its traceback in it,
    never a raw traceback on stderr; counted."""
    if args.exc_type is SystemExit:
        return  # as the default hook: a thread that exits is no error
    thread = args.thread.name if args.thread is not None else "unknown"
    exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    structlog.get_logger("genesis_fp16.threads").error(
        "thread raised an exception",
        thread_name=thread,
        error=f"{args.exc_type.__name__}: {args.exc_value}",
        exc_info=exc_info if args.exc_value is not None else None,
    )
    for listener in _thread_exception_listeners:
        listener()


def choose_format(configured: str, stream: Any = None) -> str:
    """``json`` or ``console``: ``auto`` means console on a terminal, JSON otherwise."""
    if configured != "auto":
        return configured
    stream = stream if stream is not None else sys.stderr
    return "console" if getattr(stream, "isatty", lambda: False)() else "json"


def configure_logging(log_format: str = "auto", level: str = "INFO") -> str:
    """Route structlog and the standard library to stderr in one format; returns it."""
    chosen = choose_format(log_format)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if chosen == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # A string in both formats, so that it is cut like any value.
            structlog.processors.format_exc_info,
            _cut_values,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name, quiet in _QUIET.items():
        logging.getLogger(name).setLevel(max(quiet, logging.getLevelName(level)))
    scheduler = logging.getLogger("apscheduler.scheduler")
    if _drop_tentative not in scheduler.filters:
        scheduler.addFilter(_drop_tentative)
    logging.captureWarnings(True)
    threading.excepthook = _log_thread_exception
    return chosen


def _drop_tentative(record: logging.LogRecord) -> bool:
    """APScheduler's "Adding job tentatively": every job added before the scheduler
    starts, which then logs "Added job" for it anyway; nothing to act on."""
    return not str(record.msg).startswith("Adding job tentatively")


def _cut_values(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Each value of ``event`` (ours or a standard-library record's) at most
    ``LOG_VALUE_BOUND`` characters, a traceback at most ``TRACEBACK_BOUND``: a longer one
    is cut, and says by how much. Numbers and short values are left as they are; a long
    list or mapping becomes its text, cut.

    >>> cut = _cut_values(None, "info", {"event": "x" * 1005, "n": 7, "ok": [1]})
    >>> cut["event"][995:], cut["n"], cut["ok"]
    ('xxxxx… (5 more characters)', 7, [1])
    """
    for key, value in event.items():
        if value is None or isinstance(value, bool | int | float):
            continue
        text = value if isinstance(value, str) else str(value)
        if key in _MULTILINE and len(text) > TRACEBACK_BOUND:
            half = TRACEBACK_BOUND // 2
            cut = len(text) - 2 * half
            event[key] = f"{text[:half]}\n… ({cut} characters cut) …\n{text[-half:]}"
        elif key not in _MULTILINE and len(text) > LOG_VALUE_BOUND:
            event[key] = bounded(text, LOG_VALUE_BOUND)
    return event
