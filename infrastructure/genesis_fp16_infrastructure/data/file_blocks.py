"""A file's records parsed into its column blocks, in file order: the fast path a batch
at a time, the slow path a record at a time (:class:`FileBlocks`), a run of them read
in this process (:func:`read_here`) as ``data.readers`` and the read helpers'
``batch_decode`` read them alike.

The fast path (``fast_records.decode_record``): a record's JSON bytes straight to a
typed struct, no dict. ``json.loads`` then one pydantic model per record cost 65 µs a
generated record (100,000 records: 6.5 s); msgspec decodes the same bytes into a typed
struct, checking the same types and bounds, in 9 µs (``benchmarks/pool_scale.py``, issue
36). The pydantic models of ``schema.py`` stay the schema's one authority: msgspec is
strict where pydantic is lax (a float ``3.0`` for an int, ``NaN``, ``true`` for a
number), so every record the fast path refuses is read again the slow way, and the slow
way decides whether it is valid and what its quarantine reason says. The fast path only
ever accepts records the slow one accepts with the same values
(``tests/infrastructure/data/test_fast_records.py`` holds the pairs).

A record's shape is decided as the slow path does: a replay-buffer record has no
``operator_applied`` and at least one of the replay keys; anything else is a trajectory.

A file's records are read ``BATCH_RECORDS`` at a time, decoded by one call when every
one of them decodes, alone, and has an id (``batch_decode._decoded_together``): a
``.json`` document's as msgspec split them, a plain ``.jsonl``'s block of lines by one
``decode_lines`` when each line is one value (:func:`_read_block`), a ``.jsonl.gz``'s
lines likewise (:func:`_read_run`), a large pool's records as its window scan cut them
(``sources.RawRun.scanned``). The records the fast path vouched for are written into the
file's block a batch at a time (``batch_decode._Batch``, ``data.batch_block``): the same
block a record at a time made, byte for byte (issue 90; ``benchmarks/read_floor.py``
times the read against msgspec alone on the same bytes).
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import ValidationError

from genesis_fp16_infrastructure.data.batch_decode import (
    _Batch,
    _decoded_lines,
    _decoded_together,
    line_batches,
)
from genesis_fp16_infrastructure.data.fast_records import _REPLAY_KEYS, _labelled, _vouched
from genesis_fp16_infrastructure.data.file_records import BlockWriter, FileRecord, RecordBlock
from genesis_fp16_infrastructure.data.quarantine import unencodable
from genesis_fp16_infrastructure.data.schema import ReplayRecord, Trajectory
from genesis_fp16_infrastructure.data.sources import (
    Raw,
    RawRun,
    Sink,
    Source,
    not_utf8_reason,
    parse_json,
    reason,
)

# A file's parsed records become a column block every this many, so that a large file's
# records are never all objects at once (a million of them held ~0.5 GB more at the peak).
BLOCK_RECORDS = 131_072


# A file's records are read this many at a time (:func:`_read_run`), and the fast path's wait
# as their decoded structs, text and all (3.0 KB a generated record, tracemalloc), until
# their batch is written into columns: ~24 MB, not a block's 131,072 structs (~390 MB).
BATCH_RECORDS = 8_192


def read_here(run: RawRun, written: FileBlocks, sink: Sink) -> None:
    """A run read in this process: a ``.jsonl``'s block, or records a batch at a time."""
    if run.block is not None:
        _read_block(run, written, sink)
        return
    for at in range(0, len(run), BATCH_RECORDS):
        _read_run(run.part(at, at + BATCH_RECORDS), written, sink)


def _read_run(run: RawRun, written: FileBlocks, sink: Sink) -> None:
    """Records msgspec split from a document, lines, or a large pool's scanned records, in
    file order, into ``written``: decoded together when the fast path vouches for every
    one, each alone (:func:`_decoded_together`), else one at a time
    (:func:`read_one_by_one`)."""
    together = _decoded_together(run.raws, run.keys, whole=run.whole)
    if together is None:
        read_one_by_one(list(run.items()), written, sink)
    else:
        written.fast_run(*together, run.thresholds)


def _read_block(run: RawRun, written: FileBlocks, sink: Sink) -> None:
    """A plain ``.jsonl``'s block of lines, in file order, into ``written``: decoded by
    one msgspec call when each nonblank line is one value the fast path vouches for
    (:func:`_decoded_lines`), else as numbered lines (:func:`_read_run`)."""
    assert run.block is not None
    together = _decoded_lines(run.block, run.ends)
    if together is None:
        lines = run.as_lines()
        for at in range(0, len(lines), BATCH_RECORDS):
            _read_run(lines.part(at, at + BATCH_RECORDS), written, sink)
        return
    for part, replays in line_batches(*together, BATCH_RECORDS):
        written.fast_run(part, replays, run.thresholds)


def read_one_by_one(items: list[Raw], written: FileBlocks, sink: Sink) -> None:
    """Records of a file, in its order, into ``written``, one at a time: each the fast
    path refuses decided by the slow one."""
    for source, raw, thresholds, key in items:
        fast = _vouched(raw, key)
        if fast is not None:
            written.fast(fast, thresholds)
            continue
        record = _read_slow(source, raw, thresholds, key, sink)
        if record is not None:
            written.slow(record)


class FileBlocks:
    """A file's records written into blocks in file order: the fast path's a batch at a
    time (:class:`_Batch`), the slow path's a record at a time (``BlockWriter``), each
    written out before the other's turn, so that at most one of the two holds records."""

    def __init__(self, keep_text: bool, blocks: list[RecordBlock]) -> None:
        self.keep_text, self.blocks = keep_text, blocks
        self.batch, self.writer = _Batch(keep_text), BlockWriter(keep_text)

    def fast(self, fast: tuple[Any, bool], thresholds: tuple[float, float]) -> None:
        self.fast_run([fast[0]], int(fast[1]), thresholds)

    def fast_run(self, records: list[Any], replays: int, thresholds: tuple[float, float]) -> None:
        """Vouched records, ``replays`` of them replay records, in file order."""
        if self.writer.ids or self.batch.thresholds not in (None, thresholds):
            self.flush()
        if len(self.batch) + len(records) > BATCH_RECORDS:
            self.blocks.extend(self.batch.flush())
        self.batch.add(records, replays, thresholds)
        if len(self.batch) >= BATCH_RECORDS:
            self.blocks.extend(self.batch.flush())

    def slow(self, record: FileRecord) -> None:
        if len(self.batch):
            self.flush()
        self.writer.add(record)
        if len(self.writer.ids) == BLOCK_RECORDS:  # a large file's records live as columns
            self.flush()

    def flush(self) -> None:
        """Write out what either holds."""
        self.blocks.extend(self.batch.flush())
        if self.writer.ids:
            self.blocks.append(self.writer.block([]))
            self.writer = BlockWriter(self.keep_text)


def _read_slow(
    source: Source, raw: Any, thresholds: tuple[float, float], key: str | None, sink: Sink
) -> FileRecord | None:
    """One record the slow way: ``raw`` is bytes the fast path refused, parsed by the
    stdlib with its reasons word for word as before (a line that is not UTF-8, invalid
    JSON), or an object the slow split already parsed; then validated (:func:`_validate`)."""
    if isinstance(raw, bytes | msgspec.Raw):
        data = bytes(raw)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            why = f"binary line, not UTF-8 text ({not_utf8_reason(exc)})"
            sink.add(source, why, data.decode("utf-8", "replace"))
            return None
        try:
            raw = parse_json(text)
        except ValueError as exc:
            sink.add(source, str(exc), text.rstrip("\n"))
            return None
    if key is not None and isinstance(raw, dict) and "trajectory_id" not in raw:
        raw = {**raw, "trajectory_id": key}  # the mapping key is the id
    return _validate(source, raw, thresholds, sink)


def _validate(
    source: Source, raw: Any, thresholds: tuple[float, float], sink: Sink
) -> FileRecord | None:
    """The slow path: ``raw`` validated by the schema's pydantic models, and labelled;
    None (quarantined, with pydantic's reason) when it is not a valid record."""
    if not isinstance(raw, dict):
        sink.add(source, f"record is a JSON {type(raw).__name__}, not an object", raw)
        return None
    bad_text = unencodable(raw)
    if bad_text is not None:
        sink.add(source, bad_text, raw)
        return None
    is_replay = "operator_applied" not in raw and bool(_REPLAY_KEYS & raw.keys())
    model = ReplayRecord if is_replay else Trajectory
    try:
        record = model.model_validate(raw)
    except ValidationError as exc:
        sink.add(source, reason(exc), raw)
        return None
    return _labelled(record, is_replay, thresholds)
