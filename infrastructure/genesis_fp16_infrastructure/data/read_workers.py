"""A read's helper processes: new records parsed on several cores (issue 90, item 1).

A run reads what is new in its data files: at 25,000 new records, about half a second of
one core, most of it hashing and writing each record's columns (``data.batch_block``),
which holds Python's lock. The read hands stretches of a file's records (a
:class:`~genesis_fp16_infrastructure.data.batch_decode.Unit`) to helper processes, reads
the first stretch itself meanwhile, and joins their column blocks in file order: the
pool, the record cache's entries and the quarantine are those of a read without helpers,
byte for byte.

* **Started once, kept.** :func:`workers` starts ``count`` helpers the first time a read
  asks for them (``python -m genesis_fp16_infrastructure.data.read_workers``: msgspec and
  numpy, no torch; about 80 MB at its peak in a daemon run, a fifth of a second to
  start), and keeps them for the process's next reads (a resident run process's next
  runs). A read about to parse ``START_BYTES`` or more of a file (new or changed: what
  the record cache holds is not parsed) starts them before it splits the file, so that
  they are up when it shares it; a read that parses less starts none, and a file of
  fewer than two ``MIN_UNIT_RECORDS`` units is parsed alone.
* **Counted where they run.** They are children of the reading process: a run's memory,
  as the daemon's supervision sums it, includes theirs, and a run killed kills them.
* **They die with it.** A helper reads its work on its stdin: when the reading process
  ends, however it ends, that stdin ends and the helper exits.
* **Never trusted to finish.** A helper that exits, answers what is not blocks (bytes
  msgspec refuses, text that is no UTF-8), blocks of another count of records than the
  unit it was sent (a defect, or its stream out of step), or takes past its deadline is
  stopped, and the read reads that unit itself (a warning, and
  ``FAILED``); the next read starts helpers afresh. A unit the fast path does not vouch
  for (a record to quarantine) comes back as None and is read by the reading process,
  record by record, as it is without helpers. A unit a helper fails on (an exception
  in its decoding: a defect, not bad input, which the fast path refuses) comes back as
  the exception's line: the reader logs it, counts it in ``FAILED`` and reads the unit;
  the helper goes on with its next.

What a read and its helpers say to each other, and a helper's loop, are
:mod:`.helper_messages`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path
from queue import SimpleQueue
from typing import IO

from genesis_fp16_infrastructure.data.batch_decode import Unit, records_in, unit_blocks
from genesis_fp16_infrastructure.data.file_records import RecordBlock
from genesis_fp16_infrastructure.data.helper_messages import (
    Failed,
    checked,
    read_reply,
    send_unit,
    serve,
)

logger = logging.getLogger(__name__)

# Fewest records a unit holds: below two of them a read shares nothing.
MIN_UNIT_RECORDS = 2_048
# A read about to parse this much of new or changed files starts its helpers first (two
# units of generated records are ~6 MB): they start while it splits them.
START_BYTES = 4 * 2**20
# Units a read makes for each process at most: each takes the next when done with one.
UNITS_EACH = 4
# Units sent to a helper before its first answer: 2 read 25,000 records on 2 cores in
# 264-271 ms against 289-298 with 1 (3 gain nothing: a unit queued is a unit this
# process may wait for at the end); never more than a process's share of the round.
AHEAD = 2
# How long a helper may take past the reading process's own last unit, at least, and in
# multiples of its slowest unit (a loaded host slows helpers as much as the reader).
DEADLINE_SECONDS = 30.0
DEADLINE_FACTOR = 10.0
# Units a helper failed to read (it exited, answered nonsense, or ran past its deadline).
FAILED: Counter[str] = Counter()
# Units read by a helper ("helper") or by the reading process ("reader") on the fast path.
UNITS: Counter[str] = Counter()

# A helper's command (-P: the run's directory is not on its path, so nothing there
# shadows a module it imports).
HELPER = [sys.executable, "-P", "-m", __name__]


class Workers:
    """``count`` helper processes, started at once (:func:`workers`)."""

    def __init__(self, count: int) -> None:
        self.count, self.owner = count, os.getpid()
        # No descriptor of the run's: its stdout and stderr (a resident run process's
        # are its current run's) reach their end when the run ends, not when a helper
        # kept for the next runs does. A helper says nothing; a failure is the reader's
        # to log (its units read there).
        self.procs = [
            subprocess.Popen(
                HELPER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            for _ in range(count)
        ]
        for proc in self.procs:
            for stream in (proc.stdin, proc.stdout):
                _widen(stream)

    def alive(self) -> bool:
        return all(proc.poll() is None for proc in self.procs)

    def read(self, units: Iterable[Unit]) -> Generator[list[RecordBlock] | None, None, None]:
        """Each of ``units``' blocks, in their order, or None where the fast path refused
        the unit or a helper failed (then stopped; the caller reads that unit), each
        yielded once it and every unit before it are read. ``units`` is taken as it goes
        (a file's split runs meanwhile): the helpers and this process each take the next
        unit when done with one, so that a helper slower than this process (a colder
        heap, a busier core) holds up no more than the units it has. Close what it
        returns (``contextlib.closing``) if it may be left before its end."""
        return _Round(self.procs, units).run()

    def close(self) -> None:
        """Stop every helper (its stdin closed; killed if it does not end at once)."""
        for proc in self.procs:
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class _Round:
    """One read's units shared out as they come. Each helper has up to ``AHEAD`` of them
    at a time, so that it starts its next the moment it answers one (this process looks
    for answers only between its own units); one sending thread a helper writes them in
    the order given, in which its answers come back (a helper still starting takes them
    when up). At most ``held_at_once`` units are taken and not yet yielded: past that,
    this process waits for the oldest, not for more of the file."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]], units: Iterable[Unit]) -> None:
        self.units = iter(units)
        self.taken = 0  # units taken from ``units``; each one's index is its place
        self.results: dict[int, list[RecordBlock] | None] = {}  # read, not yet yielded
        self.out = 0  # the next unit to yield
        self.procs = {_fd(proc): proc for proc in procs}
        self.given: dict[int, deque[int]] = {}  # each helper's units, in the order sent
        self.sizes: dict[int, int | None] = {}  # the records of each unit a helper holds
        self.outboxes = {fd: SimpleQueue[Unit | None]() for fd in self.procs}
        self.most = held_at_once(len(procs))
        self.slowest = 0.0  # seconds, of this process's units

    def run(self) -> Generator[list[RecordBlock] | None, None, None]:
        senders = [
            threading.Thread(target=_sending, args=(self.procs[fd].stdin, box), daemon=True)
            for fd, box in self.outboxes.items()
        ]
        for sender in senders:
            sender.start()
        try:
            # One unit each to start: of two units, one is this process's (both given
            # ahead, it had waited for both); topped up to AHEAD after its first
            for fd in self.procs:
                self._give(fd)
            while self._read_next():
                self._take_ready()
                yield from self._ready()
            self._wait(time.monotonic() + self._patience())
            yield from self._ready()
        finally:
            for fd in list(self.given):  # left midway: answers no later read may take
                self._stop(fd)
            for box in self.outboxes.values():
                box.put(None)
            for sender in senders:  # a killed helper's writes fail at once
                sender.join()

    def _read_next(self) -> bool:
        """This process's next unit read, or, with ``most`` units held, the oldest
        helper's answered; False when every unit is taken."""
        if self.taken - self.out >= self.most:
            self._take(self._holder(self.out), time.monotonic() + self._patience())
            return True
        taken = self._next()
        if taken is None:
            return False
        (index, unit), started = taken, time.monotonic()
        self.results[index] = unit_blocks(unit)
        UNITS["reader"] += self.results[index] is not None
        self.slowest = max(self.slowest, time.monotonic() - started)
        for fd in self.procs:  # topped up: a helper starts its next the moment it answers
            while self.procs[fd].returncode is None and len(self.given.get(fd, ())) < AHEAD:
                if not self._give(fd):
                    break
        return True

    def _next(self) -> tuple[int, Unit] | None:
        """The next unit of ``units``, and its index; None when none is left."""
        unit = next(self.units, None)
        if unit is None:
            return None
        self.taken += 1
        return self.taken - 1, unit

    def _ready(self) -> Iterator[list[RecordBlock] | None]:
        """The units read, in order, up to the first that is not."""
        while self.out < self.taken and self._read(self.out):
            yield self.results.pop(self.out)
            self.out += 1

    def _read(self, index: int) -> bool:
        return not any(index in given for given in self.given.values())

    def _holder(self, index: int) -> int:
        return next(fd for fd, given in self.given.items() if index in given)

    def _patience(self) -> float:
        return max(DEADLINE_SECONDS, DEADLINE_FACTOR * self.slowest)

    def _take_ready(self) -> None:
        """Every answer the helpers have written, taken without waiting."""
        for fd in select.select(list(self.given), [], [], 0)[0]:
            while fd in self.given and select.select([fd], [], [], 0)[0]:
                self._take(fd, time.monotonic() + DEADLINE_SECONDS)

    def _wait(self, deadline: float) -> None:
        """The helpers' last answers, by ``deadline`` (monotonic): past it, each fails."""
        while self.given:
            wait = max(0.0, deadline - time.monotonic())
            for fd in select.select(list(self.given), [], [], wait)[0] or list(self.given):
                self._take(fd, deadline)

    def _give(self, fd: int) -> bool:
        """The helper given the next unit, unless none is left or ``most`` are held."""
        taken = self._next() if self.taken - self.out < self.most else None
        if taken is None:
            return False
        self.given.setdefault(fd, deque()).append(taken[0])
        self.sizes[taken[0]] = records_in(taken[1])
        self.outboxes[fd].put(taken[1])
        return True

    def _take(self, fd: int, deadline: float) -> None:
        """The helper's answer to its oldest unit; it is given the next. A helper that
        fails is stopped, and its units are left to the reader."""
        proc, index = self.procs[fd], self.given[fd].popleft()
        reply = checked(read_reply(fd, deadline), self.sizes.pop(index))
        if isinstance(reply, Failed):
            FAILED[reply.why] += 1
            logger.warning(
                "a read helper (pid %d) %s: its records are read here", proc.pid, reply.why
            )
            self.given[fd].appendleft(index)
            self._stop(fd)
            return
        if isinstance(reply, str):  # it raised on this unit: read here, and said
            FAILED[f"raised {reply.split(':', 1)[0]}"] += 1
            logger.warning(
                "a read helper (pid %d) raised %s: its unit is read here", proc.pid, reply
            )
            reply = None
        self.results[index] = reply
        UNITS["helper"] += reply is not None
        self._give(fd)
        if not self.given[fd]:
            del self.given[fd]

    def _stop(self, fd: int) -> None:
        """A helper stopped: what it may still write is never read (the next read starts
        anew); its units are left to the reader (None)."""
        proc = self.procs[fd]
        proc.kill()
        proc.wait()  # its returncode set: given nothing more
        for index in self.given.pop(fd, ()):
            self.results[index] = None
            self.sizes.pop(index, None)


_KEPT: list[Workers] = []
_KEPT_LOCK = threading.Lock()


def workers(count: int) -> Workers | None:
    """This process's ``count`` helpers, started now if it has none (or others, or some
    ended); None for 0."""
    with _KEPT_LOCK:
        if _KEPT and _KEPT[0].owner != os.getpid():
            _KEPT.clear()  # a forked child's copy: its parent's helpers, never touched here
        if _KEPT and (_KEPT[0].count != count or not _KEPT[0].alive()):
            _KEPT.pop().close()
        if count <= 0:
            return None
        if not _KEPT:
            _KEPT.append(Workers(count))
        return _KEPT[0]


def close() -> None:
    """Stop this process's helpers, if it has any."""
    with _KEPT_LOCK:
        if _KEPT and _KEPT[0].owner == os.getpid():
            _KEPT.pop().close()
        _KEPT.clear()


# No atexit function: a process's end closes its helpers' stdin, and they end. (A resident
# run process runs the atexit functions a run registered at that run's end: helpers kept
# for its next runs would be stopped after the first.)


def units_so_far() -> tuple[int, int, int]:
    """This process's units so far: read by its helpers, by itself while sharing, and
    failed by a helper (any reason)."""
    return UNITS["helper"], UNITS["reader"], sum(FAILED.values())


def said_since(before: tuple[int, int, int], count: int) -> str:
    """What a read with ``count`` helpers shared since ``before`` (:func:`units_so_far`),
    as its log line ends: "" where it shared nothing.

    >>> said_since(units_so_far(), 1)
    ''
    """
    helper, reader, failed = (now - then for now, then in zip(units_so_far(), before, strict=True))
    if not helper + reader + failed:
        return ""
    said = f"; units shared: {helper} parsed by {count} read helper(s), {reader} here"
    return said + (f", {failed} a helper failed (read here)" if failed else "")


def shares(records: int, count: int) -> int:
    """How many units a read of ``records`` makes with ``count`` helpers: one per
    ``MIN_UNIT_RECORDS`` at most, and ``UNITS_EACH`` for each process (the helpers and
    the reader) at most; one without helpers.

    >>> shares(25_000, 1), shares(25_000, 15), shares(3_000, 4), shares(25_000, 0)
    (8, 12, 1, 1)
    """
    if count <= 0:
        return 1
    return max(1, min(UNITS_EACH * (count + 1), records // MIN_UNIT_RECORDS))


def held_at_once(count: int) -> int:
    """Units a read shared with ``count`` helpers holds at most, taken from its file and
    not yet joined (a ``.jsonl``'s blocks, a large pool's runs: the file is split no
    further ahead): ``UNITS_EACH`` for each process.

    >>> held_at_once(1), held_at_once(4)
    (8, 20)
    """
    return UNITS_EACH * (count + 1)


def _widen(stream: IO[bytes] | None) -> None:
    """A helper's pipe made as wide as the system allows (Linux ``F_SETPIPE_SZ``, up to
    ``/proc/sys/fs/pipe-max-size``; 1 MiB by default), else left at 64 KiB. Through a
    narrow pipe a unit (~1 KB a record) is many writes, and the sending thread waits for
    Python's lock before each while this process reads its own unit; a helper's answer
    waits in its pipe until this process looks between its own units."""
    try:
        assert stream is not None
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(stream.fileno(), _SETPIPE_SZ, min(limit, PIPE_BYTES))
    except (AssertionError, OSError, ValueError):
        pass  # not Linux, or not allowed: the default pipe


PIPE_BYTES = 8 * 2**20  # what a helper's pipe holds at most: a unit of ~8,000 records
_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _fd(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    return proc.stdout.fileno()


def _sending(stream: IO[bytes] | None, outbox: SimpleQueue[Unit | None]) -> None:
    """Each unit of ``outbox`` written to a helper, in order, until None (a helper gone:
    nothing written; its answer fails)."""
    while (unit := outbox.get()) is not None:
        try:
            assert stream is not None
            send_unit(stream.fileno(), unit)
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
