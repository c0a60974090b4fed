"""A process's standard streams write whole lines under ``PYTHONUNBUFFERED=1``
(``genesis_fp16.service.std_streams``), and still write each line at once."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

# A child that prints COUNT JSON lines of LINE characters and more into its stdout, with a
# no-op handler for the signals its reader sends it meanwhile (``whole`` calls
# whole_lines first, as the CLI and the run worker do)
_PRINTER = """
import json, signal, sys
from genesis_fp16.service.std_streams import whole_lines
if {whole}:
    whole_lines()
signal.signal(signal.SIGUSR1, lambda *_: None)
for i in range({count}):
    print(json.dumps({{"i": i, "pad": "x" * ({line} + i)}}))
"""


def _signalled_lines(whole: bool, count: int = 40, line: int = 20_000) -> list[str]:
    """The lines the child printed, read a little at a time (its pipe full) while it is
    signalled every 0.5 ms, under PYTHONUNBUFFERED=1."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PRINTER.format(whole=whole, count=count, line=line)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    done = threading.Event()

    def pester() -> None:
        while not done.is_set() and child.poll() is None:
            child.send_signal(signal.SIGUSR1)
            time.sleep(0.0005)

    chunks = [os.read(child.stdout.fileno(), 4096)]  # its handler is set: it printed
    threading.Thread(target=pester, daemon=True).start()
    try:
        while chunk := os.read(child.stdout.fileno(), 4096):
            chunks.append(chunk)
            time.sleep(0.0005)
    finally:
        done.set()
        child.wait(timeout=60)
        child.stdout.close()
    return b"".join(chunks).decode().splitlines()


def test_lines_written_through_signals_arrive_whole() -> None:
    """Every line whole and in order, however often its writes were interrupted."""
    lines = _signalled_lines(whole=True)
    assert [json.loads(line)["i"] for line in lines] == list(range(40))
    assert all(len(json.loads(line)["pad"]) == 20_000 + i for i, line in enumerate(lines))


class _TakesPart(io.RawIOBase):
    """A raw file each of whose writes takes 100 bytes at most, as a pipe's interrupted
    write does."""

    def __init__(self) -> None:
        self.taken = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        part = bytes(data[:100])
        self.taken += part
        return len(part)


def test_what_it_mends_an_unbuffered_stream_loses_the_rest_of_a_line() -> None:
    """The premise, without signals: over a raw file that takes part of a write, the text
    layer Python makes under PYTHONUNBUFFERED (written through, no buffer) keeps what the
    file took and loses the rest; the buffered one :func:`whole_lines` makes writes every
    byte."""
    line = "x" * 1_000 + "\n"
    unbuffered = _TakesPart()
    io.TextIOWrapper(unbuffered, write_through=True).write(line)
    assert len(unbuffered.taken) == 100
    buffered = _TakesPart()
    stream = io.TextIOWrapper(io.BufferedWriter(buffered), line_buffering=True)
    stream.write(line)
    assert bytes(buffered.taken) == line.encode()


def test_a_line_leaves_at_once() -> None:
    """Buffered again, a line is still written when it is printed, not when the process
    ends: the child prints one line and waits for its stdin."""
    code = (
        "import sys\n"
        "from genesis_fp16.service.std_streams import whole_lines\n"
        "whole_lines()\n"
        "print('ready')\n"
        "print('said', file=sys.stderr)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None and child.stderr is not None and child.stdin is not None
    try:
        assert child.stdout.readline() == b"ready\n"
        assert child.stderr.readline() == b"said\n"
        assert child.poll() is None  # written while it runs
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()
        child.stderr.close()


def test_a_buffered_stream_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a stream with no buffer is made anew; a caller's own stream stays."""
    from genesis_fp16.service import std_streams

    class Own:
        pass

    own = Own()
    monkeypatch.setattr(sys, "stdout", own)
    std_streams.whole_lines()
    assert sys.stdout is own
