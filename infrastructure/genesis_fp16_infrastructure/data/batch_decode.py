"""Records the fast path decodes together: a batch of a document's records (or of numbered
lines) in one msgspec call, a plain ``.jsonl``'s block of lines in one ``decode_lines``,
and the column block they make (issue 90: new records at the parser's speed).

What a read hands its helper processes (:mod:`.read_workers`) is here too: a *unit*, a
stretch of one file's records in file order (:class:`Unit`), and :func:`unit_blocks`,
its column blocks, or None where the fast path does not vouch for every record of it
(the read then reads that unit itself, record by record where it must, quarantining
what it must, as it does without helpers). The module imports no torch, so that a
helper process starts in a fifth of a second.
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import Any

import msgspec
import numpy as np

from genesis_fp16_infrastructure.data.batch_block import batch_block
from genesis_fp16_infrastructure.data.fast_records import (
    _BATCH_DECODER,
    _DECODER,
    _VALUES_DECODER,
    _settled,
    _utf8,
)
from genesis_fp16_infrastructure.data.file_records import RecordBlock
from genesis_fp16_infrastructure.data.struct_columns import columns_of
from genesis_fp16_infrastructure.machine_memory import paused_gc


class Unit(msgspec.Struct, array_like=True):
    """A stretch of one file's records, in file order, as a read hands it to a helper
    process: a run of records msgspec split from a document, or of numbered lines
    (``raws``, each one record's bytes; ``keys`` the ids a pool maps them under, None
    for a list or lines; ``whole``: each is one whole JSON value, as a document's are),
    or a plain ``.jsonl``'s block of whole lines (``block``, with ``ends``: its \\n bytes'
    places, little-endian int64). ``thresholds``: the file's labelling thresholds;
    ``batch``: records a column block holds at most (the read's ``BATCH_RECORDS``)."""

    raws: list[bytes]
    keys: list[str] | None
    whole: bool
    block: bytes | None
    ends: bytes | None
    thresholds: tuple[float, float]
    keep_text: bool
    batch: int


def unit_blocks(unit: Unit) -> list[RecordBlock] | None:
    """``unit``'s records as column blocks of at most ``unit.batch`` records each, in file
    order, every one decoded on the fast path; None as soon as a batch is not (a record
    the fast path does not vouch for, lines that are not one value each): the read then
    reads the unit itself. The blocks are those a read without helpers makes of the same
    records (``test_read_workers.py`` holds them to it, byte for byte)."""
    # As the read pauses it: structs, no cycle among them. The decoded records are let
    # go of before the collector is on again (_unit_blocks returns): the allocations it
    # counted are undone with them, where a collection right after had walked them all
    # (py-spy: 9.4% of a helper's samples at the collector's return, 6.5% after, the
    # records' own freeing)
    with paused_gc():
        return _unit_blocks(unit)


def _unit_blocks(unit: Unit) -> list[RecordBlock] | None:
    batch, parts = unit.batch, []
    if unit.block is not None:
        ends = np.frombuffer(unit.ends or b"", "<i8")
        together = _decoded_lines(unit.block, ends)
        if together is None:
            return None
        parts += line_batches(*together, batch)
    else:
        for at in range(0, len(unit.raws), batch):
            keys = None if unit.keys is None else unit.keys[at : at + batch]
            found = _decoded_together(unit.raws[at : at + batch], keys, unit.whole)
            if found is None:
                return None
            parts.append(found)
    blocks: list[RecordBlock] = []
    for records, replays in parts:
        written = _Batch(unit.keep_text)
        written.add(records, replays, unit.thresholds)
        blocks += written.flush()
    return blocks


def line_batches(records: list[Any], replays: int, batch: int) -> list[tuple[list[Any], int]]:
    """A block's decoded lines (:func:`_decoded_lines`) cut ``batch`` records at a time,
    each with how many replay records it holds (counted only where the block has any)."""
    parts = [records[at : at + batch] for at in range(0, len(records), batch)]
    return [(part, sum(map(_is_replay, part)) if replays else 0) for part in parts]


def _decoded_lines(block: bytes, ends: np.ndarray) -> tuple[list[Any], int] | None:
    """The records of a block of whole ``.jsonl`` lines, decoded by one msgspec call
    (``decode_lines``, msgspec's own floor for the layout) and settled, and how many are
    replay records (``ends``: where its \n bytes are); None unless every nonblank line is
    one value alone, with no space around it, that the fast path vouches for.

    ``decode_lines`` reads whitespace-separated values: a value may run across lines and
    a line may hold two. So the values are split too (``msgspec.Raw``, a cheaper pass)
    and each must be exactly its nonblank line's bytes: as many values as nonblank lines,
    each as long as its line. Values and lines both cover the block's text, in order,
    with only whitespace between, so equal lengths in order are the same spans."""
    if not _utf8(block):
        return None
    try:
        records: list[Any] = _DECODER.decode_lines(block)
        values = _RAW_LINES.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None
    text = np.frombuffer(block, np.uint8)
    starts, ends = _nonblank_lines(block, ends)
    edges = np.concatenate((text[starts], text[ends - 1]))  # a line's first and last bytes
    if (np.isin(edges, _SPACES)).any():  # space around a value, or a blank line of spaces
        return None
    if len(values) != len(starts) or list(map(len, values)) != (ends - starts).tolist():
        return None
    return _vouched_together(records, None)


def _nonblank_lines(block: bytes, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each nonblank line of a block of whole lines starts, and where it ends (its
    \n's place; the last line's may be the block's end), ``ends`` its \n bytes' places."""
    if not len(ends) or ends[-1] != len(block) - 1:
        ends = np.append(ends, len(block))  # the file's last line, without a \n
    starts = np.concatenate(([0], ends[:-1] + 1))
    nonblank = ends > starts
    return starts[nonblank], ends[nonblank]


def records_in(unit: Unit) -> int | None:
    """How many records ``unit`` holds: its raws, or its block's nonblank lines (None: its
    line ends are no int64s, and no blocks are its). The blocks :func:`unit_blocks` makes
    of it hold as many (it vouches for every one, or makes none): a reader holds a
    helper's answer to it (``data.read_workers``).

    >>> records_in(Unit([], None, True, b"{}\\n\\n{}", np.array([2, 3], "<i8").tobytes(),
    ...                 (0.7, 0.3), False, 32))
    2
    """
    if unit.block is None:
        return len(unit.raws)
    ends = unit.ends or b""
    if len(ends) % 8:
        return None
    return len(_nonblank_lines(unit.block, np.frombuffer(ends, "<i8"))[0])


def _is_replay(record: Any) -> bool:
    return record.operator_applied is msgspec.UNSET


_RAW_LINES = msgspec.json.Decoder(msgspec.Raw)
_SPACES = np.frombuffer(b" \t\r", np.uint8)  # JSON's whitespace but \n


def _decoded_together(
    raws: list[Any], keys: list[str] | list[str | None] | None, whole: bool
) -> tuple[list[Any], int] | None:
    """``raws``' records decoded by one msgspec call and settled (as :func:`_vouched`
    reads each, ``keys`` the ids they are mapped under), and how many are replay
    records; None unless every one decodes, alone, and has an id. One call over a batch
    costs about what msgspec's whole-document decode does; a call a record took about
    1.5 times that (issue 90).

    They are decoded as one list, ``"[" + ",".join(raws) + "]"``. Values msgspec split
    from a document (``whole``) are each one whole JSON value. Other bytes (lines) may
    not be: two lines that are not JSON alone can join into records, as many as the
    lines. So the list is split into its values (``msgspec.Raw``) too, and each value must
    span exactly its own piece's text, whitespace stripped: then each piece is that one
    value, alone, as a record at a time reads it."""
    if not raws:
        return None
    # "[" + ",".join(raws) + "]" copied once: the batch's bytes, 12 MB at 8,192 records
    pieces = [b"[", *chain.from_iterable(zip(raws, repeat(b",")))]
    pieces[-1] = b"]"
    joined = b"".join(pieces)
    if not _utf8(joined):
        return None
    try:
        records: list[Any] = _BATCH_DECODER.decode(joined)
        values = None if whole else _VALUES_DECODER.decode(joined)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None
    if len(records) != len(raws):
        return None  # not one value each: each is read alone
    if values is not None and list(map(len, values)) != [len(raw.strip()) for raw in raws]:
        return None  # a value across two pieces (or two in one): each is read alone
    return _vouched_together(records, keys)


def _vouched_together(
    records: list[Any], keys: list[str] | list[str | None] | None
) -> tuple[list[Any], int] | None:
    """Decoded ``records`` settled (:func:`_settled`, ``keys`` the ids they are mapped
    under), and how many are replay records; None unless every one has an id."""
    unset = msgspec.UNSET
    if unset not in [r.trajectory_id for r in records] and unset not in [
        r.operator_applied for r in records
    ]:
        return records, 0  # every one a trajectory with its id: _settled leaves it as is
    named = keys if keys is not None else [None] * len(records)
    settled = [_settled(record, key) for record, key in zip(records, named, strict=True)]
    vouched = [fast for fast in settled if fast is not None]
    if len(vouched) != len(settled):
        return None
    return [record for record, _ in vouched], sum(replay for _, replay in vouched)


class _Batch:
    """Records the fast path vouched for, kept as their structs until :meth:`flush`
    writes them all into one block, a column at a time (``data.batch_block``)."""

    def __init__(self, keep_text: bool) -> None:
        self.keep_text = keep_text
        self.records: list[Any] = []
        self.replays = 0
        self.thresholds: tuple[float, float] | None = None  # the records' labels' (one file's)

    def __len__(self) -> int:
        return len(self.records)

    def add(self, records: list[Any], replays: int, thresholds: tuple[float, float]) -> None:
        self.records.extend(records)
        self.replays += replays
        self.thresholds = thresholds

    def flush(self) -> list[RecordBlock]:
        """The records added since the last flush as one block ([] when none)."""
        if not self.records:
            return []
        assert self.thresholds is not None
        batch = columns_of(self.records, self.replays)
        self.records, self.replays = [], 0
        return [batch_block(batch, self.thresholds, self.keep_text)]
