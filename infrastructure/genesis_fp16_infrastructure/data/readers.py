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

A file's records are parsed into its column blocks by ``data.file_blocks`` (msgspec's
fast path, pydantic deciding every record it refuses), shared with read helpers by
``data.shared_read`` when the run has them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from genesis_fp16_infrastructure.data import file_blocks, read_workers
from genesis_fp16_infrastructure.data.file_blocks import FileBlocks, read_one_by_one
from genesis_fp16_infrastructure.data.file_records import BlockWriter, RecordBlock, Rejected
from genesis_fp16_infrastructure.data.fingerprint import DataFingerprint, fingerprint_of
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.pool_columns import PoolColumns, roomy
from genesis_fp16_infrastructure.data.pool_file import StoredPool
from genesis_fp16_infrastructure.data.pool_join import collect
from genesis_fp16_infrastructure.data.pool_stream import PoolSplitRefused
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink, Recorder
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.data.schema import Example
from genesis_fp16_infrastructure.data.shared_read import read_shared, runs_from, start_helpers
from genesis_fp16_infrastructure.data.sources import (
    Raw,
    RawRun,
    Source,
    list_data_files,
    split_records,
    streams,
)
from genesis_fp16_infrastructure.errors import DataError
from genesis_fp16_infrastructure.machine_memory import paused_gc

logger = logging.getLogger(__name__)


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
        rows = tuple(len(block.trajectory_id) for block in blocks)
        cache.keep_pool(files, columns, duplicates, rejected, rows_per_file=rows)  # in memory
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
    places, kept = found
    # Their quarantined entries go to the read's sink with the pool's, in file order.
    held = _Held()
    old = set(places)
    new = [file for i, file in enumerate(files) if i not in old]
    blocks = [_file_records(file, held, cache, False, workers) for file in new]
    return cache.extend_pool(files, places, kept, blocks)


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
    helper processes that parse stretches of its records meanwhile (``data.shared_read``)."""
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
    start_helpers(file, workers, start)
    # A pool split a window at a time is checked whole only at its end: its quarantined
    # entries are held until then, and written to the sink once it is (decided once: a
    # file grown since is not split, its entries written as they come)
    held = streams(file)
    recorder = Recorder(_Held() if held else sink)
    written = FileBlocks(keep_text, list(blocks))
    try:
        items = split_records(file, recorder, start, first_line, whole=not held)
        _parse(items, written, recorder, keep_text, workers)
    except PoolSplitRefused as exc:  # what it read is dropped, and the file read whole
        logger.warning("data file %s cannot be split a window at a time (%s): read whole",
                       file, exc)  # fmt: skip
        held, recorder, written = False, Recorder(sink), FileBlocks(keep_text, list(blocks))
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
    written: FileBlocks,
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
            read_shared(runs_from(item, items, workers, left), written, recorder, keep_text,
                         workers)  # fmt: skip
            continue
        chunk.append(item)  # a value the slow path parsed (a document msgspec refused)
        if len(chunk) == file_blocks.BATCH_RECORDS:
            read_one_by_one(chunk, written, recorder)
            chunk = []
    read_one_by_one(chunk, written, recorder)
