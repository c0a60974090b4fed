"""An attempt's lineage worked out record by record from the pool's objects, written for
plainness, not speed: the yardstick that ``world_model.lineage_columns`` is held to, bit
for bit. (It was the product's own path for a few candidates and looping pools until the
arrays took every case.)"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from genesis_fp16_infrastructure.data.lineage import MAX_DEPTH, Pool
from genesis_fp16_infrastructure.data.schema import OPERATORS, SUCCESS_THRESHOLD, AttemptInput


class Lineage(NamedTuple):
    depth: int  # 0 with no parents; else 1 + the deepest parent's depth (0 outside the pool)
    grandparent_scores: list[float]  # the distinct grandparents' known scores, sorted
    parent_operators: list[str]
    sibling_scores: list[float]  # the parents' other children, created before it


@lru_cache(maxsize=4)
def _walk(pool: Pool) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Each id's children (pool order, once per naming) and each record's depth: the
    longest chain of parents in the pool, capped at MAX_DEPTH; a record on a loop of
    parents, or below one, counts its parents there as roots (at least 1)."""
    children: dict[str, list[str]] = {}
    for child, entry in pool.entries.items():
        for parent in entry.parents:
            children.setdefault(parent, []).append(child)
    depths: dict[str, int | None] = {}  # None while open
    looped: set[str] = set()

    def visit(key: str) -> None:
        depths[key] = None
        best = 0
        for parent in (p for p in pool.entries[key].parents if p in pool.entries):
            if parent not in depths:
                visit(parent)
            depth = depths[parent]
            if depth is None or parent in looped:
                looped.add(key)
                best = max(best, 1)
            else:
                best = max(best, 1 + depth)
        depths[key] = min(MAX_DEPTH, best)

    for key in pool.entries:
        if key not in depths:
            visit(key)
    return children, {k: d for k, d in depths.items() if d is not None}


def lineage(
    pool: Pool, attempt_id: str, parents: tuple[str, ...], created: float | None
) -> Lineage:
    children, depths = _walk(pool)
    entries, scores = pool.entries, pool.scores
    operators: list[str] = []
    grand: set[str] = set()
    for parent in parents:
        if parent in entries and parent != attempt_id:
            operators.append(entries[parent].operator)
            grand.update(entries[parent].parents)
    grand.discard(attempt_id)
    siblings: list[float] = []
    seen = {attempt_id}
    for parent in parents:
        for child in children.get(parent, ()):
            entry = entries[child]
            if created is None or child in seen or entry.score is None or entry.created is None:
                continue
            seen.add(child)
            if entry.created < created:
                siblings.append(entry.score)
    depth = 1 + max((depths[p] for p in parents if p in entries), default=0) if parents else 0
    return Lineage(depth, sorted(scores[g] for g in grand if g in scores), operators, siblings)


def lineage_row(attempt: AttemptInput, pool: Pool) -> list[float]:
    """The attempt's LINEAGE_FEATURES, in that order: each mean a sum in the lineage's
    own order over its count."""
    known = [pool.scores[p] for p in attempt.parent_ids if p in pool.scores]
    depth, grand, operators, siblings = lineage(
        pool, attempt.trajectory_id, attempt.parent_ids, attempt.created
    )
    count = len(operators)
    return [
        sum(known) / len(known) if known else 0.5,
        max(known) if known else 0.5,
        min(known) if known else 0.5,
        1.0 if known else 0.0,
        math.log1p(depth),
        sum(grand) / len(grand) if grand else 0.5,
        1.0 if grand else 0.0,
        math.log1p(len(siblings)),
        sum(siblings) / len(siblings) if siblings else 0.5,
        sum(s >= SUCCESS_THRESHOLD for s in siblings) / len(siblings) if siblings else 0.0,
        *((operators.count(op) / count if count else 0.0) for op in OPERATORS),
    ]
