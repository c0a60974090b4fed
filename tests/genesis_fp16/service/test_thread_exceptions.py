"""An exception that ends any thread is one structured log line, counted."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from genesis_fp16.service import logsetup


def test_a_threads_exception_is_one_json_line_and_counted(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library thread (here a plain one named like TensorBoard's writer) that raises:
    stderr holds one JSON line naming the thread and the error, no raw traceback, and the
    listener the daemon counts with is called once."""
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # restored after
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    counted: list[int] = []
    monkeypatch.setattr(logsetup, "_thread_exception_listeners", [lambda: counted.append(1)])
    logsetup.configure_logging("json", "INFO")
    capfd.readouterr()

    def boom() -> None:
        raise FileNotFoundError("events.out.tfevents: the tracking folder is gone")

    thread = threading.Thread(target=boom, name="EventFileWriter")
    thread.start()
    thread.join()
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    record = json.loads(lines[0])
    assert record["event"] == "thread raised an exception"
    assert record["thread_name"] == "EventFileWriter"
    assert record["error"].startswith("FileNotFoundError: events.out.tfevents")
    assert "Traceback" in record["exception"]
    assert counted == [1]
