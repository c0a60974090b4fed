"""What one process keeps in memory from run to run: a bounded store, checked before use.

The daemon serves each device's runs one after another in one resident process
(``genesis_fp16/commands/resident.py``). What a run read there (each data file's records,
the joined pool, the agent's calibration record) is the next run's too, as long as the
files it came from are the same files: this store keeps it, keyed by what it is, with the
identity of the files it was made of (device, inode, size, mtime, ctime and, for a data
file, the manifest's content digest). A lookup whose identity differs in any field is a
miss, and the entry goes: the caller reads the file as if nothing were kept. Nothing in
it is trusted past that check.
A scoring's model outputs are kept beside them, keyed by the checkpoint's SHA-256 and
each record's inputs (``recipes.retrain.kept_outputs``), and the drift report's reference,
keyed by the served model and checked against the reference's numbers
(``recipes.retrain.drift``), and the states and scoring models of the last three
checkpoints a judged run used, keyed by the SHA-256 of their bytes, hashed again at each
read (:func:`kept_of_digest`: ``training.checkpoint_load``, ``recipes.retrain.scoring``),
and the per-record arrays of the checkpoints' side files this process wrote or checked,
with each file's identity (``training.checkpoint_arrays``).

The store is this process's alone, and off until a run asks for it with a budget
(``TrainRequest.keep_in_memory_bytes``, the daemon's
``GENESIS_FP16_RUN_RESIDENT_KEEP_MIB`` when a resident process serves the run; 0, a
forked child's or ``train``'s, keeps nothing). Past its budget the least recently used
entries are evicted first, each eviction logged (this module's logger), but never one the
run now using the store has used (:meth:`KeptInMemory.begin_run`): when the run's own
entries fill the budget, what it puts next is not kept. A run that needs more than the
budget thus keeps what it used first, and the next run finds it, where a plain least
recently used order would evict each value before the next run asks for it and give back
nothing, run after run. An entry that another holds too (a file's records, once joined
into the kept pool) gives way first (:meth:`KeptInMemory.give_way`)::

    kept = process_memory(256 * 2**20)      # None: a budget of 0, nothing is kept
    block = kept.get(("file", path), identity)  # None: never kept, or not that file now
    kept.put(("file", path), identity, block, estimate_bytes(block), f"records of {path}")

Each read that took anything from it says so in the run's log (the record cache, the
calibration's reader): ``reused from memory: pool of 100,000 records, 99,000 of them
from 1 file(s) unchanged (1 file(s), 1,000 records re-read)``; and the resident process
says after each run what the store gave back (``take_given``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec

T = TypeVar("T")
logger = logging.getLogger(__name__)

# A file as this store last saw it: (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns).
Identity = tuple[int, int, int, int, int]


def identity_of(path: Path | str) -> Identity | None:
    """``path``'s identity now; None when it cannot be stat'ed (gone: nothing kept holds)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@dataclass
class _Entry:
    identity: Hashable
    value: Any
    size: int
    what: str
    run: int  # the run that last used it (KeptInMemory.run)


class KeptValue(NamedTuple):
    """One value to keep (:meth:`KeptInMemory.put_each`): :meth:`KeptInMemory.put`'s
    arguments."""

    key: Hashable
    identity: Hashable
    value: Any
    size: int
    what: str


class KeptInMemory:
    """Values kept under keys, each with the identity it was made from, within ``budget``
    bytes (an estimate: :func:`estimate_bytes`), least recently used evicted first, but
    none the current run used (:meth:`begin_run`)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.evictions = 0
        self.declined = 0  # puts not kept because this run's own entries filled the budget
        self.run = 0  # the run now using the store (begin_run); 0: none begun, plain LRU
        self.given: list[str] = []  # what lookups took from it since take_given
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # a run's threads (its scorings) may ask at once

    def __len__(self) -> int:
        return len(self._entries)

    def begin_run(self) -> None:
        """A new run uses the store from here: what it gets or puts is not evicted for
        the rest of it (only for a smaller budget, :meth:`resize`)."""
        with self._lock:
            self.run += 1

    def get(self, key: Hashable, identity: Hashable, given: bool = True) -> Any | None:
        """The value kept under ``key`` while it was made from ``identity``; None
        otherwise (a kept value of another identity is dropped: it is stale). ``given``:
        counted in :meth:`take_given` (False: the caller says what it took, if anything,
        with :meth:`note_given`)."""
        with self._lock:
            return self._get(key, identity, given)

    def get_each(self, asked: Sequence[tuple[Hashable, Hashable]]) -> tuple[Any | None, ...]:
        """The value kept under each ``(key, identity)`` of ``asked``, as :meth:`get` with
        ``given=False`` answers it (None: never kept, or stale and dropped): all that a
        lookup reads from the store, asked at once (the caller says what it took with
        :meth:`put_each`).

        >>> kept = KeptInMemory(2**20)
        >>> kept.put("a", 1, [1], 16, "a list")
        True
        >>> kept.get_each([("a", 1), ("a", 2), ("b", 1)])
        ([1], None, None)
        """
        with self._lock:
            return tuple(self._get(key, identity, False) for key, identity in asked)

    def _get(self, key: Hashable, identity: Hashable, given: bool) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.identity != identity:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        entry.run = self.run
        if given:
            self.given.append(entry.what)
        return entry.value

    def get_matching(
        self, key: Hashable, accepts: Callable[[Hashable], bool]
    ) -> tuple[Hashable, Any] | None:
        """The identity and value kept under ``key`` while ``accepts`` its identity (a
        value another read can build on: a joined pool its files' prefix); None otherwise,
        the entry left for a :meth:`put` to replace."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not accepts(entry.identity):
                return None
            self._entries.move_to_end(key)
            entry.run = self.run
            self.given.append(entry.what)
            return entry.identity, entry.value

    def note_given(self, what: str) -> None:
        """Say that a run took ``what`` from this store (for :meth:`take_given`)."""
        with self._lock:
            self.given.append(what)

    def take_given(self) -> list[str]:
        """What lookups took from this store since the last call (a run's: the resident
        run process says it after each run), in order, once each."""
        with self._lock:
            given, self.given = list(dict.fromkeys(self.given)), []
        return given

    def describe(self) -> str:
        """Its size, said: ``3 entries, 12.0 MiB of 1,024.0 MiB``."""
        with self._lock:
            return f"{len(self._entries)} entries, {_mib(self.used)} of {_mib(self.budget)}"

    def put(self, key: Hashable, identity: Hashable, value: Any, size: int, what: str) -> bool:
        """Keep ``value`` (``size`` bytes, said as ``what`` when evicted) under ``key``;
        one larger than the whole budget is not kept (logged), nor one that fits only by
        evicting what this run used (logged, counted in ``declined``). True: kept."""
        with self._lock:
            self._drop(key)
            if size > self.budget:
                logger.info(
                    "kept in memory: %s (%s) not kept: over the budget of %s",
                    what,
                    _mib(size),
                    _mib(self.budget),
                )
                return False
            self._entries[key] = _Entry(identity, value, size, what, self.run)
            self.used += size
            self._evict(self.budget, spare=self.run)
            if self.used > self.budget:
                self._drop(key)
                self.declined += 1
                logger.info(
                    "kept in memory: %s (%s) not kept: this run's own entries fill the "
                    "budget (%s of %s kept)",
                    what,
                    _mib(size),
                    _mib(self.used),
                    _mib(self.budget),
                )
                return False
            return True

    def give_way(self, key: Hashable) -> None:
        """The entry under ``key`` (if any) goes first when room is needed, before every
        other and even though this run used it: what another kept entry holds too (a data
        file's records, once joined into the kept pool). Kept while there is room.

        >>> kept = KeptInMemory(40)
        >>> kept.begin_run()
        >>> kept.put("block", 1, b"", 16, "a block"), kept.put("pool", 1, b"", 16, "a pool")
        (True, True)
        >>> kept.put("encoded", 1, b"", 16, "encoded rows")  # this run's own fill it
        False
        >>> kept.give_way("block")
        >>> kept.put("encoded", 1, b"", 16, "encoded rows"), "block" in kept._entries
        (True, False)
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.run = 0  # no run's own any more
                self._entries.move_to_end(key, last=False)

    def put_each(self, kept: Sequence[KeptValue], given: Sequence[str] = ()) -> None:
        """Each of ``kept`` kept as :meth:`put` keeps it, in order, after saying ``given``,
        what the caller took from the store (:meth:`note_given`): all that a lookup leaves
        for the next run, in one call."""
        with self._lock:
            self.given.extend(given)
        for value in kept:
            self.put(*value)

    def resize(self, budget: int) -> None:
        """A new budget (a run's), evicting down to it."""
        with self._lock:
            self.budget = budget
            self._evict(budget)

    def _evict(self, budget: int, spare: int = 0) -> None:
        """Evict the least recently used down to ``budget``; none used by run ``spare``
        (0: spare none). Recency is the entries' order, so the first spared ends it."""
        while self.used > budget and self._entries:
            key, entry = next(iter(self._entries.items()))
            if spare and entry.run == spare:
                return
            self._drop(key)
            self.evictions += 1
            logger.info(
                "kept in memory: evicted %s (%s, least recently used; %s of %s kept)",
                entry.what,
                _mib(entry.size),
                _mib(self.used),
                _mib(budget),
            )

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.used -= entry.size


_PROCESS: list[KeptInMemory] = []  # at most one: this process's


def process_memory(budget: int) -> KeptInMemory | None:
    """This process's store, made on first use, at ``budget`` bytes; None for a budget of
    0: a run that keeps nothing (a request made elsewhere in this process, ``score_records``'
    own, lets go of nothing)."""
    if budget <= 0:
        return None
    if not _PROCESS:
        _PROCESS.append(KeptInMemory(budget))
    elif _PROCESS[0].budget != budget:
        _PROCESS[0].resize(budget)
    return _PROCESS[0]


def current() -> KeptInMemory | None:
    """This process's store, if a run made one (:func:`process_memory`)."""
    return _PROCESS[0] if _PROCESS else None


def kept_of_digest(
    memory: KeptInMemory | None,
    kind: str,
    digest: str,
    make: Callable[[], T],
    size: Callable[[T], int],
    keep: int = 3,
) -> T:
    """What ``make`` makes of the file whose SHA-256 is ``digest`` (a checkpoint read, its
    model built), kept in ``memory`` (None: made, nothing kept) for the ``keep`` files of
    ``kind`` used last (``size``: a value's bytes; one handed out again counts as used
    now): a judged run's served model, the predecessor its live watch scores, and the
    candidate, which is the next run's served model (and the served one its predecessor).
    With two kept, each later run whose watch ran unpickled and built its predecessor
    again (``benchmarks/judging_floor.py --served 2``). What is kept was made of the bytes
    the caller hashed, so its readers must never change what it hands out.

    >>> memory = KeptInMemory(2**20)
    >>> first = kept_of_digest(memory, "model", "ab12", lambda: [1], estimate_bytes)
    >>> kept_of_digest(memory, "model", "ab12", lambda: [2], estimate_bytes) is first
    True
    """
    held = held_of_digest(memory, kind, digest)
    if held is not None:
        return held
    value = make()
    if memory is not None:
        before = memory.get((kind,), kind, given=False)
        held_before = list(before.items()) if isinstance(before, dict) else []
        others = held_before[-(keep - 1) :] if keep > 1 else []
        kept = dict([*others, (digest, value)])
        total = sum(size(v) for v in kept.values())
        memory.put((kind,), kind, kept, total, f"{kind}s of {len(kept)} file(s)")
    return value


def held_of_digest(memory: KeptInMemory | None, kind: str, digest: str) -> Any | None:
    """What :func:`kept_of_digest` keeps of ``kind`` for the file of SHA-256 ``digest``
    (counted as given); None when nothing is."""
    kept = memory.get((kind,), kind, given=False) if memory is not None else None
    if not isinstance(kept, dict) or digest not in kept:
        return None
    assert memory is not None
    memory.note_given(f"{kind} of sha256 {digest[:12]}")
    kept[digest] = kept.pop(digest)  # used now: the last to give way
    return kept[digest]


SAMPLE = 64  # the items of a long list :func:`estimate_bytes` looks at


def estimate_bytes(value: Any, depth: int = 0) -> int:
    """About how many bytes ``value`` holds: arrays and bytes by their length, strings by
    ``sys.getsizeof``, containers, structs and dataclasses by what they hold (a long list
    by a sample of its items, each object the sample meets counted once: a column of
    990,000 references to one empty string is its pointers, not 990,000 strings). An
    estimate for the budget, not an accounting (an object two values share, or two
    fields of one, is counted in each)."""
    nbytes = getattr(value, "nbytes", None)  # a numpy array (numpy not imported for it)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, bytes | bytearray | str):
        return sys.getsizeof(value)
    if depth > 4 or value is None or isinstance(value, int | float | bool):
        return 16
    if isinstance(value, list | tuple):
        # A long list by SAMPLE of its items, evenly spread: summing each of 100,000
        # records' tuples took 1.9 s, more than the read it would save.
        step = max(1, len(value) // SAMPLE)
        sampled = value[::step]
        distinct = {id(v): v for v in sampled}.values()  # the list's items, seen once each
        items = (
            sum(estimate_bytes(v, depth + 1) for v in distinct) * len(value) / max(1, len(sampled))
        )
        return 8 * len(value) + int(items)
    if isinstance(value, dict):
        return sum(estimate_bytes(v, depth + 1) + 64 for v in value.values())
    if isinstance(value, msgspec.Struct):
        return sum(estimate_bytes(getattr(value, f), depth + 1) for f in value.__struct_fields__)
    if is_dataclass(value) and not isinstance(value, type):
        return sum(estimate_bytes(getattr(value, f.name), depth + 1) for f in fields(value))
    return sys.getsizeof(value)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"
