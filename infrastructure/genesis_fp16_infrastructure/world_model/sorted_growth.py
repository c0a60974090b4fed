"""Values kept sorted as a pool grows, in two levels: a growth costs what is new (issue 90).

A kept pool's parents named and its content keys are searched sorted
(``world_model.kept_numeric``: which records name a new one as their parent). Inserting a
later run's thousand new values into 100,000 sorted ones copied the whole array, twice
(``numpy.insert`` of the values and of their order: about 0.6 ms a pair at 100,000, the
most of what the kept rows' view grew by with the pool). :class:`SortedGrowth` keeps a
sorted ``base`` and the values ``added`` since, sorted too, each with the index each
value came from: a growth sorts the new values into the added ones alone, and the added
ones are merged into the base (one copy) once they pass 1/``GROWTH`` of it: spread over
the growths, a constant per new value. A search looks in both levels
(:meth:`SortedGrowth.indices_of`); :meth:`SortedGrowth.whole` is the one sorted order of
every value, for what wants it whole (the kept file's order column).

Each is made by this process of one array, which it holds (``source``: the pool's own,
which nothing writes), and is used only with an array of the same bits
(:meth:`SortedGrowth.indexes`: at once when it is that array, else one comparison of the
bytes); one that is not is made again. Its levels are read-only.

>>> s = SortedGrowth.of(np.array([30, 10, 20])).grown(np.array([30, 10, 20, 15, 5]))
>>> s.indices_of(np.array([5, 15, 30])).tolist(), s.whole()[0].tolist()
([4, 3, 0], [4, 1, 3, 2, 0])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from genesis_fp16_infrastructure.data.pool_columns import ranges
from genesis_fp16_infrastructure.world_model.content_keys import same_bits

GROWTH = 8  # the added values are merged into the base past 1/GROWTH of its size


class SortedGrowth(NamedTuple):
    """An array's values (``source``) sorted in two levels: ``base`` (its first values,
    sorted) with ``base_at`` (each one's index in the array), and the values ``added``
    since, sorted, with ``added_at``. Equal values come in no set order (numpy's default
    sort: a stable one of 64-bit values took 10x longer): a parent's children are a set,
    and keys are distinct."""

    base: np.ndarray
    base_at: np.ndarray
    added: np.ndarray
    added_at: np.ndarray
    source: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, order: np.ndarray | None = None) -> SortedGrowth:
        """``values`` sorted, all in the base (by ``order``, the indices that sort them,
        when the caller has it)."""
        at = np.argsort(values) if order is None else order
        return _frozen(values[at], at, values[:0], at[:0], values)

    @property
    def values(self) -> int:
        """How many values, in both levels."""
        return len(self.base) + len(self.added)

    def grown(self, source: np.ndarray) -> SortedGrowth:
        """The sorting of ``source``, whose first values are this one's (the caller has
        checked their bits): its values past them sorted into the added ones (a sort of
        the new values, a copy of the added), or, past 1/``GROWTH`` of the base, every
        added value merged into the base (one copy of it)."""
        first = self.values
        return self._with(source, self.base_at, self.added_at, np.arange(first, len(source)))

    def spliced(self, source: np.ndarray, kept_at: np.ndarray, new_at: np.ndarray) -> SortedGrowth:
        """The sorting of ``source``, whose values at ``kept_at`` (ascending) are this
        one's, in their order (the caller has checked their bits), and whose others lie at
        ``new_at``: a new data file sorting among the old ones. Each kept value's index is
        moved to its place (one gather of each level's), the new values sorted into the
        added ones, as :meth:`grown` does."""
        return self._with(source, kept_at[self.base_at], kept_at[self.added_at], new_at)

    def _with(
        self, source: np.ndarray, base_at: np.ndarray, added_at: np.ndarray, new_at: np.ndarray
    ) -> SortedGrowth:
        """These levels, their indices ``base_at`` and ``added_at`` in ``source``, with
        ``source``'s values at ``new_at`` sorted into the added ones (or, past
        1/``GROWTH`` of the base, every added value merged into the base)."""
        values = source[new_at]
        by = np.argsort(values)
        added, added_at = _merged(self.added, added_at, values[by], new_at[by])
        if len(added) * GROWTH <= len(self.base):
            return _frozen(self.base, base_at, added, added_at, source)
        base, base_at = _merged(self.base, base_at, added, added_at)
        return _frozen(base, base_at, added[:0], added_at[:0], source)

    def indices_of(self, wanted: np.ndarray) -> np.ndarray:
        """The index of every value equal to one of ``wanted`` (sorted, distinct), in
        either level: the base's first, then the added ones'."""
        found = []
        for values, at in ((self.base, self.base_at), (self.added, self.added_at)):
            low = np.searchsorted(values, wanted)
            high = np.searchsorted(values, wanted, "right")
            found.append(at[ranges(low, high - low)])
        return np.concatenate(found)

    def whole(self) -> tuple[np.ndarray, np.ndarray]:
        """Every value's index in sorted order, and the values so sorted (one level)."""
        at, values = _merged(self.base, self.base_at, self.added, self.added_at)[::-1]
        return at, values

    def indexes(self, values: np.ndarray) -> bool:
        """Whether this is the sorting of ``values``: the array it was made of, the same
        bits (the check before a kept one is used)."""
        return same_bits(values, self.source)


def _frozen(
    base: np.ndarray, base_at: np.ndarray, added: np.ndarray, added_at: np.ndarray,
    source: np.ndarray,
) -> SortedGrowth:  # fmt: skip
    """A :class:`SortedGrowth` of these levels, read-only (kept from run to run)."""
    for level in (base, base_at, added, added_at):
        level.flags.writeable = False
    return SortedGrowth(base, base_at, added, added_at, source)


def _merged(
    ranked: np.ndarray, ranked_at: np.ndarray, more: np.ndarray, more_at: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted levels as one: each of ``more`` (sorted) after the equal ones of
    ``ranked``; the values, then their indices."""
    place = np.searchsorted(ranked, more, "right")
    return np.insert(ranked, place, more), np.insert(ranked_at, place, more_at)
