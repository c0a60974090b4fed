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
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import structlog

from genesis_fp16.config.settings_sources import LOG_VALUE_BOUND, bounded

# A traceback is many lines, each a frame: cut at twenty values' worth, start and end kept.
TRACEBACK_BOUND = 20 * LOG_VALUE_BOUND
# A list or mapping stays structured (a JSON log's reader reads its fields): its strings
# cut at LOG_VALUE_BOUND, at most LOG_ITEMS_BOUND items a level, LOG_DEPTH_BOUND levels;
# one whose text is still over LOG_CONTAINER_BOUND characters becomes its text, cut.
LOG_ITEMS_BOUND = 100
LOG_DEPTH_BOUND = 4
LOG_CONTAINER_BOUND = 20 * LOG_VALUE_BOUND
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


def configure_logging(log_format: str = "auto", level: str = "INFO") -> str:
    """Route structlog and the standard library to stderr in one format; returns it."""
    tty = getattr(sys.stderr, "isatty", lambda: False)()
    chosen = log_format if log_format != "auto" else "console" if tty else "json"  # auto: by tty
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
    # In place: a logger already used (and cached) before a second call, by an in-process
    # caller, follows the new pipeline rather than the list it cached.
    processors = structlog.get_config()["processors"]
    processors[:] = [
        structlog.stdlib.filter_by_level,
        *shared,
        structlog.processors.StackInfoRenderer(),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ]
    structlog.configure(
        processors=processors,
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
    is cut, and says by how much. Numbers and short values are left as they are; a list
    or mapping keeps its structure (a JSON log's reader reads its fields), its strings cut
    and past ``LOG_ITEMS_BOUND`` items the rest counted.

    >>> cut = _cut_values(None, "info", {"event": "x" * 1005, "n": 7, "ok": [1]})
    >>> cut["event"][995:], cut["n"], cut["ok"]
    ('xxxxx… (5 more characters)', 7, [1])
    >>> gate = {"reason": "y" * 1002, "ids": list(range(102))}
    >>> kept = _cut_values(None, "info", {"gate": gate})["gate"]
    >>> kept["ids"][-1], len(kept["reason"])
    ('… (2 more items)', 1021)
    """
    for key, value in event.items():
        if key in _MULTILINE:
            text = value if isinstance(value, str) else str(value)
            if len(text) > TRACEBACK_BOUND:
                half = TRACEBACK_BOUND // 2
                cut = len(text) - 2 * half
                event[key] = f"{text[:half]}\n… ({cut} characters cut) …\n{text[-half:]}"
        else:
            kept = _bounded_value(value)
            if isinstance(kept, dict | list) and len(text := str(kept)) > LOG_CONTAINER_BOUND:
                kept = bounded(text, LOG_VALUE_BOUND)
            event[key] = kept
    return event


def _bounded_value(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it at most ``LOG_VALUE_BOUND`` characters, every
    list or mapping at most ``LOG_ITEMS_BOUND`` items (the rest counted), nested at most
    ``LOG_DEPTH_BOUND`` deep (deeper: its text, cut); numbers as they are."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping) and depth < LOG_DEPTH_BOUND:
        items = list(value.items())
        kept = {str(k): _bounded_value(v, depth + 1) for k, v in items[:LOG_ITEMS_BOUND]}
        if len(items) > LOG_ITEMS_BOUND:
            kept["…"] = f"{len(items) - LOG_ITEMS_BOUND} more items"
        return kept
    if isinstance(value, list | tuple) and depth < LOG_DEPTH_BOUND:
        kept_items = [_bounded_value(v, depth + 1) for v in value[:LOG_ITEMS_BOUND]]
        if len(value) > LOG_ITEMS_BOUND:
            kept_items.append(f"… ({len(value) - LOG_ITEMS_BOUND} more items)")
        return kept_items
    text = value if isinstance(value, str) else str(value)
    return bounded(text, LOG_VALUE_BOUND) if len(text) > LOG_VALUE_BOUND else value
