"""A process's standard streams write whole lines, whatever ``PYTHONUNBUFFERED`` says.

Under ``PYTHONUNBUFFERED=1`` (or ``python -u``) Python gives ``sys.stdout`` and
``sys.stderr`` no buffer: each text write goes to a raw file whose ``write`` may take part
of its bytes (a write into a full pipe that a signal interrupts returns what it wrote,
write(2)), and the text layer does not look at the count (CPython gh-85393). The rest of
the line is lost. The daemon's children speak to it in lines on their stdout and stderr
(a run's result, its progress, its log records), a handler runs for SIGTERM, SIGINT and
SIGHUP, and a tracer (py-spy, strace) interrupts writes too: on this project's 2-core host,
a child printing 5,000-character lines into a pipe read slowly, signalled every 0.5 ms,
lost part of 31 lines of 59 unbuffered and none buffered.

:func:`whole_lines` gives such a stream a buffer again, flushed at each line (and each
``\\r``), so that what a command writes still leaves at once: a buffered writer writes
the rest of a part-taken write. A stream that has a buffer, or that is not the one Python
made at start-up (a test's capture), is left as it is.
"""

from __future__ import annotations

import io
import sys


def whole_lines() -> None:
    """``sys.stdout`` and ``sys.stderr``, where they have no buffer, made anew on the same
    descriptors through a buffer flushed at each line (module docstring)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not getattr(sys, f"__{name}__") or not isinstance(stream, io.TextIOWrapper):
            continue  # a stream a caller put there (a test's capture), or none
        if not isinstance(stream.buffer, io.FileIO):
            continue  # a buffer already
        stream.flush()
        raw = io.FileIO(stream.fileno(), "w", closefd=False)  # its own: the old one closes
        wrapped = io.TextIOWrapper(
            io.BufferedWriter(raw),
            encoding=stream.encoding,
            errors=stream.errors,
            line_buffering=True,
        )
        setattr(sys, name, wrapped)
