"""Each data file's records, kept after a read, by the file's content digest.

A pool that grows by a new file, or by a day's ``.jsonl``, leaves most of its files as
they were. :class:`RecordCache` keeps what a read made of each file (its valid records'
pre-attempt input, label and score, and its quarantined entries, as one
:class:`~genesis_fp16_infrastructure.data.file_records.RecordBlock` of columns) in one
msgpack file per file's bytes, named by the
content digest of the data manifest (``genesis_fp16_infrastructure.data.manifest``) and
``CACHE_VERSION``. The next read takes an unchanged file from there instead of parsing
and validating it again; a changed file is read alone. An entry ends in the CRC-32 of its
msgpack bytes, checked before they are decoded, and its columns are checked after
(``RecordBlock.check``): a flipped bit, a cut or a column that disagrees is a logged,
counted miss (``unreadable``), and the file is parsed again.

A file is taken from the cache only while its size, mtime, ctime and inode are still
those the manifest hashed (``FileState.same_stat``), and stored only when they still are
after its read: a file appended or
rewritten while it was read is read again next time, never remembered under the old
bytes' digest. A file modified within ``RACY_NS`` of the manifest's scan is never
stored (its mtime cannot vouch for its bytes). Entries no file of the manifest uses are
deleted after each read.

A slim read (``keep_text=False``, a training run's) whose every file is unchanged takes
the whole joined pool from one more entry (written by the first read that found every
file's entry), ``pool-<key>.gfpool`` (columns memory-mapped, below), keyed by the files'
paths and digests in read order: no file decoded, no parent matched again. Any file
changed, added or removed is another key, and the read joins the per-file entries as above.

    cache = RecordCache(state / "record_cache", manifest)
    data = read_trajectories(path, quarantine, cache=cache, keep_text=False)
    cache.prune()

That pool file (``data.pool_file``) is checked before anything of it is used: a regular
file, no larger than its files' own entries can make it (checked before a byte is read),
its header and each column by a CRC-32, every code and row in range, and its files named
by content digest, so an entry of other bytes (an older pool's copied under this key) is
refused. Any failure is a logged miss, counted in ``unreadable`` (``train --json``'s
``extra.record_cache.entries_unreadable``), and the read joins the files' own entries and
writes the pool's entry again. At 100,000 records the join (the parents matched by id,
every match checked by string) was most of a warm read.

With ``memory`` (``genesis_fp16_infrastructure.kept_in_memory``: a resident run process's
store), what a read took or made is kept in this process too: each file's block, keyed by
its path and checked against the file's identity (device, inode, size, mtime, ctime) and
the manifest's digest before use, and the joined pool, checked file by file the same way.
The next read in the process takes them from there (no entry decoded, no join when no
file changed) and reads only the files whose identity changed. A file written within
``RACY_NS`` of the scan is never kept, as it is never stored.

One joined pool is kept per cache (the last), with the fingerprint of its labelled
records (``data.fingerprint``), its identity its files' paths, digests and identities in
read order. A read whose first files are exactly the kept pool's, each unchanged, and
whose other files are new grows that pool by the new files' records alone
(``data.pool_extend``, :meth:`RecordCache.grown_pool`, :meth:`RecordCache.extend_pool`)
and its fingerprint by their labelled records: the same pool and fingerprint a join of
every file makes. New files that sort among the kept pool's lay their records among its
rows (``data.pool_splice``), where the kept pool left no duplicate out (it keeps each
file's rows for that) and the new records repeat no id. The kept pool holds its id
ranking and labelled ids too (``pool_columns.DERIVED``, worked out as it is kept), so
that a growth sorts and names only what is new; a pool joined whole is kept with room
after its columns' rows (``pool_columns.roomy``), so that its first growth copies no
column. Anything else (a kept file edited, appended to, touched, deleted or renamed, a
new file sorting before one of them that the splice refuses) joins every file as above.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import stat
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any, cast

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.files import write_atomic
from genesis_fp16_infrastructure.data.file_records import (
    NUMBERS_VERSION,
    Head,
    RecordBlock,
)
from genesis_fp16_infrastructure.data.fingerprint import (
    DataFingerprint,
    extended_fingerprint,
    fingerprint_of,
    spliced_fingerprint,
)
from genesis_fp16_infrastructure.data.manifest import RACY_NS, FileState, Manifest, prefix_of
from genesis_fp16_infrastructure.data.pool_columns import (
    SPLICED_FROM,
    PoolColumns,
    freeze,
    frozen,
    held_bytes,
)
from genesis_fp16_infrastructure.data.pool_extend import extended
from genesis_fp16_infrastructure.data.pool_file import (
    FORMAT,
    StoredPool,
    read_pool_file,
    size_bound,
    write_pool_file,
)
from genesis_fp16_infrastructure.data.pool_splice import spliced
from genesis_fp16_infrastructure.data.schema import SCHEMA_VERSION
from genesis_fp16_infrastructure.kept_in_memory import (
    Identity,
    KeptInMemory,
    estimate_bytes,
    identity_of,
)

logger = logging.getLogger(__name__)

# Bump when FileRecord, AttemptInput, Label or how a record becomes them changes; the
# own numbers' version is part of it (data.file_records).
# 4: columns, not rows; 5: each record's id hash; 6: columns by field name;
# 7: file_records.RecordBlock (coded columns, flat parents, no object per record);
# 8: its numbers and flags as bytes, and each parent's id hash (collect matches by hash);
# 9: each labelled record's judged-id hash (RecordBlock.judged); 10: each entry ends in
# the CRC-32 of its msgpack bytes (a flipped bit in a number was served)
CACHE_VERSION = f"10.s{SCHEMA_VERSION}.n{NUMBERS_VERSION}"
CRC_BYTES = 4  # an entry's last bytes: the little-endian CRC-32 of the msgpack before them
HEAD_BYTES = 4096  # a head marker: a digest and a size
ENTRY_BYTES = 1 << 40  # an entry is as large as its data file's records: no bound but sanity
POOL_VERSION = f"{CACHE_VERSION}.pool{FORMAT}"  # the pool entry's: its key and its header


class RecordCache:
    """Per-file records by content digest, under ``folder``; ``manifest`` vouches for
    which digest each file's current bytes have."""

    def __init__(
        self, folder: Path, manifest: Manifest, memory: KeptInMemory | None = None
    ) -> None:
        self.folder = Path(folder)
        self.memory = memory
        self.from_memory = 0  # files whose records came from this process's memory
        self.memory_records = 0  # their records
        self.files_read = 0  # files read from their entry or parsed, and their records
        self.records_read = 0
        self.scanned_ns = manifest.scanned_ns
        self.files = {f.path: f for f in manifest.files}
        self.hits = 0
        self.misses = 0
        self.continued = 0  # appended .jsonl files read from their stored offset
        self.write_failures = 0
        self.unreadable = 0  # entries found damaged (truncated, another version): misses too
        self.pool_hit = False  # the whole joined pool came from its entry
        self.pool_grown = False  # the pool kept in memory, grown by new files' records
        self.pool_spliced = False  # ... by new files sorting among its own (pool_splice)
        # The fingerprint of the pool this read took or kept (data.fingerprint), if it made one
        self.fingerprint: DataFingerprint | None = None

    def load(self, file: Path, slim: bool) -> Head | None:
        """What was stored of ``file``: all its records (``Head.offset`` None) while its
        bytes are those stored; else, for a plain ``.jsonl`` file that only grew since,
        those records and quarantined lines, and the offset and line where the new ones
        begin; None otherwise (a miss)."""
        state = self._vouched(file)
        if state is not None:
            kept = self._recalled(file, state, slim)
            if kept is not None:
                self.hits += 1
                return Head(kept, None, 0)
            try:
                block = _read_entry(self._path(state.digest, slim))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError) as exc:
                logger.warning("record cache entry for %s unreadable (%s): read again", file, exc)
                self.unreadable += 1
            else:
                self.hits += 1
                self._count_read(block)
                self._keep(file, state, block, slim)
                return Head(block, None, 0)
        self.misses += 1
        if state is None or not file.name.endswith(".jsonl"):
            return None
        return self._grown(file, state, slim)

    def _grown(self, file: Path, state: FileState, slim: bool) -> Head | None:
        """The stored head of an appended ``.jsonl`` file: None unless the file's first
        bytes are still, digest for digest, the stored file's, ending at a line's end (an
        edited or truncated file is read whole)."""
        head = self._head(file)
        if head is None or not 0 < head.size < state.size:
            return None
        try:
            seen = state.prefix  # the scan's, when it hashed this file's growth in one pass
            if seen is None or seen.size != head.size:
                seen = prefix_of(file, head.size)
            if seen.digest != head.digest or seen.last != "0a":
                return None
            block = _read_entry(self._path(head.digest, slim))
        except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError):
            return None  # no usable head: the file is read whole, as without one
        self.continued += 1
        return Head(block, head.size, seen.lines)

    def store(self, file: Path, block: RecordBlock, slim: bool) -> None:
        self._count_read(block)
        state = self._vouched(file)
        if state is None or state.mtime_ns >= self.scanned_ns - RACY_NS:
            return
        self._keep(file, state, block, slim)
        target = self._path(state.digest, slim)
        try:
            blob = msgspec.msgpack.encode(msgspec.structs.replace(block, version=CACHE_VERSION))
        except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
            # A UnicodeEncodeError is a ValueError. The read quarantines text that does not
            # encode (readers._unencodable); this is the net under it: the run has its
            # records, and the next run parses the file again.
            self._failed(
                "cannot encode the records of %s (%s): parsed again next run", file, ascii(str(exc))
            )
            return
        marker = msgspec.json.encode({"digest": state.digest, "size": state.size})
        crc = zlib.crc32(blob).to_bytes(CRC_BYTES, "little")
        try:
            write_atomic(target, lambda handle: (handle.write(blob), handle.write(crc)))
            if file.name.endswith(".jsonl"):  # where its next appended lines will begin
                write_atomic(self._head_path(file), marker)
        except OSError as exc:
            # The run has the records; only the next run's shortcut is lost. Counted and
            # reported (train --json extra.record_cache), and the file is parsed next time.
            message = "cannot write %s (%s): %s will be parsed again next run"
            self._failed(message, target, exc.strerror or exc, file)

    def load_pool(self, files: list[Path]) -> StoredPool | None:
        """The joined pool of ``files`` (in read order) as a slim read made it, while
        every one of them is unchanged and its own entry is stored; None otherwise (a
        damaged, stale or unusable entry logged and counted: ``pool_file`` checks it)."""
        states = [self._vouched(file) for file in files]
        if not files or any(state is None for state in states):
            return None
        named = _named(files, states)
        kept = self._recalled_pool(files, named)
        if kept is not None:
            return kept
        # The entry is joined from the files' own entries: their sizes bound its size.
        sizes = [_regular_size(self._path(digest, slim=True)) for _, digest in named]
        if any(size is None for size in sizes):
            return None  # a file's own entry gone: the read parses it, and stores both again
        path = self._pool_path(files)
        try:
            limit = size_bound(sum(size or 0 for size in sizes), [name for name, _ in named])
            stored = read_pool_file(path, POOL_VERSION, limit)
            if stored.files != named:
                raise ValueError("its files are another pool's, or other bytes of them")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:
            logger.warning("record cache: pool entry %s unreadable (%s): joined again", path, exc)
            self.unreadable += 1
            return None
        self.hits += len(files)
        self.pool_hit = True
        self.keep_pool(files, stored.columns, stored.duplicates, stored.rejected)
        return stored

    def keep_pool(
        self,
        files: list[Path],
        columns: PoolColumns,
        duplicates: int,
        rejected: list[tuple[int, Any]],
        fingerprint: DataFingerprint | None = None,
        rows_per_file: tuple[int, ...] | None = None,
    ) -> None:
        """Keep a slim read's joined pool in this process's memory, when every file is
        vouched for and none is racy, with the fingerprint of its records (``fingerprint``,
        or worked out now: the run's, in ``self.fingerprint``) so a later read that grows
        it fingerprints only what is new, and each file's rows (``rows_per_file``: its
        records, where the pool left no duplicate out) so that one splices new files among
        them. Its arrays are not copied: they are made
        read-only (``pool_columns.frozen``), here and in the caller's ``columns`` alike,
        so neither the run nor a later one can write into the other's pool (a write
        raises); every slim read through a cache hands out read-only columns so."""
        if not files:
            return
        freeze(columns)
        if self.memory is None:
            return
        states = [self._vouched(file) for file in files]
        if any(s is None or s.mtime_ns >= self.scanned_ns - RACY_NS for s in states):
            return
        named = _named(files, states)
        identities = tuple(identity_of(file) for file in files)
        if any(identity is None for identity in identities):
            return
        self.fingerprint = fingerprint or fingerprint_of(columns)
        # What a later read's growth asks of the old pool, worked out now (a join of every
        # file costs as much): it grows it by its new rows alone (data.pool_extend).
        columns.id_rank  # noqa: B018 (a cached property, carried)
        stored = StoredPool(frozen(columns), duplicates, named, list(rejected))
        # The arrays' spare room (a grown pool's, pool_columns.appended) is held too.
        size = estimate_bytes(stored.columns) + held_bytes(columns)
        size += estimate_bytes(self.fingerprint)
        what = f"the joined pool of {len(columns):,} records of {len(files)} file(s)"
        if rows_per_file is not None and (duplicates or sum(rows_per_file) != len(columns)):
            rows_per_file = None  # a file's records are not its rows
        kept = _KeptPool(stored, self.fingerprint, rows_per_file)
        if self.memory.put(self._pool_key(), (tuple(named), identities), kept, size, what):
            # Its files' own records are needed again only where it is not (a file that
            # sorts among them, one changed): they go first, for the run's encoded rows,
            # which a 1,000,000-record pool's budget did not keep beside both.
            for file in files:
                self.memory.give_way(self._file_key(file, slim=True))

    def _recalled_pool(self, files: list[Path], named: list[tuple[str, str]]) -> StoredPool | None:
        """The joined pool of ``files`` kept in memory, while each file is still the one
        it was joined from (identity and digest: ``named``): its arrays and tuples (the
        ids) shared, read-only, and its few lists the caller's own (``pool_columns.frozen``),
        so nothing that grows with the pool is copied."""
        found = self._kept_pool(files, named)
        if found is None or len(found[0]) != len(files):
            return None
        kept = found[1]
        self.hits += len(files)
        self.from_memory += len(files)
        self.pool_hit = True
        self.fingerprint = kept.fingerprint
        logger.info(
            "reused from memory: the joined pool of %s records whole (its %d file(s) unchanged)",
            f"{len(kept.stored.columns):,}",
            len(files),
        )
        stored = kept.stored
        return StoredPool(
            frozen(stored.columns), stored.duplicates, stored.files, list(stored.rejected)
        )

    def _kept_pool(
        self, files: list[Path], named: list[tuple[str, str]]
    ) -> tuple[tuple[int, ...], _KeptPool] | None:
        """The pool kept in memory of some of ``files`` (all of them, or fewer: the others
        new since), while each of those is still the one it was joined from (path,
        identity, digest), as ``(their places among files, pool)``; None otherwise."""
        if self.memory is None:
            return None
        identities = tuple(identity_of(file) for file in files)
        index = {entry[0]: i for i, entry in enumerate(named)}
        places: list[tuple[int, ...]] = []

        def joined_from(kept: Hashable) -> bool:
            paths, was = cast(tuple[tuple[Any, ...], tuple[Any, ...]], kept)
            at = tuple(index.get(path[0], -1) for path in paths)
            if not at or min(at) < 0 or any(b <= a for a, b in itertools.pairwise(at)):
                return False  # a file gone, or the read order changed
            places[:] = [at]
            return (paths, was) == (
                tuple(named[i] for i in at),
                tuple(identities[i] for i in at),
            )

        found = self.memory.get_matching(self._pool_key(), joined_from)
        if found is None:
            return None
        return places[0], found[1]

    def grown_pool(self, files: list[Path]) -> tuple[tuple[int, ...], _KeptPool] | None:
        """The pool kept in memory of some of ``files`` (their places), every one of them
        unchanged, when the others are new: the read joins only those, after the kept
        pool's files (``data.pool_extend``) or, where the kept pool keeps each file's rows,
        among them (``data.pool_splice``). None otherwise: any file of the kept pool
        changed or removed, or a new file sorting before one of a pool that keeps no rows
        per file."""
        states = [self._vouched(file) for file in files]
        if any(state is None for state in states):
            return None
        found = self._kept_pool(files, _named(files, states))
        if found is None or len(found[0]) >= len(files):
            return None
        places, kept = found
        if places[-1] != len(places) - 1 and kept.rows_per_file is None:
            return None  # a new file sorting among them, and no rows to lay it out by
        self.hits += len(places)
        self.from_memory += len(places)
        self.memory_records += len(kept.stored.columns) + kept.stored.duplicates
        return found

    def extend_pool(
        self,
        files: list[Path],
        places: tuple[int, ...],
        kept: _KeptPool,
        blocks: list[RecordBlock],
    ) -> StoredPool | None:
        """``kept`` (the pool of the files at ``places``) grown by ``blocks`` (the others',
        in read order), kept in memory in its place with its fingerprint grown too; None
        when the growth refuses (an id hash shared by two different ids; a splice whose
        join would leave a duplicate out): the read joins every file instead."""
        old = kept.stored
        kept_at = set(places)
        new_at = [i for i in range(len(files)) if i not in kept_at]
        sizes = [len(block.trajectory_id) for block in blocks]
        if places[-1] == len(places) - 1:  # the new files after the old
            grown = extended(old.columns, blocks)
            if grown is None:
                return None
            columns, left_out = grown
            self.pool_grown = True
            fingerprint = extended_fingerprint(kept.fingerprint, columns, len(old.columns))
            rows = None if kept.rows_per_file is None else (*kept.rows_per_file, *sizes)
        else:
            assert kept.rows_per_file is not None  # grown_pool found it so
            slots = [sum(p < i for p in places) for i in new_at]
            made = spliced(old.columns, kept.rows_per_file, slots, blocks)
            if made is None:
                return None
            columns, left_out = made, 0
            self.pool_spliced = True
            old_at = vars(columns)[SPLICED_FROM][1]
            fingerprint = spliced_fingerprint(kept.fingerprint, old.columns, columns, old_at)
            rows = _laid_out(places, kept.rows_per_file, new_at, sizes)
        self.fingerprint = fingerprint
        rejected = sorted(
            [(places[i], entry) for i, entry in old.rejected]
            + [(new_at[i], entry) for i, block in enumerate(blocks) for entry in block.rejected],
            key=lambda item: item[0],
        )
        duplicates = old.duplicates + left_out
        self.store_pool(files, columns, duplicates, rejected)
        self.keep_pool(files, columns, duplicates, rejected, fingerprint, rows)
        logger.info(
            "reused from memory: the joined pool of %s records of %d file(s) unchanged, "
            "grown by %d file(s) (%s records joined%s) to %s records",
            f"{len(old.columns):,}",
            len(places),
            len(blocks),
            f"{sum(sizes):,}",
            "" if not self.pool_spliced else ", laid among its own",
            f"{len(columns):,}",
        )
        named = _named(files, [self._vouched(file) for file in files])
        return StoredPool(columns, duplicates, named, rejected)

    def _recalled(self, file: Path, state: FileState, slim: bool) -> RecordBlock | None:
        """``file``'s block kept in memory, while the file is the one it was read from."""
        if self.memory is None:
            return None
        block = self.memory.get(self._file_key(file, slim), self._identity(file, state))
        if block is None:
            return None
        self.from_memory += 1
        self.memory_records += len(block.trajectory_id)
        return block

    def _keep(self, file: Path, state: FileState, block: RecordBlock, slim: bool) -> None:
        """Keep ``file``'s block in memory (its bytes immutable: no copy), unless racy."""
        if self.memory is None or state.mtime_ns >= self.scanned_ns - RACY_NS:
            return
        identity = self._identity(file, state)
        if identity is None:
            return
        what = f"the records of {file} ({len(block.trajectory_id):,})"
        self.memory.put(self._file_key(file, slim), identity, block, estimate_bytes(block), what)

    def _count_read(self, block: RecordBlock) -> None:
        self.files_read += 1
        self.records_read += len(block.trajectory_id)

    def say_kept(self, pool: int) -> None:
        """Log what this read of a ``pool`` of records took from memory, file by file (a
        pool taken whole said so already); nothing when nothing."""
        if self.memory is None or self.pool_hit or not self.from_memory:
            return
        logger.info(
            "reused from memory: pool of %s records, %s of them from %d file(s) unchanged "
            "(%d file(s), %s records re-read)",
            f"{pool:,}",
            f"{self.memory_records:,}",
            self.from_memory,
            self.files_read,
            f"{self.records_read:,}",
        )

    def _identity(self, file: Path, state: FileState) -> tuple[Identity, str] | None:
        """What a kept block of ``file`` is checked against: its identity now and the
        manifest's digest of its bytes (None: it cannot be stat'ed)."""
        identity = identity_of(file)
        return None if identity is None else (identity, state.digest)

    def _file_key(self, file: Path, slim: bool) -> tuple[Any, ...]:
        """A kept block's key: this cache's (an agent's), the file, slim, the version."""
        return ("records", str(self.folder), str(file), slim, CACHE_VERSION)

    def _pool_key(self) -> tuple[Any, ...]:
        """The kept pool's key: this cache's (an agent's: one pool, the last joined; its
        identity is its files' paths, digests and identities in read order)."""
        return ("pool", str(self.folder), POOL_VERSION)

    def store_pool(
        self,
        files: list[Path],
        columns: PoolColumns,
        duplicates: int,
        rejected: list[tuple[int, Any]],
    ) -> None:
        """Keep a slim read's joined pool (``columns``, and ``rejected``: each file's
        quarantined entries, by its index in read order) when this read took every file
        from its own entry (the pool was read before, unchanged: it is likely read so again), every
        file is still as the manifest hashed it and none was written within ``RACY_NS``
        of its scan. A read that parsed anything (a daemon's run on new records) writes
        no pool entry: its pool is the next run's old one, and at a million records the
        entry is 260 MB to write."""
        if (self.hits, self.misses, self.continued) != (len(files), 0, 0):
            return
        states = [self._vouched(file) for file in files]
        if any(s is None or s.mtime_ns >= self.scanned_ns - RACY_NS for s in states):
            return
        named = _named(files, states)
        stored = StoredPool(columns, duplicates, named, rejected)
        path = self._pool_path(files)
        try:
            write_pool_file(path, stored, POOL_VERSION)
        except (OSError, ValueError, TypeError, msgspec.EncodeError) as exc:
            message = "cannot write %s (%s): the pool is joined again next run"
            self._failed(message, path, ascii(str(exc)))

    def prune(self) -> int:
        """Delete the entries of bytes no file of the manifest holds, but for the stored
        head of a listed ``.jsonl`` file (an append still reads on from it); their count."""
        if not self.folder.is_dir():  # nothing stored yet (a fresh state folder)
            return 0
        digests = [state.digest for state in self.files.values()]
        for path in self.files:
            head = self._head(Path(path))
            if head is not None:
                digests.append(head.digest)
        keep = {self._path(digest, slim).name for digest in digests for slim in (False, True)}
        keep |= {self._head_path(Path(path)).name for path in self.files}
        keep.add(self._pool_path([Path(path) for path in self.files]).name)
        removed = 0
        # *.json: entries of cache version 1, which no build reads any more.
        found = ("*.msgpack", "*.json", "pool-*.gfpool")
        for entry in [path for pattern in found for path in self.folder.glob(pattern)]:
            if entry.name not in keep:
                try:
                    entry.unlink(missing_ok=True)
                except OSError as exc:  # a folder at an entry's name: the run goes on
                    logger.warning("record cache: cannot remove %s (%s)", entry, exc)
                    continue
                removed += 1
        return removed

    def _failed(self, message: str, *args: object) -> None:
        """Count a write that failed, and say so: the run has its records; only the next
        run's shortcut is lost."""
        self.write_failures += 1
        logger.warning("record cache: " + message, *args)

    def _vouched(self, file: Path) -> FileState | None:
        """The manifest's state of ``file`` while the file is still the one it hashed
        (its size, mtime, ctime and inode; a state without them vouches for nothing)."""
        state = self.files.get(str(file))
        if state is None:
            return None
        try:
            stat = os.stat(file)
        except OSError:
            return None
        return state if state.same_stat(stat) else None

    def _head(self, file: Path) -> _HeadMarker | None:
        try:
            raw = files.read_bytes(self._head_path(file), HEAD_BYTES)  # a FIFO never blocks
            return None if raw is None else msgspec.json.decode(raw, type=_HeadMarker)
        except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def _head_path(self, file: Path) -> Path:
        """Where a ``.jsonl`` file's last stored digest and size are kept, by its path."""
        # fsencode: a file name that is not UTF-8 comes back as the bytes it is.
        name = hashlib.blake2b(os.fsencode(file), digest_size=8).hexdigest()
        return self.folder / f"head-{name}.json"

    def _pool_path(self, files: list[Path]) -> Path:
        """The joined pool's entry: the files' paths and digests, in read order."""
        key = hashlib.blake2b(POOL_VERSION.encode(), digest_size=16)
        for file in files:
            state = self.files.get(str(file))
            key.update(
                os.fsencode(file) + b"\0" + (b"" if state is None else state.digest.encode())
            )
            key.update(b"\0")
        return self.folder / f"pool-{key.hexdigest()}.gfpool"

    def _path(self, digest: str, slim: bool) -> Path:
        """An entry: its file's bytes' digest, the cache's version, and whether its
        records keep their text (read_trajectories' keep_text)."""
        return self.folder / f"{digest}-{CACHE_VERSION}{'-slim' if slim else ''}.msgpack"


@dataclasses.dataclass(frozen=True)
class _KeptPool:
    """A joined pool kept in memory, with the fingerprint of its labelled records."""

    stored: StoredPool
    fingerprint: DataFingerprint
    # Each file's rows, in read order, where the pool left no duplicate out; else None
    rows_per_file: tuple[int, ...] | None = None


def _laid_out(
    places: tuple[int, ...], old: tuple[int, ...], new_at: list[int], sizes: list[int]
) -> tuple[int, ...]:
    """Each file's rows in read order, the old files' at ``places`` and the new ones' at
    ``new_at``."""
    rows = [0] * (len(places) + len(new_at))
    for i, count in zip(places, old, strict=True):
        rows[i] = count
    for i, count in zip(new_at, sizes, strict=True):
        rows[i] = count
    return tuple(rows)


class _HeadMarker(msgspec.Struct):
    digest: str
    size: int


def _named(files: list[Path], states: list[FileState | None]) -> list[tuple[str, str]]:
    """Each file as a pool entry names it: its path and its bytes' digest (all vouched)."""
    return [(str(f), s.digest) for f, s in zip(files, states, strict=True) if s is not None]


def _regular_size(path: Path) -> int | None:
    """The size of the regular file at ``path``; None for none, or anything else there."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _read_entry(path: Path) -> RecordBlock:
    """A stored block, checked: another version or a damaged entry (its CRC-32 not its
    bytes', columns that disagree) is a ValueError (the file is read again)."""
    raw = files.read_bytes(path, ENTRY_BYTES)  # a regular file only: a FIFO never blocks
    if raw is None:
        raise FileNotFoundError(2, "no cache entry", str(path))
    body = memoryview(raw)[:-CRC_BYTES]
    if len(raw) < CRC_BYTES or zlib.crc32(body) != int.from_bytes(raw[-CRC_BYTES:], "little"):
        raise ValueError("its CRC-32 is not its bytes': a damaged entry")
    block = msgspec.msgpack.decode(body, type=RecordBlock)
    if block.version != CACHE_VERSION:
        raise ValueError(f"cache version {block.version!r}, this build's {CACHE_VERSION}")
    block.check()
    return block
