"""A large trajectory pool file split into its records a window at a time, never held whole.

``genesis-fp16 data generate`` and Genesis itself write a pool as one JSON object, its
records under ``trajectories``. Read whole, a 1,000,000-record pool (1.5 GB) is 1.5 GB
of bytes in memory before its first record is decoded, as much as all its records will
take afterwards. :func:`split_pool` finds where each record's bytes lie instead, reading
the file in ``WINDOW`` bytes at a time, and hands each record's bytes to the reader:

1. **Where things are.** Each window's quotes, backslashes and structural characters
   are found with numpy; a quote preceded by an odd run of backslashes is escaped, the
   others open and close strings, and ``{ } [ ] , :`` outside strings give the depth.
   Only the events at the top two levels are kept: the pool's own keys, and the commas
   and colons between the ``trajectories`` entries (a few per record, as int64 offsets).
2. **The records.** The header (the pool's bytes outside its ``trajectories`` value) is
   parsed and checked by pydantic first, so its thresholds label the records; each
   entry's key and value bytes are then read back in file order.

Anything unexpected (not an object, no ``trajectories`` object, unbalanced brackets or
strings, a header pydantic refuses) returns None, and the caller reads the file the
whole-document way, whose reasons say what is wrong. A record whose bytes are not JSON
costs only itself (the whole-document way quarantines the whole file for it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
        self.inner: list[np.ndarray] = []  # offsets of , : } at depth 2
        self.inner_chars: list[np.ndarray] = []

    def window(self, data: np.ndarray, base: int) -> None:
        """Scan ``data``, the file's bytes from offset ``base``."""
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
        self.inner.append(where[inner] + base)
        self.inner_chars.append(chars[inner])
        self.depth = int(self.depth + delta.sum())
        self.in_string = bool((len(quotes) + self.in_string) % 2)
        self.backslashes = _backslashes_before(data, len(data), self.backslashes)

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


def split_pool(file: Path) -> tuple[tuple[float, float], Iterator[Entry]] | None:
    """The pool's label thresholds and its records as (key, value bytes), in the order a
    JSON parser gives them (a key given twice: its last value, at its first place); None
    when the file is not a pool this way can split (the caller then reads it whole)."""
    try:
        handle = open(file, "rb", buffering=8 * 2**20)  # noqa: SIM115 (the records close it)
    except OSError:
        return None  # gone or unreadable: the whole-document way says which
    try:
        scan = _Scan()
        base = 0
        while chunk := handle.read(WINDOW):
            scan.window(np.frombuffer(chunk, dtype=np.uint8), base)
            base += len(chunk)
        if scan.depth or scan.in_string:
            raise _NotAPool("unbalanced brackets or strings")
        start = _trajectories_value(handle, scan.top)
        offsets, chars = _inner(scan, start)
        end = offsets[-1]
        header = _read(handle, 0, start) + b"{}" + _read(handle, end + 1, base - end - 1)
        pool = TrajectoryPool.model_validate(json.loads(header))
        spans = _entries(offsets, chars, start)
        if not spans and _read(handle, start + 1, end - start - 1).strip():
            raise _NotAPool("the trajectories object holds no entry, but is not empty")
        keys = [msgspec.json.decode(_read(handle, a, b - a), type=str) for a, b, _, _ in spans]
    except (_NotAPool, OSError, ValueError, ValidationError, RecursionError, msgspec.DecodeError):
        handle.close()
        return None
    return (pool.success_threshold, pool.failure_threshold), _records(handle, spans, keys)


def _read(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    return handle.read(size)


def _trajectories_value(handle: BinaryIO, top: list[tuple[int, int]]) -> int:
    """The offset of the ``trajectories`` object's opening brace. ``top`` holds the
    events at depth 0 and 1: the pool's braces, its commas and colons, and where each
    of its values opens (a value closes at depth 2)."""
    if not top or top[0][1] != ord("{") or top[-1][1] != ord("}"):
        raise _NotAPool("not one JSON object")
    found = None
    for i in range(1, len(top) - 1):
        offset, char = top[i]
        if char != ord(":"):
            continue
        key_start = top[i - 1][0] + 1  # after the pool's { or the comma before the key
        key = json.loads(_read(handle, key_start, offset - key_start))
        following = top[i + 1]
        if key == "trajectories" and following[1] == ord("{"):
            found = following[0]  # the last, as a parser keeps a key given twice
    if found is None:
        raise _NotAPool("no trajectories object")
    return found


def _inner(scan: _Scan, start: int) -> tuple[list[int], list[int]]:
    """The depth-2 events of the value opening at ``start``, up to its closing brace."""
    offsets = np.concatenate(scan.inner) if scan.inner else np.zeros(0, dtype=np.int64)
    chars = np.concatenate(scan.inner_chars) if scan.inner_chars else np.zeros(0, np.uint8)
    after = offsets > start
    offsets, chars = offsets[after], chars[after]
    closing = np.flatnonzero(chars == ord("}"))
    if not closing.size:
        raise _NotAPool("the trajectories object does not close")
    stop = int(closing[0]) + 1
    return offsets[:stop].tolist(), chars[:stop].tolist()


def _entries(offsets: list[int], chars: list[int], start: int) -> list[tuple[int, int, int, int]]:
    """(key start, key end, value start, value end) of each trajectories entry, from
    its colons, its commas and its closing brace (``key: value, ..., key: value }``)."""
    if len(offsets) == 1:
        return []  # {}
    if len(offsets) % 2:
        raise _NotAPool("a trajectories entry is not key: value")
    spans = []
    begin = start
    for i in range(0, len(offsets), 2):
        colon, after = offsets[i], offsets[i + 1]
        last = i + 2 == len(offsets)
        if chars[i] != ord(":") or chars[i + 1] != (ord("}") if last else ord(",")):
            raise _NotAPool("a trajectories entry is not key: value")
        spans.append((begin + 1, colon, colon + 1, after))
        begin = after
    return spans


def _records(
    handle: BinaryIO, spans: list[tuple[int, int, int, int]], keys: list[str]
) -> Iterator[Entry]:
    """Each record's bytes, read from the handle the split opened (a file removed since
    is still read through it)."""
    last = {key: i for i, key in enumerate(keys)}
    with handle:
        for key in dict.fromkeys(keys):
            _, _, value_start, value_end = spans[last[key]]
            yield key, _read(handle, value_start, value_end - value_start)
