"""Each data file's records, kept after a read, by the file's content digest.

A pool that grows by a new file, or by a day's ``.jsonl``, leaves most of its files as
they were. :class:`RecordCache` keeps what a read made of each file (its valid records as
:class:`~genesis_fp16_infrastructure.data.file_records.FileRecord`: pre-attempt input, label,
score; and its quarantined entries) in one msgpack file per file's bytes, named by the
content digest of the data manifest (``genesis_fp16_infrastructure.data.manifest``) and
``CACHE_VERSION``. The next read takes an unchanged file from there instead of parsing
and validating it again; a changed file is read alone.

A file is taken from the cache only while its size and mtime are still those the
manifest hashed, and stored only when they still are after its read: a file appended or
rewritten while it was read is read again next time, never remembered under the old
bytes' digest. A file modified within ``RACY_NS`` of the manifest's scan is never
stored (its mtime cannot vouch for its bytes). Entries no file of the manifest uses are
deleted after each read.

    cache = RecordCache(state / "record_cache", manifest)
    data = read_trajectories(path, quarantine, cache=cache, keep_text=False)
    cache.prune()
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Hashable
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from genesis_fp16_infrastructure.atomic import write_atomic
from genesis_fp16_infrastructure.data.attempt_numbers import (
    NUMBERS_VERSION,
    OWN_FEATURES,
    own_numbers,
    pack,
)
from genesis_fp16_infrastructure.data.file_records import FileRecord, Head, Rejected
from genesis_fp16_infrastructure.data.manifest import RACY_NS, FileState, Manifest, file_digest
from genesis_fp16_infrastructure.data.schema import SCHEMA_VERSION, AttemptInput, Label
from genesis_fp16_infrastructure.data.slot_objects import objects

logger = logging.getLogger(__name__)

# Bump when FileRecord, AttemptInput, Label or how a record becomes them changes; the
# own numbers' version is part of it (data.attempt_numbers).
# 4: columns, not rows; 5: each record's id hash; 6: columns by field name
CACHE_VERSION = f"6.s{SCHEMA_VERSION}.n{NUMBERS_VERSION}"
OWN_BYTES = 8 * len(OWN_FEATURES)  # a record's packed own numbers (attempt_numbers.pack)
_H = TypeVar("_H", bound=Hashable)


class RecordCache:
    """Per-file records by content digest, under ``folder``; ``manifest`` vouches for
    which digest each file's current bytes have."""

    def __init__(self, folder: Path, manifest: Manifest) -> None:
        self.folder = Path(folder)
        self.scanned_ns = manifest.scanned_ns
        self.files = {f.path: f for f in manifest.files}
        self.hits = 0
        self.misses = 0
        self.continued = 0  # appended .jsonl files read from their stored offset
        self.write_failures = 0

    def load(self, file: Path, slim: bool) -> tuple[list[FileRecord], list[Rejected]] | None:
        state = self._vouched(file)
        if state is None:
            self.misses += 1
            return None
        try:
            out = _read_entry(self._path(state.digest, slim))
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
            logger.warning("record cache entry for %s unreadable (%s): read again", file, exc)
            self.misses += 1
            return None
        self.hits += 1
        return out

    def load_head(self, file: Path, slim: bool) -> Head | None:
        """A plain ``.jsonl`` file that only grew since its records were stored: those
        records and quarantined lines, and the offset and line where the new ones begin.
        None unless the file's first bytes are still, digest for digest, the stored
        file's, ending at a line's end (an edited or truncated file is read whole)."""
        state = self._vouched(file)
        head = self._head(file) if state is not None and file.name.endswith(".jsonl") else None
        if state is None or head is None or not 0 < head.size < state.size:
            return None
        try:
            digest, lines, last = _prefix(file, head.size)
            if digest != head.digest or last != b"\n":
                return None
            records, rejected = _read_entry(self._path(head.digest, slim))
        except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError):
            return None  # no usable head: the file is read whole, as without one
        self.continued += 1
        return Head(records, rejected, head.size, lines)

    def store(
        self, file: Path, records: list[FileRecord], rejected: list[Rejected], slim: bool
    ) -> None:
        state = self._vouched(file)
        if state is None or state.mtime_ns >= self.scanned_ns - RACY_NS:
            return
        blob = msgspec.msgpack.encode(_encode(records, rejected))  # columns (_Entry)
        marker = msgspec.json.encode({"digest": state.digest, "size": state.size})
        try:
            write_atomic(self._path(state.digest, slim), lambda handle: handle.write(blob))
            if file.name.endswith(".jsonl"):  # where its next appended lines will begin
                write_atomic(self._head_path(file), lambda handle: handle.write(marker))
        except OSError as exc:
            # The run has the records; only the next run's shortcut is lost. Counted and
            # reported (train --json extra.record_cache), and the file is parsed next time.
            self.write_failures += 1
            logger.warning(
                "record cache: cannot write %s (%s): %s will be parsed again next run",
                self._path(state.digest, slim),
                exc.strerror or exc,
                file,
            )

    def prune(self) -> int:
        """Delete the entries of bytes no file of the manifest holds, but for the stored
        head of a listed ``.jsonl`` file (an append still reads on from it); their count."""
        digests = [state.digest for state in self.files.values()]
        for path in self.files:
            head = self._head(Path(path))
            if head is not None:
                digests.append(head.digest)
        keep = {self._path(digest, slim).name for digest in digests for slim in (False, True)}
        keep |= {self._head_path(Path(path)).name for path in self.files}
        removed = 0
        if self.folder.is_dir():
            # *.json: entries of cache version 1, which no build reads any more.
            for entry in [*self.folder.glob("*.msgpack"), *self.folder.glob("*.json")]:
                if entry.name not in keep:
                    entry.unlink(missing_ok=True)
                    removed += 1
        return removed

    def _vouched(self, file: Path) -> FileState | None:
        """The manifest's state of ``file`` while the file still has its size and mtime."""
        state = self.files.get(str(file))
        if state is None:
            return None
        try:
            stat = os.stat(file)
        except OSError:
            return None
        if (stat.st_size, stat.st_mtime_ns) != (state.size, state.mtime_ns):
            return None
        return state

    def _head(self, file: Path) -> _HeadMarker | None:
        try:
            return msgspec.json.decode(self._head_path(file).read_bytes(), type=_HeadMarker)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def _head_path(self, file: Path) -> Path:
        """Where a ``.jsonl`` file's last stored digest and size are kept, by its path."""
        name = hashlib.blake2b(str(file).encode(), digest_size=8).hexdigest()
        return self.folder / f"head-{name}.json"

    def _path(self, digest: str, slim: bool) -> Path:
        """An entry: its file's bytes' digest, the cache's version, and whether its
        records keep their text (read_trajectories' keep_text)."""
        return self.folder / f"{digest}-{CACHE_VERSION}{'-slim' if slim else ''}.msgpack"


class _HeadMarker(msgspec.Struct):
    digest: str
    size: int


class _Lines:
    """The newlines of the chunks it is shown, and the last byte of the last one."""

    def __init__(self) -> None:
        self.count, self.last = 0, b""

    def __call__(self, chunk: bytes) -> None:
        self.count += chunk.count(b"\n")
        self.last = chunk[-1:]


def _prefix(file: Path, size: int) -> tuple[str, int, bytes]:
    """The digest of ``file``'s first ``size`` bytes (the manifest's digest of a file
    that size), their newlines, and their last byte."""
    lines = _Lines()
    digest, hashed = file_digest(file, size, lines)
    if hashed != size:
        raise ValueError(f"{file} is shorter than its stored head")
    return digest, lines.count, lines.last


def _read_entry(path: Path) -> tuple[list[FileRecord], list[Rejected]]:
    return _decode(msgspec.msgpack.decode(path.read_bytes(), type=_Entry))


class _Entry(msgspec.Struct):
    """A file's records as columns, one list per field, in file order: msgspec decodes
    each list in C, where a list of rows became lists of lists first (issue 36: a
    +1% run reads every unchanged file's entry). The attempt's columns carry
    ``AttemptInput``'s field names."""

    version: str
    trajectory_id: list[str]
    agent: list[str]
    created: list[float | None]
    operator: list[str]
    generation: list[int]
    parent_ids: list[tuple[str, ...]]
    code_changes: list[str]
    modified_files: list[tuple[str, ...]]
    proposed_strategy: list[str]
    problem_diagnosis: list[str]
    tools_used: list[tuple[str, ...]]
    reasoning_pattern: list[str]
    own: bytes  # every record's AttemptInput.own, OWN_BYTES each, back to back
    label: list[tuple[bool, float | None, str] | None]
    score: list[float | None]
    key: list[int | None]
    id_key: list[int | None]
    rejected: list[tuple[str, str, str]]


# The entry's columns of AttemptInput fields (all but ``own``), and those a file repeats.
_ATTEMPT_COLUMNS = (
    "trajectory_id", "agent", "created", "operator", "generation", "parent_ids",
    "code_changes", "modified_files", "proposed_strategy", "problem_diagnosis",
    "tools_used", "reasoning_pattern",
)  # fmt: skip
_REPEATED = frozenset({"agent", "operator", "tools_used", "reasoning_pattern"})


def _encode(records: list[FileRecord], rejected: list[Rejected]) -> _Entry:
    attempts = [r.attempt for r in records]
    columns: dict[str, Any] = {name: _column(attempts, name) for name in _ATTEMPT_COLUMNS}
    own = (a.own if len(a.own) == OWN_BYTES else pack(own_numbers(a)) for a in attempts)
    labels = [None if (x := r.label) is None else (x.success, x.score, x.outcome) for r in records]
    return _Entry(
        version=CACHE_VERSION,
        **columns,
        own=b"".join(own),
        label=labels,
        score=_column(records, "score"),
        key=_column(records, "key"),
        id_key=_column(records, "id_key"),
        rejected=[(e.where, e.reason, e.text) for e in rejected],
    )


def _decode(entry: _Entry) -> tuple[list[FileRecord], list[Rejected]]:
    """The entry's records, built a field at a time (``data.slot_objects``); the strings
    and tool lists a file repeats (agents, operators, patterns) one object each."""
    if entry.version != CACHE_VERSION:
        raise ValueError(f"cache version {entry.version!r}, this build's {CACHE_VERSION}")
    n = len(entry.trajectory_id)
    columns = [
        _shared(getattr(entry, name)) if name in _REPEATED else getattr(entry, name)
        for name in _ATTEMPT_COLUMNS
    ]
    own = [entry.own[i : i + OWN_BYTES] for i in range(0, n * OWN_BYTES, OWN_BYTES)]
    # A column of another length is a damaged entry (ValueError: the file is read again).
    attempts = objects(AttemptInput, (*_ATTEMPT_COLUMNS, "own"), (*columns, own))
    known = [x for x in entry.label if x is not None]
    parts = ([x[0] for x in known], [x[1] for x in known], [x[2] for x in known])
    built = iter(objects(Label, ("success", "score", "outcome"), parts))
    labels = [None if x is None else next(built) for x in entry.label]
    record_columns = (entry.trajectory_id, attempts, labels, entry.score, entry.key, entry.id_key)
    records = objects(FileRecord, _RECORD_FIELDS, record_columns)
    return records, [Rejected(*e) for e in entry.rejected]


_RECORD_FIELDS = ("trajectory_id", "attempt", "label", "score", "key", "id_key")


def _column(items: list[Any], name: str) -> list[Any]:
    """Each item's ``name``, read in C."""
    return list(map(attrgetter(name), items))


def _shared(values: list[_H]) -> list[_H]:
    """``values`` with equal ones the same object."""
    seen: dict[_H, _H] = {}
    return [seen.setdefault(v, v) for v in values]
