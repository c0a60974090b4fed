"""Where a read's records come from: each data file split into its records, undecoded.

:func:`list_data_files` names the data files at a path (the file, or a folder's, sorted).
:func:`raw_records` yields every record of one file with where it sits (``line 3``,
``item 0``, ``trajectories['t7']``) and the thresholds its labels use. A record is yielded
as its JSON bytes, left for the fast decoder (``fast_records.decode_record``) to read
into a struct; only a document msgspec cannot split (invalid JSON, a header pydantic
refuses) is parsed the slow way, with the standard library, so that its quarantine reason
reads as it always has. A plain ``.jsonl`` file is yielded a block of whole lines at a
time (:class:`RawRun`'s ``block``), decoded together where each line is one value.

What a file costs itself: a file that vanishes after its folder was listed, that is not
UTF-8, that is not JSON, or a gzip that inflates past ``MAX_DECOMPRESSED_BYTES``, is one
quarantined entry, and the rest of the folder is read.
"""

from __future__ import annotations

import codecs
import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec
import numpy as np
from pydantic import ValidationError

from genesis_fp16_infrastructure.data.pool_stream import split_pool
from genesis_fp16_infrastructure.data.schema import (
    FAILURE_THRESHOLD,
    SUCCESS_THRESHOLD,
    TrajectoryPool,
)
from genesis_fp16_infrastructure.errors import DataError

DATA_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
# A gzip file that inflates past this is a bomb, not a pool (20,000 records are ~20 MiB).
MAX_DECOMPRESSED_BYTES = 256 * 2**20
_CHECK_CHUNK = 16 * 2**20  # bytes of a document checked as UTF-8 at a time
DEFAULTS = (SUCCESS_THRESHOLD, FAILURE_THRESHOLD)
LINES_AT_ONCE = 8_192  # a .jsonl.gz's lines held at a time: ~12 MB of generated records
# A plain .jsonl's bytes held at a time, in whole lines; about as many of a large pool's
# records a run (_scanned_runs)
BLOCK_BYTES = 8 * 2**20
# A .json file past this is split into records a window at a time (pool_stream), not
# read whole: at 1,000,000 records, 1.5 GB of bytes held no longer.
STREAM_ABOVE = 64 * 2**20
# What stops msgspec splitting a document (ValueError: bytes that are not UTF-8), or
# pydantic accepting its header: the slow path reads it and says why.
_UNSPLIT = (
    msgspec.DecodeError,
    msgspec.ValidationError,
    ValueError,
    ValidationError,
    RecursionError,
)

Raw = tuple["Source", Any, tuple[float, float], str | None]  # (where, record, thresholds, key)


@dataclass(frozen=True)
class Source:
    path: Path
    where: str  # "line 3", "trajectories['t7']", "file"


class Sink(Protocol):
    def add(self, source: Source, reason: str, raw: Any) -> None: ...


class _TooLarge(ValueError):
    """A compressed file that inflates past :data:`MAX_DECOMPRESSED_BYTES`."""


def list_data_files(path: Path) -> list[Path]:
    """The data files at ``path``: itself, or the data files under a folder, sorted.

    In a folder, a data file is one whose name ends in one of :data:`DATA_SUFFIXES`;
    everything else is left alone: a name starting with a dot, or inside a folder whose
    name does (``.staging/``, the sample's ``.generated`` marker), and a partial write
    under another name (``pool.json.tmp``, ``pool.jsonl.part``, ``pool.json~``), which
    becomes a data file when its writer renames it into place."""
    if not path.exists():
        raise DataError(f"data path {str(path)!r} does not exist")
    if path.is_file():
        return [path]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.name.endswith(DATA_SUFFIXES)
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and p.is_file()
    )
    if not files:
        raise DataError(
            f"data folder {str(path)!r} holds no data files (expected {', '.join(DATA_SUFFIXES)})"
        )
    return files


def raw_records(file: Path, sink: Sink, start: int = 0, first_line: int = 1) -> Iterator[Raw]:
    """Every record of ``file``: ``(source, record, thresholds, key)``, where a record is
    its JSON bytes or, from the slow path, the parsed object, and ``key`` is the id a
    pool maps it under (None outside a pool). A plain ``.jsonl`` file is read from byte
    ``start``, whose line is number ``first_line`` (an appended file's new lines)."""
    for item in split_records(file, sink, start, first_line):
        if isinstance(item, RawRun):
            yield from item.items()
        else:
            yield item


@dataclass(frozen=True)
class RawRun:
    """Records of one file, in file order: a ``.json`` document's list items (``keys``
    None, the first numbered ``first``) or pool records under their ``keys``, or the
    bytes of a ``.jsonl``'s numbered ``lines``. Those msgspec split from a document (each
    one whole JSON value, undecoded) and lines :func:`split_records` yields together, so
    that a reader decodes them together and makes a record's :class:`Source` only where
    it needs one (a record quarantined); :func:`raw_records` yields them one at a time,
    as it does a document's values the slow path parsed."""

    path: Path
    raws: list[Any]  # msgspec.Raw each, where split_records yields the run; or lines
    keys: list[str] | None
    thresholds: tuple[float, float]
    first: int = 0
    lines: list[int] | None = None  # the raws are these lines of a .jsonl, by number
    # A plain .jsonl's lines as one block of bytes (raws empty): whole lines, the first
    # numbered ``first``, blank ones among them; :meth:`as_lines` splits them
    block: bytes | None = None
    ends: Any = None  # a block's \n bytes, where they are (np.flatnonzero's, int64)
    # A large pool's records as its window scan cut them (pool_stream), bytes each: not
    # split by msgspec, so each is checked to be one value alone, as a line is
    scanned: bool = False

    def __len__(self) -> int:
        return len(self.raws)

    @property
    def whole(self) -> bool:
        """Whether each raw is one whole JSON value as msgspec split it from a document
        (a line's, or a scanned record's, is checked to be one as it is decoded)."""
        return self.lines is None and not self.scanned

    @property
    def streamed(self) -> bool:
        """One of a stream of runs a file is split into as it is read: a ``.jsonl``'s
        block of lines, or a large pool's scanned records."""
        return self.block is not None or self.scanned

    def as_lines(self) -> RawRun:
        """A block's nonblank lines as a run of numbered lines (itself when no block)."""
        if self.block is None:
            return self
        pieces = self.block.split(b"\n")
        if not pieces[-1]:
            pieces.pop()  # the block's last line ends with its \n
        raws, numbers = [], []
        for number, piece in enumerate(pieces, start=self.first):
            if piece.strip():
                raws.append(piece + b"\n")
                numbers.append(number)
        if raws and not self.block.endswith(b"\n"):
            raws[-1] = raws[-1][:-1]  # the file's last line, without a \n
        return RawRun(self.path, raws, None, self.thresholds, lines=numbers)

    def part(self, start: int, stop: int) -> RawRun:
        """The records from ``start`` up to ``stop``."""
        keys = None if self.keys is None else self.keys[start:stop]
        lines = None if self.lines is None else self.lines[start:stop]
        raws = self.raws[start:stop]
        first = self.first + start
        return RawRun(self.path, raws, keys, self.thresholds, first, lines, scanned=self.scanned)

    def items(self) -> Iterator[Raw]:
        """Each record as :func:`raw_records` yields it."""
        if self.block is not None:
            yield from self.as_lines().items()
            return
        if self.lines is not None:
            for number, raw in zip(self.lines, self.raws, strict=True):
                yield Source(self.path, f"line {number}"), raw, self.thresholds, None
            return
        if self.keys is None:
            for index, raw in enumerate(self.raws, start=self.first):
                yield Source(self.path, f"item {index}"), raw, self.thresholds, None
            return
        for key, raw in zip(self.keys, self.raws, strict=True):
            yield Source(self.path, f"trajectories[{key!r}]"), raw, self.thresholds, key


def split_records(
    file: Path, sink: Sink, start: int = 0, first_line: int = 1, whole: bool = False
) -> Iterator[Raw | RawRun]:
    """:func:`raw_records`' records, those msgspec split from a ``.json`` document
    together as one :class:`RawRun`, a ``.jsonl``'s lines as runs of ``LINES_AT_ONCE``,
    a large pool's as runs of about ``BLOCK_BYTES`` (:func:`_scanned_runs`), as its
    split finds them (unless ``whole``): those raise ``pool_stream.PoolSplitRefused``
    at their end where the file is not what they were taken for (:func:`streams`)."""
    try:
        if file.name.endswith(".jsonl"):
            yield from _jsonl_lines(file, start, first_line)
            return
        if not whole and streams(file):
            split = split_pool(file)  # a large pool, a window at a time (pool_stream)
            if split is not None:
                yield from _scanned_runs(file, *split)
                return
        data = _read_bytes(file)
    except FileNotFoundError:  # listed, then gone before it was opened
        why: str | None = "vanished after its folder was listed: not read"
    except _TooLarge as exc:
        why = str(exc)
    except (gzip.BadGzipFile, EOFError) as exc:
        why = f"cannot decode file: {exc}"
    else:
        bad_byte = _not_utf8(data)
        why = None if bad_byte is None else f"binary file, not UTF-8 text ({bad_byte})"
        if why is None and not data.strip():
            why = "empty file"
    if why is not None:  # the whole file is one quarantined entry
        sink.add(Source(file, "file"), why, "")
        return
    if file.name.endswith(".jsonl.gz"):
        yield from _line_runs(file, enumerate(data.splitlines(), start=1))
        return
    yield from _document(file, data, sink)


def _scanned_runs(
    file: Path, thresholds: tuple[float, float], windows: Iterable[list[tuple[str, bytes]]]
) -> Iterator[RawRun]:
    """A large pool's records (``pool_stream.split_pool``'s keys and bytes, a list a
    window), in its order, as runs: a window's records (about ``BLOCK_BYTES``) as soon as
    they come, those of windows that complete fewer than half that joined to the next.
    Held a run at a time, as a ``.jsonl``'s blocks are, so that a read can share them out.

    >>> windows = [[("a", b"{}")] * 2, [("b", b"[]")]]
    >>> runs = _scanned_runs(Path("p.json"), (0.7, 0.3), windows)
    >>> [(run.keys, run.scanned, run.whole) for run in runs]
    [(['a', 'a', 'b'], True, False)]
    """
    keys: list[str] = []
    raws: list[bytes] = []
    size = 0
    for window in windows:
        for key, raw in window:
            keys.append(key)
            raws.append(raw)
            size += len(raw)
        if size >= BLOCK_BYTES // 2:
            yield RawRun(file, raws, keys, thresholds, scanned=True)
            keys, raws, size = [], [], 0
    if raws:
        yield RawRun(file, raws, keys, thresholds, scanned=True)


def streams(file: Path) -> bool:
    """Whether :func:`split_records` splits ``file`` a window at a time (a ``.json`` over
    ``STREAM_ABOVE``): its records then come before the file is checked whole."""
    try:
        return file.name.endswith(".json") and _size(file) > STREAM_ABOVE
    except FileNotFoundError:
        return False  # gone: its read says so


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except FileNotFoundError:
        raise  # gone since its folder was listed: raw_records quarantines it
    except OSError:
        return 0  # the whole-document read says what is wrong with it


def _read_bytes(file: Path) -> bytes:
    try:
        if file.name.endswith(".gz"):
            with gzip.open(file, "rb") as handle:
                # One byte over the limit is enough to know: never inflate the whole bomb.
                data = handle.read(MAX_DECOMPRESSED_BYTES + 1)
            if len(data) > MAX_DECOMPRESSED_BYTES:
                raise _TooLarge(
                    f"decompresses to more than {MAX_DECOMPRESSED_BYTES // 2**20} MiB "
                    "(the limit): not read"
                )
            return data
        return file.read_bytes()
    except (gzip.BadGzipFile, FileNotFoundError):
        raise  # malformed content, or gone since the listing: the caller quarantines it
    except OSError as exc:
        raise DataError(f"cannot read data file {str(file)!r}: {exc.strerror or exc}") from exc


def _not_utf8(data: bytes) -> str | None:
    """Where ``data`` stops being UTF-8 ("byte 0x89 at offset 0"), or None; a chunk at a
    time (the text is never held whole). ASCII (what ``json.dumps`` writes) is UTF-8: a
    scan, no text made (38 MB: a few ms, where decoding it took tens)."""
    if data.isascii():
        return None
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    start = 0
    try:
        for start in range(0, len(data), _CHECK_CHUNK):
            decoder.decode(view[start : start + _CHECK_CHUNK], final=False)
        start = len(data)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        return not_utf8_reason(exc, start - len(decoder.getstate()[0]))
    return None


def not_utf8_reason(exc: UnicodeDecodeError, offset: int = 0) -> str:
    """The first byte that is not UTF-8 and where: ``exc`` from bytes starting at
    ``offset`` of the file or line."""
    byte = exc.object[exc.start] if exc.start < len(exc.object) else None
    where = offset + exc.start
    return f"byte 0x{byte:02x} at offset {where:,}" if byte is not None else f"ends at {where:,}"


def _document(file: Path, data: bytes, sink: Sink) -> Iterator[Raw | RawRun]:
    """A ``.json`` document's records: a list's items, a pool's records, or the document
    as one record. Split by msgspec, they stay undecoded; a document it cannot split is
    parsed whole by the standard library, whose errors make the quarantine reason."""
    split = True  # its values msgspec.Raw, each one whole JSON value
    try:
        document: Any = _split(data)
    except _UNSPLIT:
        split = False
        text = data.decode("utf-8")
        try:
            document = parse_json(text)
        except ValueError as exc:
            sink.add(Source(file, "file"), str(exc), text)
            return
    if isinstance(document, dict) and "trajectories" in document:
        try:
            document = TrajectoryPool.model_validate(document)
        except ValidationError as exc:
            sink.add(Source(file, "file"), f"invalid trajectory pool: {reason(exc)}", document)
            return
    if isinstance(document, list):
        run = RawRun(file, document, None, DEFAULTS)
    elif isinstance(document, TrajectoryPool):
        records = document.trajectories
        thresholds = (document.success_threshold, document.failure_threshold)
        run = RawRun(file, list(records.values()), list(records), thresholds)
    else:
        yield Source(file, "file"), document, DEFAULTS, None
        return
    if split:
        yield run
    else:
        yield from run.items()


def _split(data: bytes) -> list[msgspec.Raw] | TrajectoryPool | bytes:
    """``data`` split by msgspec: a list of undecoded items, a pool whose header pydantic
    accepts (its records undecoded), or the document whole (neither); raises one of
    ``_UNSPLIT`` where it cannot, and the slow path says why. A pool is split in one
    pass (:data:`_PoolSplit`); a document that is not one (no ``trajectories`` object)
    is split again as a list or an object of undecoded values."""
    try:
        split = _POOL_SPLIT.decode(data)
    except msgspec.ValidationError:
        split = None  # not a list, nor an object with a trajectories object: below
    if isinstance(split, list):
        return split
    if split is not None:
        records = split.trajectories
        header = {
            name: json.loads(bytes(raw))
            for name in _HEADER
            if len(raw := getattr(split, name))  # an empty Raw: the key is absent
        }
    else:
        top = msgspec.json.decode(data, type=list[msgspec.Raw] | dict[str, msgspec.Raw])
        if isinstance(top, list):
            return top
        if "trajectories" not in top:
            return data
        records = msgspec.json.decode(top.pop("trajectories"), type=dict[str, msgspec.Raw])
        header = {name: json.loads(bytes(raw)) for name, raw in top.items()}
    # The header validated, the records set after: pydantic never walks them.
    return TrajectoryPool.model_validate(header).model_copy(update={"trajectories": records})


# A pool document as msgspec splits it in one pass: its records undecoded under their
# keys, and each header field the pool's model declares undecoded (an empty Raw where
# absent; pydantic ignores any other key, so this split leaves them out).
_HEADER = tuple(name for name in TrajectoryPool.model_fields if name != "trajectories")
_PoolSplit = msgspec.defstruct(
    "_PoolSplit",
    [("trajectories", dict[str, msgspec.Raw])]
    + [(name, msgspec.Raw, msgspec.Raw(b"")) for name in _HEADER],
)
_POOL_SPLIT = msgspec.json.Decoder(list[msgspec.Raw] | _PoolSplit)


def _jsonl_lines(file: Path, start: int, first_line: int) -> Iterator[RawRun]:
    """A plain JSONL file's records, as blocks of whole lines of about ``BLOCK_BYTES``
    each (the text is never held whole): each line is a record of its own, so a line
    that is not UTF-8 is quarantined alone, like a line that is not JSON."""
    try:
        handle = file.open("rb")
    except FileNotFoundError:
        raise  # gone since its folder was listed: raw_records quarantines it
    except OSError as exc:
        raise DataError(f"cannot read data file {str(file)!r}: {exc.strerror or exc}") from exc
    with handle:
        handle.seek(start)
        number = first_line
        # A block's bytes, then the rest of its last line: whole lines, one copy
        while block := handle.read(BLOCK_BYTES):
            if not block.endswith(b"\n"):
                block += handle.readline()
            ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)  # each line's \n
            yield RawRun(file, [], None, DEFAULTS, first=number, block=block, ends=ends)
            number += len(ends)


def _line_runs(file: Path, lines: Iterable[tuple[int, bytes]]) -> Iterator[RawRun]:
    """Numbered lines, blank ones left out, as runs of at most ``LINES_AT_ONCE``."""
    raws: list[bytes] = []
    numbers: list[int] = []
    for number, raw in lines:
        if raw.strip():
            raws.append(raw)
            numbers.append(number)
            if len(raws) == LINES_AT_ONCE:
                yield RawRun(file, raws, None, DEFAULTS, lines=numbers)
                raws, numbers = [], []
    if raws:
        yield RawRun(file, raws, None, DEFAULTS, lines=numbers)


def parse_json(text: str) -> Any:
    """``json.loads``, with every way hostile JSON fails as a ValueError naming the cause.

    Beyond syntax errors: an integer longer than Python converts (4,300 digits) is a
    ValueError of its own, and nesting deeper than the interpreter's stack a RecursionError.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(json_reason(exc)) from exc
    except RecursionError as exc:
        raise ValueError("invalid JSON: nested too deeply to read") from exc
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string ..."
        raise ValueError(f"invalid JSON: {exc}") from exc


def json_reason(exc: json.JSONDecodeError) -> str:
    """Why text is not JSON, in words a user acts on: "empty", "truncated" (the text ends
    before its value closes: a writer cut off mid-record), or "invalid JSON at line L
    column C" with the parser's complaint."""
    text = exc.doc.rstrip()
    if not text:
        return "empty: no JSON value"
    if exc.pos >= len(text) or exc.msg.startswith("Unterminated string"):
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
        at = f"line {line} column {column}" if line > 1 else f"column {column}"
        return f"truncated: the JSON ends at {at} before its value closes"
    return f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"


def reason(exc: ValidationError) -> str:
    """A pydantic error as one quarantine reason: the first three fields and messages."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error["loc"]) or "record"
        parts.append(f"{where}: {error['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
