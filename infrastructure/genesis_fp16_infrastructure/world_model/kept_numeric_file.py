"""The kept numeric rows' file: one whole pool, then the pools it grew into, appended.

A later run's pool is most often the kept pool with new records at its end (a new data
file sorting last, a ``.jsonl`` grown). Writing the whole file again for it cost ~37 ms
at 100,000 records, every run; :func:`append_frame` writes what the new pool adds
instead: its new records' columns and the rows of the kept records worked out again
beside them (issue 90: a record is encoded once). The file is a sequence of frames::

    frame: MAGIC | payload length, payload CRC-32 | payload
    payload: header length | header (msgpack: version, kind, the pool's size before it,
             each column's dtype, shape and offset) | columns, each 8-byte aligned

The first frame is a ``whole`` pool, every later one an ``append`` onto the pool the
frames before it make, or a ``splice``: new records laid among that pool's (a new data
file sorting among the old ones), each at its place in the pool after. A frame is
written after the last good one (a torn tail cut off first) and never fsynced; what a
crash can leave is a frame cut short or of other bytes, which its length or CRC-32 tells:
the file then reads as the frames before it, the pool those rows were worked out for
(never a mix). A first frame that fails, another version, or an append of another
pool's size is refused whole (``ValueError``), and the caller works every row out and
writes the file again. Every frame's CRC-32 is checked on every read (a resident run
process reads the file once: ``kept_numeric``).

    write_whole(path, arrays)          # the first frame, atomically (write_atomic)
    end = append_frame(path, arrays, at=end, records=n, labelled=k)
    frames = read_frames(path, limit)  # [(kind, records, labelled, arrays)], and the end
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec
import numpy as np

from genesis_fp16_infrastructure.agent_folder.files import write_atomic

MAGIC = b"GFNUMKP\n"
_PREFIX = struct.Struct("<8sQI4x")  # MAGIC, the payload's length and CRC-32; 24 bytes
_HEAD = struct.Struct("<I4x")  # the payload's header length; 8 bytes
_ALIGN = 8


class _Frame(msgspec.Struct):
    version: str
    kind: str  # "whole", "append" or "splice"
    records: int  # the pool's records before this frame (0 for a whole one)
    labelled: int  # its labelled records before this frame
    arrays: dict[str, tuple[str, list[int], int]]  # name: dtype, shape, offset in payload


class Frame(NamedTuple):
    """One frame read back: its kind, the pool it applies to and its columns (read-only
    views of the file's bytes)."""

    kind: str
    records: int
    labelled: int
    arrays: dict[str, np.ndarray]


def _pad(size: int) -> int:
    return -size % _ALIGN


def encode_frame(
    version: str, kind: str, records: int, labelled: int, arrays: dict[str, np.ndarray]
) -> list[bytes | memoryview]:
    """One frame's bytes, in parts (the columns' own bytes, no copy), ``arrays``
    C-contiguous; a multiple of 8 in all, so that each frame starts aligned."""
    layout: dict[str, tuple[str, list[int], int]] = {}

    def header(offsets: dict[str, int]) -> bytes:
        for name, a in arrays.items():
            layout[name] = (a.dtype.str, list(a.shape), offsets.get(name, 0))
        return msgspec.msgpack.encode(_Frame(version, kind, records, labelled, layout))

    # The offsets' digits change the header's length: lay out with the widest offsets.
    room = len(header(dict.fromkeys(arrays, 2**62)))
    at = _PREFIX.size + _HEAD.size + room
    at += _pad(at)
    offsets = {}
    for name, a in arrays.items():
        offsets[name] = at - _PREFIX.size
        at += a.nbytes + _pad(a.nbytes)
    head = header(offsets)  # no longer than ``room``: the columns start after that
    gap = room - len(head) + _pad(_PREFIX.size + _HEAD.size + room)
    parts: list[bytes | memoryview] = [_HEAD.pack(len(head)), head, b"\0" * gap]
    for a in arrays.values():
        flat: Any = a.reshape(-1)
        parts += [memoryview(flat).cast("B"), b"\0" * _pad(a.nbytes)]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return [_PREFIX.pack(MAGIC, at - _PREFIX.size, crc), *parts]


def write_whole(path: Path, version: str, arrays: dict[str, np.ndarray]) -> int:
    """Write ``path`` as one whole frame, atomically (no fsync: a torn file fails its
    CRC-32); its size."""
    parts = encode_frame(version, "whole", 0, 0, arrays)

    def write(handle: IO[bytes]) -> None:
        for part in parts:
            handle.write(part)

    write_atomic(path, write, sync=False)
    return sum(len(p) for p in parts)


def append_frame(
    path: Path,
    version: str,
    arrays: dict[str, np.ndarray],
    at: int,
    records: int,
    labelled: int,
    kind: str = "append",
) -> int:
    """Append a frame of ``kind`` (``append`` or ``splice``) onto the pool of ``records``
    (``labelled``) the file's first ``at`` bytes make, anything after them (a torn frame)
    cut off first; the file's new size. No fsync: a frame a crash cuts short fails its
    length or CRC-32."""
    frame = b"".join(encode_frame(version, kind, records, labelled, arrays))
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        os.ftruncate(fd, at)
        written = os.pwrite(fd, frame, at)
        if written != len(frame):
            raise OSError(f"wrote {written} of {len(frame)} bytes")
    finally:
        os.close(fd)
    return at + len(frame)


def read_frames(path: Path, version: str, limit: int) -> tuple[list[Frame], int, bool]:
    """The frames of ``path``, each checked by its CRC-32, the end of the last good one,
    and whether a torn tail followed it; FileNotFoundError without a file, ValueError for
    anything but a regular file of at most ``limit`` bytes whose first frame is whole and
    of ``version`` (and every later one of it too)."""
    # O_NOFOLLOW: a link is refused (ELOOP); O_NONBLOCK: a FIFO opens at once, refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size:,} bytes, over the {limit:,} this pool allows")
        raw = _read_all(fd, info.st_size)
    finally:
        os.close(fd)
    frames: list[Frame] = []
    at, torn = 0, False
    while at < len(raw):
        frame, end = _frame(raw, at, version)
        if frame is None:
            torn = True  # a crash mid-append: the frames before it hold
            break
        frames.append(frame)
        at = end
    if not frames or frames[0].kind != "whole":
        raise ValueError("no whole first frame")
    return frames, at, torn


def _read_all(fd: int, size: int) -> bytes:
    parts, at = [], 0
    while at < size:
        part = os.pread(fd, size - at, at)
        if not part:
            break
        parts.append(part)
        at += len(part)
    return b"".join(parts)


def _frame(raw: bytes, at: int, version: str) -> tuple[Frame | None, int]:
    """The frame at ``at`` and its end; None for one cut short or damaged. A whole frame
    first is required of the caller; a frame of another version is refused here."""
    if len(raw) - at < _PREFIX.size:
        return None, at
    magic, length, crc = _PREFIX.unpack_from(raw, at)
    start = at + _PREFIX.size
    if magic != MAGIC or length > len(raw) - start:
        return None, at
    payload = memoryview(raw)[start : start + length]
    if zlib.crc32(payload) != crc:
        return None, at
    try:
        (size,) = _HEAD.unpack_from(payload, 0)
        head = msgspec.msgpack.decode(payload[_HEAD.size : _HEAD.size + size], type=_Frame)
    except (struct.error, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"kept frame header unreadable: {exc}") from None
    if head.version != version:
        raise ValueError(f"version {head.version!r}, this build's {version}")
    arrays = {}
    for name, (dtype, shape, offset) in head.arrays.items():
        kind = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        if any(d < 0 for d in shape) or offset < 0 or offset + kind.itemsize * count > length:
            raise ValueError(f"kept column {name} of shape {shape} at {offset} past its frame")
        arrays[name] = np.frombuffer(payload, kind, count, offset).reshape(shape)
    return Frame(head.kind, head.records, head.labelled, arrays), start + length
