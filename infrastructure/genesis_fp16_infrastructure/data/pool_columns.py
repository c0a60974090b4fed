"""A read's records as columns: what a run's hot path reads, with no object per record.

A million-record pool read into objects held ~1.1 KB a record and cost seconds to build
on every run, the unchanged files' too (issue 36). :func:`collect` joins the files'
:class:`~genesis_fp16_infrastructure.data.file_records.RecordBlock` into one
:class:`PoolColumns`: the first record of each id, in file order (the pool), its labelled
records (the examples) as row numbers, the repeated strings as codes, the parents as row
numbers. The encoder, the lineage features, the split and the fingerprint read these
arrays; :meth:`PoolColumns.examples` and :meth:`PoolColumns.pool` build the same objects
a record-at-a-time read made, for the code that wants them (prediction, the tests).

    columns, duplicates = collect(blocks, keep_text=False)
    rows = columns.labelled  # the examples' rows in the pool
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import Any, TypeVar

import numpy as np

from genesis_fp16_infrastructure.data.attempt_numbers import OWN_FEATURES
from genesis_fp16_infrastructure.data.file_records import RecordBlock
from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.schema import OUTCOMES, AttemptInput, Example, Label
from genesis_fp16_infrastructure.data.slot_objects import objects

_H = TypeVar("_H", bound=Hashable)
_TEXT = ("code_changes", "modified_files", "proposed_strategy", "problem_diagnosis")
_NO_TEXT: tuple[Any, ...] = ("", (), "", "")


@dataclass(frozen=True, eq=False)
class Coded:
    """A column of repeated values: each record's code into ``values``."""

    codes: np.ndarray  # int64 per record
    values: list[Any]  # distinct, in first-seen order

    @classmethod
    def of(cls, values: Sequence[Any]) -> Coded:
        """``values`` coded, distinct values in first-seen order."""
        index: dict[Any, int] = {}
        codes = [index.setdefault(v, len(index)) for v in values]
        return cls(np.array(codes, dtype=np.int64).reshape(len(codes)), list(index))

    def take(self, rows: np.ndarray) -> list[Any]:
        """The values of ``rows``, as objects (each distinct one shared)."""
        return list(map(self.values.__getitem__, self.codes[rows].tolist()))

    def at(self, rows: np.ndarray) -> Coded:
        """The column of ``rows`` alone, its values shared."""
        return Coded(self.codes[rows], self.values)

    def counts(self) -> list[tuple[Any, int]]:
        """Each value that occurs, with how many times, in first-seen order of the values."""
        times = np.bincount(self.codes, minlength=len(self.values)).tolist()
        return [(v, k) for v, k in zip(self.values, times, strict=True) if k]


@dataclass(frozen=True, eq=False)
class PoolColumns:
    """Every valid record of a read (the first of each id, in file order) as arrays.

    Row ``r`` is the pool's ``r``-th record. A parent is a row, or ``len(ids) + k`` for
    ``outside[k]``: an id no record of the pool has (numbered in the order first named,
    as ``world_model.lineage_columns`` numbers them). The label columns are the labelled
    records', in ``labelled``'s order: the read's examples."""

    ids: list[str]
    id_hash: np.ndarray  # int64: data.record_key.record_id_hash
    score: np.ndarray  # float64, nan where unknown (scored False)
    scored: np.ndarray  # bool
    created: np.ndarray  # float64, nan where unknown (timed False)
    timed: np.ndarray  # bool
    generation: np.ndarray  # int64
    agent: Coded
    operator: Coded
    tools: Coded  # tool lists (tuples), each distinct list once
    pattern: Coded
    parent_start: np.ndarray  # int64, len(ids) + 1: row r's parents are
    parent: np.ndarray  # parent[parent_start[r]:parent_start[r + 1]], in the record's order
    outside: list[str]
    own: np.ndarray  # (len(ids), len(OWN_FEATURES)) float64: AttemptInput.own, unpacked
    text: tuple[list[Any], ...] | None  # _TEXT's columns; None: read without text
    labelled: np.ndarray  # int64 rows of the labelled records, in pool order
    success: np.ndarray  # bool per labelled record
    label_score: np.ndarray  # float64 per labelled record, nan where unknown
    label_scored: np.ndarray  # bool: whether it has a score
    outcome: np.ndarray  # int64 index into OUTCOMES, per labelled record
    key: np.ndarray  # int64 per labelled record: data.record_key.record_hash

    def __len__(self) -> int:
        return len(self.ids)

    def parent_ids(self, rows: np.ndarray) -> list[tuple[str, ...]]:
        """Each row's parents by id, each id the pool's own object."""
        names = [*self.ids, *self.outside]
        starts = self.parent_start[rows].tolist()
        ends = self.parent_start[rows + 1].tolist()
        parent = self.parent.tolist()
        return [
            tuple(map(names.__getitem__, parent[s:e])) for s, e in zip(starts, ends, strict=True)
        ]

    def attempts(self, rows: np.ndarray) -> list[AttemptInput]:
        """The rows' ``AttemptInput`` objects, as a read made them."""
        n = len(rows)
        created = self.created[rows].tolist()
        timed = self.timed[rows].tolist()
        own = self.own[rows]
        if self.text is None:
            text: list[list[Any]] = [[value] * n for value in _NO_TEXT]
        else:
            picks = rows.tolist()
            text = [list(map(column.__getitem__, picks)) for column in self.text]
        columns = (
            [self.ids[r] for r in rows.tolist()],
            self.agent.take(rows),
            [c if t else None for c, t in zip(created, timed, strict=True)],
            self.operator.take(rows),
            self.generation[rows].tolist(),
            self.parent_ids(rows),
            *text,
            self.tools.take(rows),
            self.pattern.take(rows),
            [own[i].tobytes() for i in range(n)],
        )
        return objects(AttemptInput, _ATTEMPT_FIELDS, columns)

    def examples(self) -> list[Example]:
        """The labelled records as ``Example`` objects, in pool order."""
        rows = self.labelled
        labels = objects(
            Label,
            ("success", "score", "outcome"),
            (
                self.success.tolist(),
                [
                    s if k else None
                    for s, k in zip(
                        self.label_score.tolist(), self.label_scored.tolist(), strict=True
                    )
                ],
                [OUTCOMES[k] for k in self.outcome.tolist()],
            ),
        )
        return objects(
            Example,
            ("trajectory_id", "attempt", "label", "key", "id_key"),
            (
                [self.ids[r] for r in rows.tolist()],
                self.attempts(rows),
                labels,
                self.key.tolist(),
                self.id_hash[rows].tolist(),
            ),
        )

    def pool(self) -> Pool:
        """Every record as the lineage sees it (``data.lineage.Pool``)."""
        everything = np.arange(len(self.ids))
        created = [
            c if t else None
            for c, t in zip(self.created.tolist(), self.timed.tolist(), strict=True)
        ]
        scores = [
            s if k else None for s, k in zip(self.score.tolist(), self.scored.tolist(), strict=True)
        ]
        entries = objects(
            PoolEntry,
            ("score", "parents", "operator", "created"),
            (scores, self.parent_ids(everything), self.operator.take(everything), created),
        )
        known = {i: s for i, s in zip(self.ids, scores, strict=True) if s is not None}
        return Pool.adopt(dict(zip(self.ids, entries, strict=True)), known)

    @cached_property
    def example_ids(self) -> list[str]:
        return [self.ids[r] for r in self.labelled.tolist()]


_ATTEMPT_FIELDS = (
    "trajectory_id", "agent", "created", "operator", "generation", "parent_ids",
    *_TEXT, "tools_used", "reasoning_pattern", "own",
)  # fmt: skip


def collect(blocks: Sequence[RecordBlock], keep_text: bool) -> tuple[PoolColumns, int]:
    """The pool of ``blocks`` (files in read order) and how many records it left out as
    duplicates (a later record of an id already read). ``keep_text=False``: the change's
    text and files are not kept."""
    raw_ids = list(chain.from_iterable(b.trajectory_id for b in blocks))
    total = len(raw_ids)
    first: dict[str, int] = {}
    deque(map(first.setdefault, raw_ids, range(total)), maxlen=0)  # first of each id wins
    n = len(first)
    rows = np.fromiter(first.values(), np.int64, n)
    every = n == total

    def take(values: np.ndarray) -> np.ndarray:
        return values if every else values[rows]

    def take_list(values: list[Any]) -> list[Any]:
        return values if every else list(map(values.__getitem__, rows.tolist()))

    def joined(name: str) -> list[Any]:
        return list(chain.from_iterable(getattr(b, name) for b in blocks))

    def int64s(name: str) -> np.ndarray:
        return take(
            np.frombuffer(b"".join(getattr(b, name) for b in blocks), "<i8").astype(np.int64)
        )

    score_list = take_list(joined("score"))
    created_list = take_list(joined("created"))
    success = take_list(joined("success"))
    is_labelled = np.fromiter((s is not None for s in success), np.bool_, n)
    labelled = np.flatnonzero(is_labelled)
    score_known = [s is not None for s in score_list]
    label_scores = list(map(take_list(joined("label_score")).__getitem__, labelled.tolist()))
    own = np.frombuffer(bytearray().join(b.own for b in blocks), np.float64)
    columns = PoolColumns(
        ids=list(first),
        id_hash=int64s("id_key"),
        score=np.array(score_list, dtype=np.float64).reshape(n),
        scored=np.array(score_known, dtype=np.bool_).reshape(n),
        created=np.array(created_list, dtype=np.float64).reshape(n),
        timed=np.fromiter((c is not None for c in created_list), np.bool_, n),
        generation=np.array(take_list(joined("generation")), dtype=np.int64).reshape(n),
        agent=_coded(blocks, 0, take),
        operator=_coded(blocks, 1, take),
        tools=_coded(blocks, 2, take),
        pattern=_coded(blocks, 3, take),
        **_parents(blocks, first, rows, n, every),
        own=take(own.reshape(total, len(OWN_FEATURES))),
        text=tuple(take_list(joined(name)) for name in _TEXT) if keep_text else None,
        labelled=labelled,
        success=np.array([success[r] for r in labelled.tolist()], dtype=np.bool_).reshape(-1),
        label_score=np.array(label_scores, dtype=np.float64).reshape(len(labelled)),
        label_scored=np.array([s is not None for s in label_scores], np.bool_).reshape(-1),
        outcome=take(np.frombuffer(b"".join(b.outcome for b in blocks), np.int8).astype(np.int64))[
            labelled
        ],
        key=int64s("key")[labelled],
    )
    return columns, total - n


def _coded(blocks: Sequence[RecordBlock], which: int, take: Any) -> Coded:
    """One coded column of every block, with codes into one list of distinct values."""
    index: dict[Any, int] = {}
    parts = []
    for block in blocks:
        codes, values = block.coded()[which]
        remap = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
        parts.append(remap[codes] if len(values) else codes.astype(np.int64))
    codes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return Coded(take(codes), list(index))


def _parents(
    blocks: Sequence[RecordBlock], first: dict[str, int], rows: np.ndarray, n: int, every: bool
) -> dict[str, Any]:
    """The kept records' parents as rows (``PoolColumns.parent``), their starts, and the
    ids named outside the pool."""
    names = list(chain.from_iterable(b.parent_ids for b in blocks))
    counts = np.concatenate([b.parent_count_array() for b in blocks] or [np.zeros(0, "<i4")])
    counts = counts.astype(np.int64)
    if not every:
        starts = np.cumsum(counts) - counts
        picked = ranges(starts[rows], counts[rows]).tolist()
        names = list(map(names.__getitem__, picked))
        counts = counts[rows]
    position = np.full(len(first) if every else int(rows.max(initial=-1)) + 1, -1, np.int64)
    position[rows] = np.arange(n)  # a raw record's row in the pool (first of its id)
    raw = list(map(first.get, names, [-1] * len(names)))
    outside: dict[str, int] = {}
    found = np.array(raw, dtype=np.int64).reshape(len(names))
    parent = np.where(found >= 0, position[np.maximum(found, 0)], -1)
    if (parent < 0).any():
        for k in np.flatnonzero(parent < 0).tolist():
            parent[k] = n + outside.setdefault(names[k], len(outside))
    start = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    return {"parent_start": start, "parent": parent, "outside": list(outside)}


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + counts[i] - 1`` of every i, in order."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
    return offsets + np.arange(total, dtype=np.int64)
