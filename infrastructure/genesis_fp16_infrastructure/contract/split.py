"""The held-out split: the records no judged model trains on, so that the gate can judge
two models on records neither of them learned.

A record is held out by a stable hash of its id alone, never by its place in a file: a
record keeps its side as the pool grows, shrinks or is reordered, and every model trained
under the split left out the same records, so "neither model trained on it" needs no
list of what each one read. The split works on 64-bit id hashes (:func:`id_hashes` of a
plugin's string ids, or any other stable 64-bit hash of a record's id, such as
se_darwin's ``schema.record_id_hash``): one vector pass, about 20 ms a million ids.

How a record's side is drawn: its id hash, xor a 64-bit key hashed from ``salt``, through
splitmix64's finalizer (an avalanche: a one-bit change of the id moves every output bit
with probability 1/2), read as a number in [0, 1); the record is held out below
``fraction``. Another salt is another, independent split.

>>> split = HeldOutSplit()
>>> held = split.of_ids([f"record-{i}" for i in range(10_000)])
>>> int(held.sum()), bool(split.of_ids(["record-7"])[0] == held[7])  # about 2,000
(1936, True)
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from genesis_fp16_infrastructure.data.schema import id_digest
from genesis_fp16_infrastructure.record_codec import Record

_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(0x94D049BB133111EB))


def id_hashes(ids: Iterable[str]) -> np.ndarray:
    """Each id's 64-bit hash (blake2b), in order (uint64): sortable and compact; two of a
    few million ids collide with a chance of about 1e-7."""
    return np.frombuffer(b"".join(map(id_digest, ids)), dtype=np.uint64).copy()


def sorted_unique(hashes: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted: ``np.unique``'s answer by one sort.
    numpy 2.4's ``np.unique`` of 64-bit ids goes through a hash table first: 0.15 s for
    175,000 distinct ids, where the sort takes 0.003 s (a judged run does this 3 to 4
    times at 100,000 records).

    >>> sorted_unique(np.array([3, 1, 3, 2], dtype=np.uint64)).tolist()
    [1, 2, 3]
    """
    ordered = np.sort(hashes)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def splitmix64(hashes: np.ndarray, key: np.uint64) -> np.ndarray:
    """Each 64-bit id hash xor ``key`` through splitmix64's finalizer (module docstring):
    the held-out split's draw, and the retrain recipe's parts and folds (its version 2)."""
    z = np.ascontiguousarray(hashes).view(np.uint64) ^ key  # the one array of its own
    # The same steps in place: each fresh array of the hashes' size cost a pass of page
    # faults; at 20,000 hashes this way is ~6x faster (0.22 -> 0.035 ms of CPU).
    with np.errstate(over="ignore"):  # the finalizer multiplies modulo 2**64
        z ^= z >> _MIX[0]
        z *= _MIX[1]
        z ^= z >> _MIX[2]
        z *= _MIX[3]
    z ^= z >> np.uint64(31)
    return z


@dataclass(frozen=True)
class HeldOutSplit:
    """Which records are held out: ``fraction`` of them, by their ids (module docstring).

    The judged run's split is :data:`HELD_OUT`; a recipe with a split of its own (another
    fraction, a salt per purpose) builds another and gets the same guarantees.
    """

    fraction: float = 0.2
    salt: str = "genesis-fp16 held-out 1"

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction < 1.0:
            raise ValueError(f"HeldOutSplit: fraction {self.fraction!r} is not in (0, 1)")

    def of_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """Per record, whether it is held out, from its 64-bit id hash (any integer dtype
        of 64 bits: an int64 hash is read as the same bits); an array of the caller's
        own. A judged run asks this of the same hashes from several places (its
        listing, the read's examples, the served model's list) and each run of a grown
        pool of hashes that begin with the last run's: the answers for the last few
        arrays drawn are kept (:class:`_Drawn`), believed only for hashes that begin
        with the very ones they were drawn of (each compared) and right on a sample
        drawn again, and only the hashes past them are drawn."""
        values = np.ascontiguousarray(hashes)
        if values.dtype.itemsize != 8 or values.dtype.kind not in "iu":
            raise ValueError(f"HeldOutSplit: id hashes of dtype {values.dtype}, not 64-bit")
        values = values.view(np.uint64).reshape(-1)
        draw = (self.fraction, self.salt)
        with _DRAWN_LOCK:
            hit = next((d for d in _DRAWN if d.answers(draw, values, self._draw)), None)
        if hit is not None and len(hit.hashes) == len(values):
            DRAWS["kept"] += 1
            return hit.held.copy()
        n = 0 if hit is None else len(hit.hashes)
        held = self._draw(values[n:])
        if hit is not None:
            DRAWS["grown"] += 1
            held = np.concatenate([hit.held, held])
        else:
            DRAWS["drawn"] += 1
        if len(values):
            _keep_drawn(_Drawn.of(draw, values, held))
        return held

    def _draw(self, hashes: np.ndarray) -> np.ndarray:
        """Each uint64 hash's side, drawn (module docstring)."""
        key = np.frombuffer(
            hashlib.blake2b(self.salt.encode(), digest_size=8).digest(), dtype=np.uint64
        )[0]
        z = splitmix64(hashes, key)
        z >>= np.uint64(11)
        # Read as a number in [0, 1): z * 2**-53 < fraction. Both sides exact in float64
        # (z < 2**53; a power of two scales exactly), so for an integer z that is
        # z < ceil(fraction * 2**53): the same sides, with no float array made.
        return np.asarray(z < np.uint64(math.ceil(self.fraction * 2.0**53)))

    def of_ids(self, ids: Iterable[str]) -> np.ndarray:
        """Per record, whether it is held out, from its string id."""
        return self.of_hashes(id_hashes(ids))


HELD_OUT = HeldOutSplit()  # the judged run's split (contract.judging, judging_version 2)

# Answers of HeldOutSplit.of_hashes: "kept" (the same hashes as one drawn before), "grown"
# (drawn past the hashes of one kept), "drawn" (every hash).
DRAWS: Counter[str] = Counter()
# The answers kept: this process's last few arrays of hashes drawn (9 bytes a record each:
# 36 MB at most for a 1,000,000-record pool's).
DRAWN_KEPT = 4
DRAWN_SAMPLE = 64  # the rows of a kept answer drawn again before it is believed


@dataclass(frozen=True, eq=False)
class _Drawn:
    """One answer of :meth:`HeldOutSplit.of_hashes` kept in this process: the split it was
    drawn under (``draw``: fraction and salt), the uint64 hashes it was drawn of and
    their sides, each a read-only copy of its own (a caller's array may change after)."""

    draw: tuple[float, str]
    hashes: np.ndarray
    held: np.ndarray

    @classmethod
    def of(cls, draw: tuple[float, str], hashes: np.ndarray, held: np.ndarray) -> _Drawn:
        copies = np.array(hashes, copy=True), np.array(held, dtype=bool, copy=True)
        for array in copies:
            array.flags.writeable = False
        return cls(draw, *copies)

    def answers(
        self, draw: tuple[float, str], hashes: np.ndarray, drawn: Callable[[np.ndarray], np.ndarray]
    ) -> bool:
        """Whether this answer holds for ``hashes``' first rows: the same split, the very
        hashes it was drawn of there (each compared), and its sides right on a sample of
        :data:`DRAWN_SAMPLE` rows drawn again (``drawn``): a planted or stale answer is
        not believed."""
        n = len(self.hashes)
        if draw != self.draw or not n or n > len(hashes) or len(self.held) != n:
            return False
        # Its ends first: another array of hashes is told apart without a pass over it.
        if hashes[0] != self.hashes[0] or hashes[n - 1] != self.hashes[n - 1]:
            return False
        if not np.array_equal(hashes[:n], self.hashes):
            return False
        at = np.linspace(0, n - 1, min(DRAWN_SAMPLE, n), dtype=np.int64)
        return bool(np.array_equal(drawn(self.hashes[at]), self.held[at]))


_DRAWN: list[_Drawn] = []  # newest first, at most DRAWN_KEPT
_DRAWN_LOCK = threading.Lock()  # a run's threads (its scorings) may draw at once


def _keep_drawn(entry: _Drawn) -> None:
    """``entry`` kept first, in place of any kept whose hashes begin and end as a prefix
    of its own does (the last run's of a grown pool: this one answers for those too; an
    array told so by its ends alone, which is only ever a slot given back early)."""
    hashes = entry.hashes
    with _DRAWN_LOCK:
        others = [d for d in _DRAWN if not _prefix_ends(d.hashes, hashes)]
        _DRAWN[:] = [entry, *others[: DRAWN_KEPT - 1]]


def _prefix_ends(kept: np.ndarray, hashes: np.ndarray) -> bool:
    """Whether ``kept`` is no longer than ``hashes`` and they begin and end the same."""
    n = len(kept)
    return 0 < n <= len(hashes) and kept[0] == hashes[0] and kept[n - 1] == hashes[n - 1]


@contextlib.contextmanager
def drawn_with(salt: str) -> Iterator[HeldOutSplit]:
    """:data:`HELD_OUT` drawn with ``salt`` for the block, in this process: every record's
    side drawn again, for the judged run and for a recipe that reads :data:`HELD_OUT`
    itself alike. check-agent's alone (``run_plugin(..., split_salt=)``): a plugin trained
    under two draws must train two models, or it trains on the rows withheld; a daemon's
    runs never change the split (a served model's held-out records would move)."""
    kept = HELD_OUT.salt
    object.__setattr__(HELD_OUT, "salt", salt)  # the one split every module imported
    try:
        yield HELD_OUT
    finally:
        object.__setattr__(HELD_OUT, "salt", kept)


def _unchangeable(rows: Sequence[int] | np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """``rows`` as a 1-D array of ``dtype`` over bytes of its own: read-only, and no one
    can make it writeable (its memory is an immutable ``bytes``).

    >>> at = _unchangeable([3, 5])
    >>> at.tolist(), at.flags.writeable
    ([3, 5], False)
    """
    data = np.ascontiguousarray(rows, dtype=dtype).reshape(-1).tobytes()
    return np.frombuffer(data, dtype=dtype)


@dataclass(frozen=True, eq=False, init=False)
class ScoreOnly(Record):
    """The records a judged run needs a checkpoint's losses on, by their ids. The run
    sets it on the request it hands ``score_records`` (``TrainRequest.score_only``), so
    that a plugin may score those alone (``TrainRequest.scoring_rows``); one that scores
    more is judged the same. Not part of a run's JSON: a run's child or a bundle never
    sees it.

    ``ids``: the asked ids, a frozenset. Made of rows of a listing (:meth:`of_rows`), the
    set is built the first time a plugin reads it, of ``among`` (a tuple) and ``at`` (an
    int64 array over bytes: what it is made of cannot change): a plugin that asks by rows
    of the same listing (:meth:`rows`, :meth:`row_array`) never needs it, and the judged
    run asks twice a run (~20,000 ids each at 100,000 records).

    >>> ScoreOnly(frozenset({"b", "d"})).rows(["a", "b", "c", "d"])
    [1, 3]
    >>> asked = ScoreOnly.of_rows(("a", "b", "c", "d"), [1, 3])
    >>> asked.rows(["a", "b", "c", "d"]), sorted(asked.ids)
    ([1, 3], ['b', 'd'])
    >>> asked.row_array(("a", "b", "c", "d")).tolist(), asked.row_array(("a", "b"))
    ([1, 3], None)
    """

    # Where the ids lie in the listing the run took them from (``among``: its ids, none
    # twice; ``at``: their rows there, ascending), when it took them from one
    # (:meth:`of_rows`): the rows of ids equal to that listing are ``at``, no id looked up.
    among: tuple[str, ...] | None = field(default=None, repr=False)
    at: np.ndarray | None = field(default=None, repr=False)

    def __init__(
        self,
        ids: frozenset[str] | None = None,
        among: tuple[str, ...] | None = None,
        at: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        if ids is None and (among is None or at is None):
            raise ValueError("ScoreOnly: the ids asked for, or the rows of a listing (of_rows)")
        object.__setattr__(self, "among", among)
        object.__setattr__(self, "at", None if at is None else _unchangeable(at))
        if ids is not None:  # given: kept as given (cached_property's slot)
            vars(self)["ids"] = ids

    @cached_property
    def ids(self) -> frozenset[str]:
        """The ids asked for (given, else those at rows ``at`` of ``among``)."""
        assert self.among is not None and self.at is not None
        return frozenset(map(self.among.__getitem__, self.at.tolist()))

    @classmethod
    def of_rows(cls, among: tuple[str, ...], at: Sequence[int] | np.ndarray) -> ScoreOnly:
        """The ids at rows ``at`` (ascending) of the listing ``among`` (distinct ids: a
        ``RecordIds``'), which :meth:`rows` of the same listing gives back as they are;
        the set of them built when read (``ids``)."""
        return cls(None, among, at)

    def rows(self, ids: Sequence[str]) -> list[int]:
        """The rows of ``ids`` (in order) that are asked for. Ids equal to the listing
        they were taken from (:meth:`of_rows`), id for id: its rows (a tuple's compare,
        ~1 ms at 100,000, each id the listing's own object). Else a set lookup each
        (hashing 100,000 ids to compare them took 0.1 s), in C's loops: a comprehension
        over 100,000 ids took 24 ms, this 14 (the gate's and the watch's scorings each)."""
        at = self.row_array(ids)
        if at is not None:
            return at.tolist()
        return list(itertools.compress(range(len(ids)), map(self.ids.__contains__, ids)))

    def row_array(self, ids: Sequence[str]) -> np.ndarray | None:
        """:meth:`rows` as the int64 array they were asked as, which nothing can change,
        where ``ids`` equal the listing they were taken from, id for id (no list of
        20,000 Python ints and back, twice a judged run); else None (ask :meth:`rows`)."""
        among, at = self.among, self.at
        listed = among is not None and at is not None and len(ids) == len(among)
        if listed and (ids is among or (ids if isinstance(ids, tuple) else tuple(ids)) == among):
            return at
        return None

    def to_json(self) -> None:  # type: ignore[override]  # a request's JSON holds null
        return None
