"""Read trajectory pools and replay buffers from files and folders into labelled examples.

A path may be one file or a folder (searched recursively, in sorted order). Files are
``.json`` (a trajectory pool, a list of records or one record), ``.jsonl`` (one record a
line), or gzip of either (``.json.gz``, ``.jsonl.gz``); in a folder, dotfiles, dot-folders
and partial writes under other names (``*.tmp``) are left alone (:func:`list_data_files`).

A malformed record, line or file never stops a read: it is skipped, counted, and written
with its reason to the quarantine file. So is a file that vanishes between the listing of
its folder and its read (a writer rotating files): the rest of the folder is read. What
does stop it is input the user has to fix: a missing path, a file the process may not
open, or nothing labelled to train on (:class:`DataError`).

A plain ``.jsonl`` file is read a block of whole lines at a time (``sources.BLOCK_BYTES``):
its text is never held whole, so its records, not its bytes, are what a read costs in
memory, and a line that is not UTF-8 is quarantined alone.

>>> from genesis_fp16_infrastructure.data.synthetic import write_pool
>>> pool = write_pool(Path("data"), count=200, seed=1)  # in data/trajectory_pools/<agent>/
>>> _ = (pool.parent / "more.jsonl").write_text('{"not": "a record"}\\n')
>>> result = read_trajectories(Path("data/trajectory_pools"), quarantine=Path("q.jsonl"))
>>> len(result.examples), result.quarantined
(194, 1)

The fast path of a read (``fast_records.decode_record``): a record's JSON bytes straight to a
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
one of them decodes, alone, and has an id (:func:`_decoded_together`): a ``.json``
document's as msgspec split them, a plain ``.jsonl``'s block of lines by one
``decode_lines`` when each line is one value (:func:`_read_block`), a ``.jsonl.gz``'s
lines likewise (:func:`_read_run`), a large pool's records as its window scan cut them
(``sources.RawRun.scanned``), which, as a ``.jsonl``'s blocks are, a read shares out.
The records the fast path vouched for are written into the file's block a batch at a
time (:class:`_Batch`, ``data.batch_block``): the same block a record at a time made,
byte for byte (issue 90; ``benchmarks/read_floor.py`` times the read against msgspec
alone on the same bytes).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from pydantic import ValidationError

from genesis_fp16_infrastructure.data import read_workers
from genesis_fp16_infrastructure.data.batch_decode import (
    Unit,
    _Batch,
    _decoded_lines,
    _decoded_together,
    line_batches,
)
from genesis_fp16_infrastructure.data.fast_records import _REPLAY_KEYS, _labelled, _vouched
from genesis_fp16_infrastructure.data.file_records import (
    BlockWriter,
    FileRecord,
    RecordBlock,
    Rejected,
)
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, collect, roomy
from genesis_fp16_infrastructure.data.pool_file import StoredPool
from genesis_fp16_infrastructure.data.pool_stream import PoolSplitRefused
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink, Recorder, unencodable
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.schema import Example, ReplayRecord, Trajectory
from genesis_fp16_infrastructure.data.sources import (
    Raw,
    RawRun,
    Sink,
    Source,
    list_data_files,
    not_utf8_reason,
    parse_json,
    reason,
    split_records,
    streams,
)
from genesis_fp16_infrastructure.errors import DataError
from genesis_fp16_infrastructure.machine_memory import paused_gc

logger = logging.getLogger(__name__)

# A file's parsed records become a column block every this many, so that a large file's
# records are never all objects at once (a million of them held ~0.5 GB more at the peak).
BLOCK_RECORDS = 131_072
# A file's records are read this many at a time (_read_run), and the fast path's wait
# as their decoded structs, text and all (3.0 KB a generated record, tracemalloc), until
# their batch is written into columns: ~24 MB, not a block's 131,072 structs (~390 MB).
BATCH_RECORDS = 8_192


class DataTooLarge(DataError):
    """Data whose files together hold more bytes than the run may read; nothing was read.

    ``size`` and ``limit`` are in bytes; the message names both.
    """

    def __init__(self, message: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.size, self.limit = size, limit


def check_data_size(path: Path, files: list[Path], max_bytes: int) -> None:
    """:class:`DataTooLarge` when ``files`` together hold more than ``max_bytes``.

    Parsed records cost several times their bytes (a JSON pool about 7x, measured in
    docs/data.md), all of them held at once, so the size is checked before any is read.
    A ``.gz`` file counts its compressed bytes (each inflates to at most
    MAX_DECOMPRESSED_BYTES). A file gone since the listing counts nothing: the read
    quarantines it.
    """
    size = 0
    for file in files:
        try:
            size += file.stat().st_size
        except FileNotFoundError:
            continue
    if size > max_bytes:
        raise DataTooLarge(
            f"data {str(path)!r} holds {_size(size)} in {len(files)} file(s), "
            f"over the limit of {_size(max_bytes)}: not read",
            size,
            max_bytes,
        )


def _start_helpers(file: Path, workers: int, start: int) -> None:
    """The process's read helpers started (``data.read_workers``), when ``workers`` and
    the bytes of ``file`` about to be parsed (those from byte ``start``: an appended
    ``.jsonl``'s new lines) come to ``START_BYTES``: started before the split (each takes
    a fifth of a second to start), so that they are up when the file is shared. What the
    record cache holds is never parsed, and starts none. A read asked for none
    (READ_WORKERS set to 0 since) stops those an earlier read started."""
    if workers <= 0:
        read_workers.workers(0)
        return
    with contextlib.suppress(OSError):  # gone since the listing: its read says so
        if file.stat().st_size - start >= read_workers.START_BYTES:
            read_workers.workers(workers)


def _size(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB ({count:,} bytes)"


@dataclass(eq=False)
class ReadResult:
    """Labelled examples, the recorded scores of every record, and what was skipped.

    A read keeps its records as columns (``columns``, ``data.pool_columns``): the run's
    hot path reads those. ``examples`` (the labelled records as objects) and ``pool`` (every
    record, for lineage, with ``pool.scores``: id -> recorded success score) are built
    from them when first asked."""

    columns: PoolColumns
    quarantined: int = 0
    duplicates: int = 0
    unlabelled: int = 0
    files: int = 0
    kept_fingerprint: DataFingerprint | None = None  # the record cache's, if it made one

    @cached_property
    def fingerprint(self) -> DataFingerprint:
        """The fingerprint of the labelled records as read (``data.fingerprint``): the one
        the record cache kept with the pool (a later read in a resident process sorted in
        only its new records), else worked out now from the columns."""
        if self.kept_fingerprint is not None:
            return self.kept_fingerprint
        return fingerprint_of(self.columns)

    @cached_property
    def examples(self) -> list[Example]:
        return self.columns.examples()

    @cached_property
    def pool(self) -> Pool:
        return self.columns.pool()

    @property
    def labelled(self) -> int:
        """How many examples, without building them."""
        return len(self.columns.labelled)


def read_trajectories(
    path: Path,
    quarantine: Path | None = None,
    max_bytes: int | None = None,
    cache: RecordCache | None = None,
    keep_text: bool = True,
    workers: int = 0,
) -> ReadResult:
    """Read every record under ``path`` and derive the labelled examples.

    Duplicate trajectory ids are read once (the first in sorted file order wins).
    Pending and executing records give no example, but their ids still resolve as
    parents. Raises :class:`DataError` for a missing path, an unreadable file, or no
    labelled record at all, and :class:`DataTooLarge` before reading anything when the
    files together hold more than ``max_bytes`` (None: no limit). With a ``cache``
    (``genesis_fp16_infrastructure.data.record_cache``), a file whose bytes were read before is
    taken from it, records and quarantined entries alike, instead of parsed again; a slim
    read whose files are all unchanged takes the joined pool whole.

    ``keep_text=False`` reads for training only: each attempt keeps what the encoder,
    the lineage and the drift report read (id, agent, time, operator, generation,
    parents, tools, pattern, and its own numbers worked out from the rest) and lets go
    of its change, files, strategy and diagnosis (a third of a generated record's
    memory), and each record its fingerprint hash worked out before (``PoolColumns.key``).

    ``workers``: helper processes that parse a large file's new records beside this one
    (``data.read_workers``; the daemon's ``GENESIS_FP16_READ_WORKERS``); 0 parses them
    here alone. Either way the same records, hashes, cache entries and quarantine.
    """
    path = Path(path)
    files = list_data_files(path)
    if max_bytes is not None:
        check_data_size(path, files, max_bytes)
    before = read_workers.units_so_far()
    sink = QuarantineSink(quarantine)
    try:
        with paused_gc():  # a million records, no cycle among them (machine_memory)
            columns, duplicates, seen = _pool(files, sink, cache, keep_text, workers)
    finally:
        sink.close()
    unlabelled = len(columns) - len(columns.labelled)
    result = ReadResult(columns, sink.count, duplicates, unlabelled, len(files), seen)
    if not result.labelled:
        raise DataError(
            f"no labelled records in {str(path)!r} ({len(columns)} valid, "
            f"{result.unlabelled} unfinished or unlabelled, {result.quarantined} quarantined): "
            + _no_labels_cause(path, files, sink, len(columns))
        )
    logger.info(
        "read %d examples from %d files (%d quarantined, %d duplicates, %d unlabelled)%s",
        result.labelled,
        result.files,
        result.quarantined,
        result.duplicates,
        result.unlabelled,
        read_workers.said_since(before, workers),
    )
    return result


def _no_labels_cause(path: Path, files: list[Path], sink: QuarantineSink, valid: int) -> str:
    """Why a read found nothing to train on, in a few words, and where the reasons are:
    the first quarantine reasons ("pool.json: invalid JSON at line 1 column 1: ..."),
    or that the files are empty or hold no record, or that none is labelled."""
    if sink.count:
        named = [_place(path, *entry) for entry in sink.first[:2]]
        more = f" (+{sink.count - len(named)} more)" if sink.count > len(named) else ""
        kept = f"; every reason in {sink.path}" if sink.path is not None else ""
        return "; ".join(named) + more + kept
    if valid:
        return "every record is unfinished (pending, executing) or has no score or status"
    sizes = [_stripped_size(file) for file in files]
    if not any(sizes):
        return "empty file" if len(files) == 1 else f"all {len(files)} files are empty"
    return "the data holds no record"


def _place(path: Path, file: Path, where: str, reason: str) -> str:
    """One quarantine reason, shortened, with its file (in a folder) and position."""
    reason = reason if len(reason) <= 160 else reason[:157] + "..."
    place = ([file.name] if path.is_dir() else []) + ([where] if where != "file" else [])
    return f"{' '.join(place)}: {reason}" if place else reason


def _stripped_size(file: Path) -> int:
    """Whether ``file`` holds more than whitespace (its first KiB decides), as a size."""
    try:
        with file.open("rb") as handle:
            return len(handle.read(1024).strip()) or int(file.stat().st_size > 1024)
    except OSError:
        return 0


def _pool(
    files: list[Path],
    sink: QuarantineSink,
    cache: RecordCache | None,
    keep_text: bool,
    workers: int = 0,
) -> tuple[PoolColumns, int, DataFingerprint | None]:
    """The files' records joined (the first record of an id wins, in file order), the
    duplicates left out, and the pool's fingerprint when the cache made one; a slim read
    of unchanged files takes the joined pool from ``cache`` whole, writing its quarantined
    entries to ``sink`` as a parse would, and one of unchanged files and new ones after
    them grows the pool kept in memory by the new files' records alone."""
    slim = not keep_text
    stored = cache.load_pool(files) if cache is not None and slim else None
    if stored is None and cache is not None and slim:
        stored = _grown(files, cache, workers)
    if stored is not None and cache is not None:
        for index, entry in stored.rejected:
            sink.add(Source(files[index], entry.where), entry.reason, entry.text)
        return stored.columns, stored.duplicates, cache.fingerprint
    blocks = [_file_records(file, sink, cache, keep_text, workers) for file in files]
    columns, duplicates = collect(blocks, keep_text)
    if cache is not None and slim and cache.memory is not None:
        # Kept for a later read to grow: its columns with room for new rows after them
        columns = roomy(columns)
    if cache is not None and slim:
        rejected = [(i, entry) for i, block in enumerate(blocks) for entry in block.rejected]
        cache.store_pool(files, columns, duplicates, rejected)
        cache.keep_pool(files, columns, duplicates, rejected)  # a resident process's memory
    if cache is not None:
        cache.say_kept(len(columns))
    return columns, duplicates, None if cache is None else cache.fingerprint


def _grown(files: list[Path], cache: RecordCache, workers: int = 0) -> StoredPool | None:
    """The pool kept in memory of the first files, unchanged, grown by the records of the
    files after them (issue 90: a later run joins what is new); None when no kept pool is
    such, or the growth finds one id hash for two ids (the read joins every file)."""
    found = cache.grown_pool(files)
    if found is None:
        return None
    count, kept = found
    # Their quarantined entries go to the read's sink with the pool's, in file order.
    held = _Held()
    blocks = [_file_records(file, held, cache, False, workers) for file in files[count:]]
    return cache.extend_pool(files, count, kept, blocks)


class _Held(QuarantineSink):
    """A sink that writes and says nothing: a file's entries are held in its block."""

    def __init__(self) -> None:
        super().__init__(None)

    def _say_file(self) -> None:
        pass


def _file_records(
    file: Path,
    sink: QuarantineSink,
    cache: RecordCache | None,
    keep_text: bool,
    workers: int = 0,
) -> RecordBlock:
    """The valid records of one file, in file order (duplicates within it included),
    each quarantined entry written to ``sink``; from ``cache`` when it has the file.
    ``keep_text=False``: the block keeps no text (see read_trajectories). ``workers``:
    helper processes that parse stretches of its records meanwhile (:func:`_read_shared`)."""
    slim = not keep_text
    stored = cache.load(file, slim) if cache is not None else None
    blocks: list[RecordBlock] = []
    start, first_line = 0, 1
    if stored is not None:  # the whole file; or an appended .jsonl's earlier lines, then the new
        _write_rejected(sink, file, stored.block.rejected)
        if stored.offset is None:
            return stored.block
        start, first_line = stored.offset, stored.lines + 1
        blocks.append(stored.block)
    _start_helpers(file, workers, start)
    # A pool split a window at a time is checked whole only at its end: its quarantined
    # entries are held until then, and written to the sink once it is (decided once: a
    # file grown since is not split, its entries written as they come)
    held = streams(file)
    recorder = Recorder(_Held() if held else sink)
    written = _FileBlocks(keep_text, list(blocks))
    try:
        items = split_records(file, recorder, start, first_line, whole=not held)
        _parse(items, written, recorder, keep_text, workers)
    except PoolSplitRefused as exc:  # what it read is dropped, and the file read whole
        logger.warning("data file %s cannot be split a window at a time (%s): read whole",
                       file, exc)  # fmt: skip
        held, recorder, written = False, Recorder(sink), _FileBlocks(keep_text, list(blocks))
        _parse(split_records(file, recorder, whole=True), written, recorder, keep_text, workers)
    if held:
        _write_rejected(sink, file, recorder.rejected)
    written.flush()
    block = RecordBlock.concat([*written.blocks, BlockWriter(keep_text).block(recorder.rejected)])
    if cache is not None:  # a file gone since the listing is not stored: its stat fails
        cache.store(file, block, slim)
    return block


def _write_rejected(sink: QuarantineSink, file: Path, rejected: Iterable[Rejected]) -> None:
    """A file's quarantined entries kept apart (a cache's, a split's held until its
    file was checked) written to ``sink`` as a parse writes them."""
    for entry in rejected:
        sink.add(Source(file, entry.where), entry.reason, entry.text)


def _parse(
    items: Iterable[Raw | RawRun],
    written: _FileBlocks,
    recorder: Recorder,
    keep_text: bool,
    workers: int,
) -> None:
    """A file's ``items`` (``split_records``') parsed into ``written``, in file order."""
    items = iter(items)
    chunk: list[Raw] = []
    left: list[Raw | RawRun] = []  # the item after a stream of runs, its turn next
    while (item := left.pop() if left else next(items, None)) is not None:
        if isinstance(item, RawRun):  # a document's records, lines, a stream of runs
            _read_shared(_runs_from(item, items, workers, left), written, recorder, keep_text,
                         workers)  # fmt: skip
            continue
        chunk.append(item)  # a value the slow path parsed (a document msgspec refused)
        if len(chunk) == BATCH_RECORDS:
            _read_one_by_one(chunk, written, recorder)
            chunk = []
    _read_one_by_one(chunk, written, recorder)


def _runs_from(
    run: RawRun, items: Iterator[Raw | RawRun], workers: int, left: list[Raw | RawRun]
) -> Iterator[RawRun]:
    """``run`` cut into the units a read shares; a ``.jsonl``'s block or a large pool's
    run (:attr:`RawRun.streamed`) with those after it too, each split when the read gets
    to it, and the first item after them that is not one put in ``left``. The last one
    or two units of a run wait for the next run to be taken: those of the last are cut
    in two (:func:`_finer`): a file of more than one unit, those of one run or of several
    runs of one unit each."""
    current, shared = run, False
    while True:
        parts = _parts(current, workers)
        shared = shared or len(parts) > 1  # shared with helpers: more than one unit
        held = 2 if len(parts) > 2 else 1
        yield from parts[:-held]
        after = _next_streamed(items, left) if current.streamed else None
        if after is None:
            shared = shared or current is not run  # several runs: shared, one unit each
            yield from _finer(parts[-held:]) if shared else parts[-held:]
            return
        yield from parts[-held:]
        current = after


def _next_streamed(items: Iterator[Raw | RawRun], left: list[Raw | RawRun]) -> RawRun | None:
    """The next of ``items`` when it is a streamed run; else None, the item (if any) put
    in ``left``."""
    item = next(items, None)
    if isinstance(item, RawRun) and item.streamed:
        return item
    if item is not None:
        left.append(item)
    return None


def _finer(parts: list[RawRun]) -> list[RawRun]:
    """A file's last units, each cut in two (one of a single record or line as it is).
    A shared read's end waits for the units the helpers still hold (two at most each):
    smaller last units are a shorter wait (25,000 records of a ``.json``, one helper,
    the last two units halved: the read 0.383 -> 0.367 s, medians, lower in 6 pairs of 6,
    ``benchmarks/results/read_tail_90_cpu-2-cores.md``)."""
    return [half for part in parts for half in _cut(part, 2)]


def _read_shared(
    runs: Iterable[RawRun], written: _FileBlocks, sink: Sink, keep_text: bool, workers: int
) -> None:
    """``runs`` (a file's, in file order, taken as they come) into ``written``: shared
    between this process and helper processes (``data.read_workers``), their blocks
    joined in file order; a run the fast path refused (or a helper failed) is read here
    in its turn, record by record where it must, its quarantined entries in file order,
    as without helpers."""
    runs = iter(runs)
    first = list(itertools.islice(runs, 2))
    helpers = read_workers.workers(workers) if len(first) > 1 else None
    if helpers is None:
        for run in itertools.chain(first, runs):
            _read_here(run, written, sink)
        return
    held: deque[RawRun] = deque()  # taken by the helpers' round, not yet joined

    def units() -> Iterator[Unit]:
        for run in itertools.chain(first, runs):
            held.append(run)
            yield _unit(run, keep_text)

    with contextlib.closing(helpers.read(units())) as replies:
        for reply in replies:
            run = held.popleft()
            if reply is None:
                _read_here(run, written, sink)
            else:
                written.flush()
                written.blocks.extend(reply)


def _parts(run: RawRun, workers: int) -> list[RawRun]:
    """``run`` cut into the units a read with ``workers`` helpers shares
    (``read_workers.shares``), in file order."""
    count = len(run.ends) if run.block is not None else len(run)
    return _cut(run, read_workers.shares(count, workers))


def _cut(run: RawRun, count: int) -> list[RawRun]:
    """``run`` cut into ``count`` parts at most, in file order: a block at line ends,
    records by count."""
    if run.block is not None:
        return _block_parts(run, count)
    size = max(1, -(-len(run) // count))
    return [run.part(at, at + size) for at in range(0, len(run), size)]


def _block_parts(run: RawRun, parts: int) -> list[RawRun]:
    """A ``.jsonl`` block of lines cut into ``parts`` blocks of whole lines (about as many
    lines each), numbered on from the block's first: each read alone reads its lines as
    the whole block would (a block may be cut anywhere: ``test_jsonl_blocks.py``).

    >>> run = RawRun(Path("d.jsonl"), [], None, (0.7, 0.3), first=5, block=b"a\\nb\\n\\nc",
    ...              ends=np.array([1, 3, 4]))
    >>> [(p.first, p.block, p.ends.tolist()) for p in _block_parts(run, 2)]
    [(5, b'a\\n', [1]), (6, b'b\\n\\nc', [1, 2])]
    """
    assert run.block is not None
    ends = np.asarray(run.ends, np.int64)
    if parts <= 1 or len(ends) < parts:
        return [run]
    cuts = [len(ends) * k // parts for k in range(parts + 1)]  # lines before each part
    out = []
    for lo, hi in itertools.pairwise(cuts):
        start = 0 if lo == 0 else int(ends[lo - 1]) + 1
        stop = len(run.block) if hi == len(ends) else int(ends[hi - 1]) + 1
        block, first = run.block[start:stop], run.first + lo
        out.append(
            RawRun(run.path, [], None, run.thresholds, first, block=block, ends=ends[lo:hi] - start)
        )
    return out


def _read_here(run: RawRun, written: _FileBlocks, sink: Sink) -> None:
    """A run read in this process: a ``.jsonl``'s block, or records a batch at a time."""
    if run.block is not None:
        _read_block(run, written, sink)
        return
    for at in range(0, len(run), BATCH_RECORDS):
        _read_run(run.part(at, at + BATCH_RECORDS), written, sink)


def _unit(run: RawRun, keep_text: bool) -> Unit:
    """``run`` as a helper process takes it (``batch_decode.Unit``)."""
    if run.block is not None:
        ends = np.asarray(run.ends, "<i8").tobytes()
        return Unit([], None, True, run.block, ends, run.thresholds, keep_text, BATCH_RECORDS)
    raws = [bytes(raw) for raw in run.raws]
    return Unit(raws, run.keys, run.whole, None, None, run.thresholds, keep_text, BATCH_RECORDS)


def _read_run(run: RawRun, written: _FileBlocks, sink: Sink) -> None:
    """Records msgspec split from a document, lines, or a large pool's scanned records, in
    file order, into ``written``: decoded together when the fast path vouches for every
    one, each alone (:func:`_decoded_together`), else one at a time
    (:func:`_read_one_by_one`)."""
    together = _decoded_together(run.raws, run.keys, whole=run.whole)
    if together is None:
        _read_one_by_one(list(run.items()), written, sink)
    else:
        written.fast_run(*together, run.thresholds)


def _read_block(run: RawRun, written: _FileBlocks, sink: Sink) -> None:
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


def _read_one_by_one(items: list[Raw], written: _FileBlocks, sink: Sink) -> None:
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


class _FileBlocks:
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
