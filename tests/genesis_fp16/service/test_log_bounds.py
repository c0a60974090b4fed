"""Every value of every log line the daemon writes is cut to a bound, and says so: our
structlog events and the library's standard-library records, in both formats."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import pytest
import structlog

from genesis_fp16.config.settings_sources import LOG_VALUE_BOUND
from genesis_fp16.service import logsetup

HUGE = 1_048_576  # the 1 MB value of issue 69
Lines = Callable[[str], Callable[[], list[str]]]


@pytest.fixture
def lines(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Lines:
    """``lines(format)``: logging configured as the daemon does; returns a reader of the
    lines written to stderr since."""
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # restored after
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))

    def configure(log_format: str) -> Callable[[], list[str]]:
        logsetup.configure_logging(log_format, "INFO")
        capfd.readouterr()
        return lambda: [line for line in capfd.readouterr().err.splitlines() if line.strip()]

    return configure


def test_a_huge_structlog_value_is_cut_and_said(lines: Lines) -> None:
    """A 1 MB field, a long list and a long message of our own: each cut to
    LOG_VALUE_BOUND characters with how many more there were; numbers and short values
    are kept as they are."""
    read = lines("json")
    structlog.get_logger("genesis_fp16.test").warning(
        "m" * 5_000, value="v" * HUGE, errors=["e" * 300] * 100, count=7, short="ok"
    )
    (line,) = read()
    assert len(line) < 5 * LOG_VALUE_BOUND
    record = json.loads(line)
    cut = f"… ({HUGE - LOG_VALUE_BOUND} more characters)"
    assert record["value"] == "v" * LOG_VALUE_BOUND + cut
    assert record["event"].startswith("m" * LOG_VALUE_BOUND + "… (4000 more characters)")
    assert record["errors"].startswith("['eee") and "more characters)" in record["errors"]
    assert (record["count"], record["short"]) == (7, "ok")


def test_a_library_record_is_cut_too(lines: Lines) -> None:
    """A standard-library record (the library logs through ``logging``) quoting 1 MB: its
    message is cut like ours; its exception's traceback keeps its start and its end."""
    read = lines("json")
    library = logging.getLogger("genesis_fp16_infrastructure.recipes.test")
    library.warning("dropped a row: %s", "r" * HUGE)
    try:
        raise ValueError("q" * HUGE + " the end")
    except ValueError:
        library.exception("could not read the pool")
    first, second = (json.loads(line) for line in read())
    assert first["logger"] == "genesis_fp16_infrastructure.recipes.test"
    assert first["event"].startswith("dropped a row: rrr")
    assert first["event"].endswith(f"({HUGE + 15 - LOG_VALUE_BOUND} more characters)")
    trace = second["exception"]
    assert len(trace) < logsetup.TRACEBACK_BOUND + 100
    assert trace.startswith("Traceback") and trace.endswith(" the end")
    assert "characters cut" in trace


def test_the_console_format_is_cut_too(lines: Lines) -> None:
    """On a terminal's format too: a 1 MB library message and a 1 MB exception message
    give lines of bounded length, each saying it was cut."""
    read = lines("console")
    library = logging.getLogger("genesis_fp16_infrastructure.test")
    library.error("bad value %s", "c" * HUGE)
    try:
        raise OSError("o" * HUGE)
    except OSError:
        structlog.get_logger("genesis_fp16.test").exception("failed")
    written = read()
    assert max(map(len, written)) <= logsetup.TRACEBACK_BOUND // 2 + 100
    assert sum(map(len, written)) < logsetup.TRACEBACK_BOUND + 5 * LOG_VALUE_BOUND
    assert "more characters)" in written[0] and any("characters cut" in w for w in written)
