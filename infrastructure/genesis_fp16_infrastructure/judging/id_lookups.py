"""A run's id lookups kept from run to run, so that each costs what is new: the order
that sorts a lookup's id hashes (:func:`ranked`: the listed records' ids, the drift's
record hashes), and which of a listing's ids are among a model's known ids
(:func:`listed_known`, :func:`remember_known`). They live in the process's kept-in-memory
store (``kept_in_memory``), within the request's ``keep_in_memory_bytes``; what is taken
from it is checked before it is believed (the kept ids compared with the ones asked, an
answer searched again on a sample), and a budget of 0 keeps nothing: every id is sorted
or searched. The known ids themselves are a file (:mod:`.stores`).

>>> ids = np.array([7, 3, 9], dtype=np.uint64)
>>> listed_known("doc", ids, np.array([3, 7], dtype=np.uint64), 0).tolist()
[True, True, False]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.data.pool_columns import IdRank
from genesis_fp16_infrastructure.kept_in_memory import KeptValue, process_memory

RANKED_KIND = "query order"  # the store's key: (RANKED_KIND, name)
# Lookups whose order was the last run's grown by the new ids ("grown"), or sorted whole
# ("sorted": nothing kept, or the ids did not begin with the kept ones).
RANKED: Counter[str] = Counter()


def ranked(name: str, ids: np.ndarray, budget: int | None) -> np.ndarray | None:
    """An order that sorts ``ids``, the hashes a run looks up under ``name`` (the listed
    records' ids, the drift's record hashes): where this process kept the last run's
    order of that lookup (within ``budget`` bytes: the request's
    ``keep_in_memory_bytes``) and ``ids`` begin with that run's ids (every one compared),
    that order with the new ids alone sorted and inserted (a grown pool: it costs what
    is new); else a sort of all of them. Kept for the next run. None: nothing is kept (a
    budget of 0), or two ids share a hash (:class:`IdRank`): the lookup sorts them.

    >>> ranked("doc", np.array([5, 1], dtype=np.uint64), 0) is None
    True
    """
    memory = process_memory(budget or 0)
    if memory is None:
        return None
    (kept,) = memory.get_each([((RANKED_KIND, name), RANKED_KIND)])
    rank, given = _ranked(name, kept, ids)
    memory.put_each(_rank_kept(name, rank), given)
    return None if rank is None else rank.order


def _ranked(name: str, kept: object, ids: np.ndarray) -> tuple[IdRank | None, list[str]]:
    """:func:`ranked`'s order of ``ids`` (counted in ``RANKED``): ``kept`` (what the store
    held under the name) grown by the new ids where it holds, else a sort of them all;
    and what was taken from the store, said (its order, where it was grown)."""
    if isinstance(kept, IdRank) and (rank := _grown(kept, ids)) is not None:
        RANKED["grown"] += 1
        return rank, [f"the order of {len(kept):,} {name}"]
    RANKED["sorted"] += 1
    return IdRank.of(ids), []


def _rank_kept(name: str, rank: IdRank | None) -> list[KeptValue]:
    """``rank`` as the store keeps it under ``name`` (none: nothing to keep)."""
    if rank is None:
        return []
    size = rank.order.nbytes + rank.hashes.nbytes
    return [KeptValue((RANKED_KIND, name), RANKED_KIND, rank, size, name)]


def _grown(kept: IdRank, ids: np.ndarray) -> IdRank | None:
    """``kept`` grown by ``ids``' rows past it, when ``ids`` begin with its hashes (each
    compared, through its order) and none of the new ones is among them; else None."""
    n = len(kept)
    if n > len(ids) or ids.dtype != kept.hashes.dtype:
        return None
    if not np.array_equal(ids[:n][kept.order], kept.hashes):
        return None
    new = ids[n:]
    if len(new) and len(np.unique(new)) < len(new):
        return None  # a hash twice: IdRank holds each once
    if n and len(new):
        at = np.minimum(np.searchsorted(kept.hashes, new), n - 1)
        if bool((kept.hashes[at] == new).any()):
            return None
    return kept.grown(new, n)


LOOKUP_KIND = "known lookup"  # the store's key: (LOOKUP_KIND, name)
# Lookups of a listing's ids among the known ones: the kept answer grown by the new ids
# alone ("grown"), or every id searched ("searched": nothing kept held, or a check failed).
LOOKUPS: Counter[str] = Counter()


@dataclass(frozen=True, eq=False)
class KnownLookup:
    """Which of ``ids`` are in ``known`` (sorted distinct hashes): ``found``, one flag per
    id. Each array a read-only copy of its own."""

    ids: np.ndarray
    known: np.ndarray
    found: np.ndarray

    @classmethod
    def of(
        cls, ids: np.ndarray, known: np.ndarray, found: np.ndarray, owned: tuple[object, ...] = ()
    ) -> KnownLookup:
        """Of copies of its own of the arrays, read-only (but those ``owned`` already: a
        kept lookup's own read-only copy)."""
        copies = [
            a if any(a is o for o in owned) else np.array(a, copy=True) for a in (ids, known, found)
        ]
        for array in copies:
            array.flags.writeable = False
        return cls(*copies)

    def answers(self, ids: np.ndarray, known: np.ndarray) -> bool:
        """Whether this lookup holds for ``ids``' first rows against ``known``: the very
        same known hashes (each compared), ``ids`` beginning with its ids (each compared),
        and its answer right on a sample of 64 of them (searched again): a planted or
        stale answer is not believed."""
        n = len(self.ids)
        if len(self.found) != n or n > len(ids) or ids.dtype != self.ids.dtype:
            return False
        if known.dtype != self.known.dtype or not np.array_equal(known, self.known):
            return False
        if not np.array_equal(ids[:n], self.ids):
            return False
        at = np.linspace(0, n - 1, min(64, n), dtype=np.int64)
        return bool(np.array_equal(schema.known(ids[at], known), self.found[at]))


def listed_known(
    name: str, ids: np.ndarray, sorted_known: np.ndarray, budget: int | None
) -> np.ndarray:
    """:func:`~.schema.known` for a listing's ``ids`` (``name``: :func:`ranked`'s), costing
    what is new: where this process kept a lookup of ids that these begin with, against
    the same known hashes (this run's own, or one a run wrote for its candidate:
    :func:`remember_known`), its answer for those, and the new ids alone searched; else
    every id, in :func:`ranked`'s order. Kept for the next run (``budget``: the request's
    ``keep_in_memory_bytes``; 0 keeps nothing, every id is searched). The store is asked
    once for the kept lookups and order, and given once what the next run finds.

    >>> ids = np.array([7, 3, 9], dtype=np.uint64)
    >>> listed_known("doc", ids, np.array([3, 7], dtype=np.uint64), 0).tolist()
    [True, True, False]
    """
    memory = process_memory(budget or 0)
    asked = [((LOOKUP_KIND, name), LOOKUP_KIND), ((RANKED_KIND, name), RANKED_KIND)]
    held, order = (None, None) if memory is None else memory.get_each(asked)
    lookups = lookups_held(held)
    hit = next((k for k in lookups if k.answers(ids, sorted_known)), None)
    if hit is None:
        LOOKUPS["searched"] += 1
        rank, given = (None, []) if memory is None else _ranked(name, order, ids)
        found = schema.known(ids, sorted_known, None if rank is None else rank.order)
        entry = KnownLookup.of(ids, sorted_known, found) if memory is not None else None
        ranks = _rank_kept(name, rank)
    else:
        LOOKUPS["grown"] += 1
        n = len(hit.ids)
        found = np.concatenate([hit.found, schema.known(ids[n:], sorted_known)])
        # The same known hashes (compared): its copy kept, not copied again
        entry = KnownLookup.of(ids, hit.known, found, owned=(hit.known,))
        ranks, given = [], [f"the lookup of {n:,} {name}"]
    if memory is not None and entry is not None:
        kept = [*ranks, lookups_kept(name, entry, lookups)]
        memory.put_each(kept, given)
    return found


def remember_known(
    name: str, ids: np.ndarray, sorted_known: np.ndarray, found: np.ndarray, budget: int | None
) -> None:
    """Keep ``found``, which of ``ids`` are in ``sorted_known``, for :func:`listed_known`'s
    next lookup under ``name``, beside the one kept last of other known ids (two: the
    served model's, and those a run wrote for its candidate, served next if promoted)."""
    memory = process_memory(budget or 0)
    if memory is not None and len(found) == len(ids):
        (held,) = memory.get_each([((LOOKUP_KIND, name), LOOKUP_KIND)])
        entry = KnownLookup.of(ids, sorted_known, found)
        memory.put_each([lookups_kept(name, entry, lookups_held(held))])


def lookups_kept(name: str, entry: KnownLookup, held: Sequence[KnownLookup]) -> KeptValue:
    """``entry`` as the store keeps it under ``name``: first, beside the last one of
    ``held`` (those kept there before) of other known ids."""
    others = [k for k in held if not np.array_equal(k.known, entry.known)]
    kept = (entry, *others[:1])
    size = sum(k.ids.nbytes + k.known.nbytes + k.found.nbytes for k in kept)
    return KeptValue((LOOKUP_KIND, name), LOOKUP_KIND, kept, size, f"the lookups of the {name}")


def lookups_held(value: object) -> tuple[KnownLookup, ...]:
    """The lookups among what the store held under a name (none: nothing, or not
    lookups)."""
    return tuple(k for k in value if isinstance(k, KnownLookup)) if isinstance(value, tuple) else ()
