"""A file's records shared between the run and its read helpers (``data.read_workers``):
its runs (a document's records, a ``.jsonl``'s blocks, a large pool's scanned windows)
cut into units (:func:`runs_from`), handed to the helpers as they come and read here
where a helper cannot, their blocks joined in file order (:func:`read_shared`): the same
records, hashes and quarantined entries as a read alone.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.data import file_blocks, read_workers
from genesis_fp16_infrastructure.data.batch_decode import Unit
from genesis_fp16_infrastructure.data.file_blocks import FileBlocks, read_here
from genesis_fp16_infrastructure.data.sources import Raw, RawRun, Sink


def start_helpers(file: Path, workers: int, start: int) -> None:
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


def runs_from(
    run: RawRun, items: Iterator[Raw | RawRun], workers: int, left: list[Raw | RawRun]
) -> Iterator[RawRun]:
    """``run`` cut into the units a read shares; a ``.jsonl``'s block or a large pool's
    run (:attr:`RawRun.streamed`) with those after it too, each split when the read gets
    to it, and the first item after them that is not one put in ``left``. The last one
    or two units of a run wait for the next run to be taken: those of the last are cut
    in two (:func:`_finer`) when the file is more than one unit (shared with helpers, as
    :func:`read_shared` decides)."""
    current, given = run, 0  # the units yielded so far
    while True:
        parts = _parts(current, workers)
        held = 2 if len(parts) > 2 else 1
        last = parts[-held:]
        yield from parts[:-held]
        after = _next_streamed(items, left) if current.streamed else None
        if after is None:
            yield from _finer(last) if given + len(parts) > 1 else last
            return
        yield from last
        given, current = given + len(parts), after


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


def read_shared(
    runs: Iterable[RawRun], written: FileBlocks, sink: Sink, keep_text: bool, workers: int
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
            read_here(run, written, sink)
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
                read_here(run, written, sink)
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


def _unit(run: RawRun, keep_text: bool) -> Unit:
    """``run`` as a helper process takes it (``batch_decode.Unit``)."""
    batch = file_blocks.BATCH_RECORDS
    if run.block is not None:
        ends = np.asarray(run.ends, "<i8").tobytes()
        return Unit([], None, True, run.block, ends, run.thresholds, keep_text, batch)
    raws = [bytes(raw) for raw in run.raws]
    return Unit(raws, run.keys, run.whole, None, None, run.thresholds, keep_text, batch)
