"""What a read and its helper processes (:mod:`.read_workers`) say to each other, and a
helper's loop (:func:`serve`).

Each message is an 8-byte little-endian length, then msgpack: a ``Unit`` from the read,
its ``list[RecordBlock] | str | None`` back (the unit's column blocks; the line of an
exception the helper raised on it; None: the fast path refused it). Both ends write a
message by :func:`write_message` and the read reads one by :func:`os.read`, whatever
Python's standard streams are, and an answer is believed only once it decodes and holds
the unit's records (:func:`checked`): a helper is never trusted to answer what it was
asked.
"""

from __future__ import annotations

import os
import select
import time
from typing import BinaryIO

import msgspec

from genesis_fp16_infrastructure.data.batch_decode import Unit, unit_blocks
from genesis_fp16_infrastructure.data.file_records import RecordBlock

RAISED_CHARS = 300  # of a helper's exception line, at most
_LENGTH = 8
_ENCODER = msgspec.msgpack.Encoder()
_REPLY = msgspec.msgpack.Decoder(list[RecordBlock] | str | None)
_UNIT = msgspec.msgpack.Decoder(Unit)

Reply = list[RecordBlock] | str | None


class Failed:
    """A helper that failed a unit, and why (it is then stopped, and the read reads the
    unit itself)."""

    def __init__(self, why: str) -> None:
        self.why = why


def send_unit(fd: int, unit: Unit) -> None:
    """``unit`` sent to a helper on its stdin ``fd``."""
    write_message(fd, _ENCODER.encode(unit))


def write_message(fd: int, data: bytes) -> None:
    """``data`` as one message on ``fd``: its length, then its bytes, by :func:`os.write`
    until every byte is taken. A write into a full pipe that a signal (or a tracer:
    py-spy, strace) interrupts takes part of its bytes (write(2)). A helper wrote through
    ``sys.stdout.buffer``, which under ``PYTHONUNBUFFERED=1`` (as the systemd unit and the
    image set it) is a raw file whose ``write`` may take part of its bytes, and it did not
    look at the count: the rest was lost, and every later message out of step (the read
    then waited past its deadline for bytes that never came, or was answered what was no
    blocks: ``test_read_workers.py``)."""
    for part in (len(data).to_bytes(_LENGTH, "little"), data):
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view) :]


def read_reply(fd: int, deadline: float) -> Reply | Failed:
    """A helper's answer, read from its stdout ``fd`` by ``deadline`` (monotonic)."""
    head = _read_exactly(fd, _LENGTH, deadline)
    if isinstance(head, Failed):
        return head
    body = _read_exactly(fd, int.from_bytes(head, "little"), deadline)
    if isinstance(body, Failed):
        return body
    try:
        return _REPLY.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:  # not UTF-8 too
        return Failed(f"answered what is no column blocks ({exc})")


def checked(reply: Reply | Failed, records: int | None) -> Reply | Failed:
    """A helper's answer to a unit of ``records`` records (None: a unit no blocks are, as
    ``batch_decode.records_in`` says), as the read takes it: blocks of any other count are
    not that unit's (a helper's defect, or its stream out of step, which would lose or
    repeat records): failed."""
    if isinstance(reply, list):
        got = sum(len(block.trajectory_id) for block in reply)
        if got != records:
            return Failed(f"answered {got} records for a unit of {records}")
    return reply


def _read_exactly(fd: int, size: int, deadline: float) -> bytes | Failed:
    chunks, left = [], size
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            return Failed("ran past its deadline")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return Failed("ended before it answered")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    """A helper's loop: each unit read from ``source``, its blocks written to ``sink``,
    until ``source`` ends (the reading process closed it, or ended); a unit it raises on
    answered with the exception's line (the read logs and counts it)."""
    while head := source.read(_LENGTH):
        if len(head) < _LENGTH:
            return
        body = source.read(int.from_bytes(head, "little"))
        reply: Reply
        try:
            reply = unit_blocks(_UNIT.decode(body))
        except Exception as exc:  # any: the read reads the unit, and says why
            reply = f"{type(exc).__name__}: {exc}"[:RAISED_CHARS]
        write_message(sink.fileno(), _ENCODER.encode(reply))
