"""The pool around an attempt: what earlier records say about its lineage.

An attempt's own record says who its parents are; the rest of its lineage is in the other
records of the pool: how deep the line goes, what the grandparents scored, which
operators made the parents, and how the parents' other children (its siblings) fared.
:class:`Pool` indexes the records once and answers :meth:`Pool.lineage` for one attempt.

Leak-free by construction: scores are the recorded scores of *other* records (the
attempt's own id is never its parent, grandparent or sibling), and a sibling counts only
when it was created before the attempt. An attempt with no creation time sees no
siblings (when it ran is unknown); a candidate scored through the prediction API is
taken as created now, after every record of the pool.

>>> pool = Pool({"a": PoolEntry(0.9), "b": PoolEntry(0.4, parents=("a",), created=1.0)})
>>> pool.lineage("c", ("a",), created=2.0).sibling_scores
[0.4]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

MAX_DEPTH = 1000  # a longer chain counts as this deep (a loop in a malformed pool: a root)


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One record of the pool, as the lineage of another attempt sees it."""

    score: float | None = None  # the recorded success_score; None while unknown
    parents: tuple[str, ...] = ()
    operator: str = ""
    created: float | None = None  # seconds since the epoch


class Lineage(NamedTuple):
    """An attempt's lineage beyond its own record (a tuple: the encoder unpacks one per
    record of a pool)."""

    depth: int  # 0 with no parents; else 1 + the deepest parent's depth
    grandparent_scores: list[float]
    parent_operators: list[str]
    sibling_scores: list[float]  # the parents' other children, created before it


class Pool:
    """Every record of a pool by id, with the parent-to-children links."""

    def __init__(self, entries: dict[str, PoolEntry]) -> None:
        """A pool of ``entries``, taken as they are, not copied: a reader that built them
        hands them over (a million records: a dict of ~100 MB not made again)."""
        self.entries = entries
        self.scores = {k: e.score for k, e in entries.items() if e.score is not None}
        self._depths: dict[str, int] = {}

    @cached_property
    def children(self) -> dict[str, list[str]]:
        """Parent id -> its children, in pool order; worked out when first asked (the
        record-at-a-time walk asks; a whole pool's lineage comes from
        world_model.lineage_columns, which never does)."""
        children: dict[str, list[str]] = {}
        for child, entry in self.entries.items():
            for parent in entry.parents:
                children.setdefault(parent, []).append(child)
        return children

    @classmethod
    def from_scores(cls, scores: Mapping[str, float]) -> Pool:
        """A pool known only by its scores: parents' scores, no lineage beyond them."""
        return cls({k: PoolEntry(float(v)) for k, v in scores.items()})

    def lineage(self, attempt_id: str, parents: tuple[str, ...], created: float | None) -> Lineage:
        """The lineage of an attempt with these parents, created at ``created``."""
        entries, scores = self.entries, self.scores
        operators: list[str] = []
        grand: set[str] = set()
        for parent in parents:
            entry = entries.get(parent)
            if entry is not None and parent != attempt_id:
                operators.append(entry.operator)
                grand.update(entry.parents)
        grand.discard(attempt_id)
        siblings: list[float] = []
        if created is not None:
            seen = {attempt_id}
            for parent in parents:
                for child in self.children.get(parent, ()):
                    entry = entries[child]
                    if child in seen or entry.score is None or entry.created is None:
                        continue
                    seen.add(child)
                    if entry.created < created:
                        siblings.append(entry.score)
        depth = 0  # without parents; else 1 + the deepest parent's (one outside the pool: 0)
        if parents:
            depth = 1 + max((self._depth(p) for p in parents if p in entries), default=0)
        return Lineage(depth, sorted(scores[g] for g in grand if g in scores), operators, siblings)

    def _depth(self, start: str) -> int:
        """Depth of a pool record, iteratively (chains run as long as the pool's history).

        A depth-first walk up the parents: a record is opened when first reached and
        closed once its parents are; a parent that is still open is a loop, and counts
        as a root here. Depths are capped at ``MAX_DEPTH`` as they are closed, the walk
        itself is not: a chain longer than that is ``MAX_DEPTH`` deep wherever it is
        entered. (The walk once took any parent waiting on its stack for a loop and
        stopped going up after ``MAX_DEPTH`` records, so a record's depth depended on
        which records were asked first.)"""
        depths, entries = self._depths, self.entries
        stack, open_ = [start], set()
        while stack:
            node = stack[-1]
            if node in depths:
                stack.pop()
                continue
            pending = [p for p in entries[node].parents if p in entries]
            if node not in open_:
                open_.add(node)
                todo = [p for p in pending if p not in depths and p not in open_]
                if todo:
                    stack.extend(reversed(todo))
                    continue
            # Every parent closed, or open (a loop): those count 0.
            known = [depths.get(p, 0) for p in pending]
            depths[node] = min(MAX_DEPTH, 1 + max(known)) if pending else 0
            open_.discard(node)
            stack.pop()
        return depths[start]
