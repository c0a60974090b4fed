"""A large trajectory pool file split into its records a window at a time, never held whole.

``genesis-fp16 data generate`` and Genesis itself write a pool as one JSON object, its
records under ``trajectories``. Read whole, a 1,000,000-record pool (1.5 GB) is 1.5 GB
of bytes in memory before its first record is decoded, as much as all its records will
take afterwards. :func:`split_pool` finds where each record's bytes lie instead, reading
the file in ``WINDOW`` bytes at a time, and hands the records each window completes to
the reader at once, so that its helpers parse them while the rest is scanned:

1. **Where things are.** Each window's quotes, backslashes and structural characters
   are found with numpy; a quote preceded by an odd run of backslashes is escaped, the
   others open and close strings, and ``{ } [ ] , :`` outside strings give the depth.
   Only the events at the top two levels are kept: the pool's own keys, and the commas
   and colons between the ``trajectories`` entries (a few per record, as int64 offsets,
   let go of once their entry is handed out).
2. **The records.** The header before ``trajectories`` is parsed and checked by pydantic
   before the first record, so its thresholds label the records; each entry's key and
   value bytes are then cut from the windows, in file order.
3. **The whole file, at its end.** What a window cannot show is checked after the last:
   brackets and strings balanced, one ``trajectories`` object, no key given twice, and
   a header after the records that leaves their thresholds as they were.

Anything unexpected before the first record (not an object, no ``trajectories`` object,
a header pydantic refuses) returns None; after it, the records' iterator raises
:class:`PoolSplitRefused`, and the reader drops what it read. Either way the caller reads
the file the whole-document way, as a parser reads it, whose reasons say what is wrong.
A record whose bytes are not JSON costs only itself (the whole-document way quarantines
the whole file for it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
from pydantic import ValidationError

from genesis_fp16_infrastructure.data.schema import TrajectoryPool

WINDOW = 8 * 2**20  # bytes scanned at a time: ~15 bytes of numpy temporaries per byte
_QUOTE, _BACKSLASH = 34, 92
_OPEN, _CLOSE = frozenset(b"{["), frozenset(b"}]")
_DELTA = np.zeros(256, dtype=np.int64)
_DELTA[list(b"{[")] = 1
_DELTA[list(b"}]")] = -1

Entry = tuple[str, bytes]  # (the record's key, its value's bytes)


class _NotAPool(ValueError):
    """The file is not one JSON object with a ``trajectories`` object: read it whole."""


class _Scan:
    """The state carried from one window to the next, and the events kept."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # the run of backslashes that ended the last window
        self.top: list[tuple[int, int]] = []  # (offset, char) at depth 0 and 1

    def window(self, data: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
        """Scan ``data``, the file's bytes from offset ``base``: its events at depth 2
        (the offsets and characters of each ``,``, ``:`` and ``}`` there)."""
        quotes = np.flatnonzero(data == _QUOTE)
        quotes = quotes[~self._escaped(data, quotes)]
        # Six comparisons, not a table lookup: numpy compares a window in a few ms.
        structural = data == ord("{")
        for char in b"}[],:":
            structural |= data == char
        where = np.flatnonzero(structural)
        outside = (np.searchsorted(quotes, where) + self.in_string) % 2 == 0
        where = where[outside]
        chars = data[where]
        delta = _DELTA[chars]
        before = self.depth + np.cumsum(delta) - delta
        if before.size and (before.min() < 0):
            raise _NotAPool("more closing brackets than opening ones")
        top = before <= 1
        self.top += [(int(base + o), int(c)) for o, c in zip(where[top], chars[top], strict=True)]
        inner = (before == 2) & ~np.isin(chars, list(_OPEN))
        self.depth = int(self.depth + delta.sum())
        self.in_string = bool((len(quotes) + self.in_string) % 2)
        self.backslashes = _backslashes_before(data, len(data), self.backslashes)
        return where[inner] + base, chars[inner]

    def _escaped(self, data: np.ndarray, quotes: np.ndarray) -> np.ndarray:
        """Which quotes follow an odd run of backslashes (the run may start in the last
        window). Checked only where the byte before is a backslash: a few in most data."""
        escaped = np.zeros(len(quotes), dtype=bool)
        # The byte before each quote, compared where there is one: no stand-in value for
        # "none" (a -1 in a uint8 array wraps to 255 on numpy 2.4 and raises on 2.5).
        after_backslash = (quotes > 0) & (data[np.maximum(quotes - 1, 0)] == _BACKSLASH)
        suspects = np.flatnonzero(after_backslash | ((quotes == 0) & (self.backslashes > 0)))
        for i in suspects.tolist():
            escaped[i] = _backslashes_before(data, int(quotes[i]), self.backslashes) % 2 == 1
        return escaped


def _backslashes_before(data: np.ndarray, at: int, carried: int) -> int:
    """The run of backslashes just before ``data[at]`` (walked back: a few bytes); one
    that reaches the window's start goes on with ``carried``, the last window's run."""
    run = 0
    while run < at and data[at - 1 - run] == _BACKSLASH:
        run += 1
    return carried + run if run == at else run


class PoolSplitRefused(ValueError):
    """A pool split a window at a time turned out, past its first records, not to be one
    this way reads as a JSON parser does: a key given twice, a header after the records
    that changes their thresholds, a second ``trajectories`` key, unbalanced brackets or
    strings, an entry that is not ``key: value``, or a read that failed. The records
    already handed out are to be dropped and the file read whole (``data.readers``)."""


def split_pool(file: Path) -> tuple[tuple[float, float], Iterator[list[Entry]]] | None:
    """The pool's label thresholds and its records as (key, value bytes), in file order,
    handed out a list a window (those its scan completes); None when the file is not a
    pool this way can split (the caller then reads it whole). The thresholds are those
    of the header before ``trajectories``, checked by pydantic before any record is
    handed out; the records' iterator checks the rest at its end, and raises
    :class:`PoolSplitRefused` where the file is not what its records were taken for."""
    try:
        handle = open(file, "rb", buffering=0)  # noqa: SIM115 (the records close it)
    except OSError:
        return None  # gone or unreadable: the whole-document way says which
    stream = _Stream(handle)
    try:
        while stream.start is None:
            if not stream.more():
                raise _NotAPool("no trajectories object")
        header = stream.header(stream.start, b"}")
    except (_NotAPool, OSError, ValueError, ValidationError, RecursionError):
        handle.close()
        return None
    return header, stream.entries(header)


class _Stream:
    """A pool file scanned a window at a time: where its ``trajectories`` object opens
    (``start``) and closes (``end``), and its entries as each window completes them."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.scan = _Scan()
        self.size = 0  # bytes scanned
        self.start: int | None = None
        self.end: int | None = None
        self.events: list[tuple[int, int]] = []  # depth-2 events of trajectories, unpaired
        self.begin = 0  # the { or , before the next entry's key
        self.data, self.base = b"", 0  # the file's bytes from ``base`` up to ``size``
        self.looked = 1  # the top events before this one hold no trajectories key

    def more(self) -> bool:
        """The next window scanned; False at the end of the file."""
        chunk = self.handle.read(WINDOW)
        if not chunk:
            return False
        base, self.size = self.size, self.size + len(chunk)
        offsets, chars = self.scan.window(np.frombuffer(chunk, dtype=np.uint8), base)
        if self.start is None:
            self.start = self._trajectories()
            if self.start is None:
                return True
            self.begin, self.data, self.base = self.start, chunk[self.start - base :], self.start
        elif self.end is None:  # the bytes of the entries not yet complete, and the new
            self.data, self.base = self.data[self.begin - self.base :] + chunk, self.begin
        if self.end is None:
            after = offsets > self.start
            self.events += zip(offsets[after].tolist(), chars[after].tolist(), strict=True)
        return True

    def _trajectories(self) -> int | None:
        """Where the first ``trajectories`` object among the events so far opens."""
        top = self.scan.top
        if top and top[0][1] != ord("{"):
            raise _NotAPool("not one JSON object")
        for i in range(self.looked, len(top) - 1):
            found = _trajectories_at(self._read, top, i)
            if found is not None:
                return found
        self.looked = max(self.looked, len(top) - 1)
        return None

    def entries(self, header: tuple[float, float]) -> Iterator[list[Entry]]:
        """The entries each window completes (none: nothing), then the checks of the
        whole file."""
        seen: set[str] = set()
        try:
            with self.handle:
                while True:
                    done = list(self._complete())
                    for key, _ in done:
                        if key in seen:
                            raise _NotAPool(f"the key {key!r} is given twice")
                        seen.add(key)
                    if done:
                        yield done
                    if not self.more():
                        break
                self._check(header)
        except (_NotAPool, OSError, ValueError, ValidationError, RecursionError) as exc:
            raise PoolSplitRefused(str(exc)) from exc

    def _complete(self) -> Iterator[Entry]:
        """The entries whose colon and comma (or closing brace) are scanned: ``key: value``
        pairs of depth-2 events, the last closed by the object's brace."""
        at, events = 0, self.events
        while self.end is None and at < len(events):
            if events[at][1] == ord("}"):  # the object's close: right after its { alone
                if self.begin != self.start:
                    raise _NotAPool("a trajectories entry is not key: value")
                if self._read(self.start + 1, events[at][0] - self.start - 1).strip():
                    raise _NotAPool("the trajectories object holds no entry, but is not empty")
                self.end = events[at][0]
                break
            if at + 1 == len(events):
                break  # its comma or brace in a later window
            (colon, char), (after, closing) = events[at], events[at + 1]
            if char != ord(":") or closing not in (ord(","), ord("}")):
                raise _NotAPool("a trajectories entry is not key: value")
            key = msgspec.json.decode(self._slice(self.begin + 1, colon), type=str)
            yield key, self._slice(colon + 1, after)
            self.begin, at = after, at + 2
            if closing == ord("}"):
                self.end = after
        del events[:at]

    def _check(self, header: tuple[float, float]) -> None:
        """The file whole, as :func:`split_pool` took it: balanced, its only
        ``trajectories`` object the one split, its header's thresholds those used."""
        if self.end is None:
            raise _NotAPool("the trajectories object does not close")
        if self.scan.depth or self.scan.in_string:
            raise _NotAPool("unbalanced brackets or strings")
        assert self.start is not None
        if _trajectories_value(self._read, self.scan.top) != self.start:
            raise _NotAPool("a second trajectories object")
        if self.header(self.start, self._read(self.end + 1, self.size - self.end - 1)) != header:
            raise _NotAPool("the header after the records changes their thresholds")

    def header(self, start: int, after: bytes) -> tuple[float, float]:
        """The thresholds of the pool's bytes before ``start`` and ``after`` its records,
        as pydantic checks them."""
        pool = TrajectoryPool.model_validate(json.loads(self._read(0, start) + b"{}" + after))
        return pool.success_threshold, pool.failure_threshold

    def _read(self, offset: int, size: int) -> bytes:
        return os.pread(self.handle.fileno(), size, offset)

    def _slice(self, begin: int, end: int) -> bytes:
        return self.data[begin - self.base : end - self.base]


Read = Callable[[int, int], bytes]  # the file's bytes at an offset, of a size


def _trajectories_value(read: Read, top: list[tuple[int, int]]) -> int:
    """The offset of the ``trajectories`` object's opening brace. ``top`` holds the
    events at depth 0 and 1: the pool's braces, its commas and colons, and where each
    of its values opens (a value closes at depth 2)."""
    if not top or top[0][1] != ord("{") or top[-1][1] != ord("}"):
        raise _NotAPool("not one JSON object")
    found = None
    for i in range(1, len(top) - 1):
        at = _trajectories_at(read, top, i)
        found = found if at is None else at  # the last, as a parser keeps a key given twice
    if found is None:
        raise _NotAPool("no trajectories object")
    return found


def _trajectories_at(read: Read, top: list[tuple[int, int]], i: int) -> int | None:
    """Where the ``trajectories`` object opens, if ``top[i]`` is the colon after that
    key and an object follows it; else None."""
    offset, char = top[i]
    if char != ord(":") or top[i + 1][1] != ord("{"):
        return None
    key_start = top[i - 1][0] + 1  # after the pool's { or the comma before the key
    return (
        top[i + 1][0] if json.loads(read(key_start, offset - key_start)) == "trajectories" else None
    )
