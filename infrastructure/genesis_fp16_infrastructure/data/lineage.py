"""The pool around an attempt: what earlier records say about its lineage.

An attempt's own record says who its parents are; the rest of its lineage is in the other
records of the pool: how deep the line goes, what the grandparents scored, which
operators made the parents, and how the parents' other children (its siblings) fared.
:class:`Pool` holds the records by id; ``world_model.lineage_columns`` works out the
lineage features of many attempts at once from it.

Leak-free by construction: scores are the recorded scores of *other* records (the
attempt's own id is never its parent, grandparent or sibling), and a sibling counts only
when it was created before the attempt. An attempt with no creation time sees no
siblings (when it ran is unknown); a candidate scored through the prediction API is
taken as created now, after every record of the pool.

>>> pool = Pool({"a": PoolEntry(0.9), "b": PoolEntry(0.4, parents=("a",), created=1.0)})
>>> pool.scores
{'a': 0.9, 'b': 0.4}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAX_DEPTH = 1000  # a longer chain counts as this deep


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One record of the pool, as the lineage of another attempt sees it."""

    score: float | None = None  # the recorded success_score; None while unknown
    parents: tuple[str, ...] = ()
    operator: str = ""
    created: float | None = None  # seconds since the epoch


class Pool:
    """Every record of a pool by id, and the scores of those that have one."""

    def __init__(self, entries: dict[str, PoolEntry]) -> None:
        """A pool of ``entries``, taken as they are, not copied: a reader that built them
        hands them over (a million records: a dict of ~100 MB not made again)."""
        self.entries = entries
        self.scores = {k: e.score for k, e in entries.items() if e.score is not None}

    @classmethod
    def from_scores(cls, scores: Mapping[str, float]) -> Pool:
        """A pool known only by its scores: parents' scores, no lineage beyond them."""
        return cls({k: PoolEntry(float(v)) for k, v in scores.items()})
