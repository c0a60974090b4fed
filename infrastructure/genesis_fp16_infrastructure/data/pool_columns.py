"""A read's records as columns: what a run's hot path reads, with no object per record.

A million-record pool read into objects held ~1.1 KB a record and cost seconds to build
on every run, the unchanged files' too (issue 36). ``data.pool_join.collect`` joins the
files' :class:`~genesis_fp16_infrastructure.data.file_records.RecordBlock` into one
:class:`PoolColumns`: the first record of each id, in file order (the pool), its labelled
records (the examples) as row numbers, the repeated strings as codes, the parents as row
numbers. The encoder, the lineage features, the split and the fingerprint read these
arrays; :meth:`PoolColumns.examples` and :meth:`PoolColumns.pool` build the same objects
a record-at-a-time read made, for the code that wants them (prediction, the tests).

Those objects are made many at once, a field at a time (:func:`objects`): a frozen
dataclass's ``__init__`` sets each field through ``object.__setattr__`` in Python;
:func:`objects` makes the empty objects first, then sets one field of all of them with
``map`` over the field's slot setter, which runs in C: the same objects, with the same
field values, at a fraction of the cost. Only for classes whose ``__init__`` does
nothing but set its fields (no ``__post_init__``, no defaults computed)::

    entries = objects(PoolEntry, ("score", "parents"), (scores, parents))
"""

from __future__ import annotations

import operator
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import torch

from genesis_fp16_infrastructure.data.file_records import (
    NO_TEXT,
    TEXT_FIELDS,
    joined_codes,
)
from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.schema import OUTCOMES, AttemptInput, Example, Label, find_ids

_H = TypeVar("_H", bound=Hashable)
_T = TypeVar("_T")
_new = object.__new__


@dataclass(frozen=True, eq=False)
class Coded:
    """A column of repeated values: each record's code into ``values``."""

    codes: np.ndarray  # int64 per record
    values: list[Any]  # distinct, in first-seen order

    @classmethod
    def of(cls, values: Sequence[Any]) -> Coded:
        """``values`` coded, distinct values in first-seen order."""
        return cls(*joined_codes([(np.arange(len(values)), list(values))]))

    def take(self, rows: np.ndarray) -> list[Any]:
        """The values of ``rows``, as objects (each distinct one shared)."""
        return list(map(self.values.__getitem__, self.codes[rows].tolist()))

    def take_as(self, rows: np.ndarray, convert: Callable[[Any], _T]) -> list[_T]:
        """``convert`` of the values of ``rows``, each distinct value converted once: what
        ``map(convert, take(rows))`` says, with no Python call per row (100,000 rows: a
        numpy gather, not 100,000 conversions)."""
        table = np.empty(len(self.values), dtype=object)
        for code, value in enumerate(self.values):  # one by one: a tuple stays one object
            table[code] = convert(value)
        return table[self.codes[rows]].tolist()

    def at(self, rows: np.ndarray | slice) -> Coded:
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

    ids: tuple[str, ...]  # a tuple: a kept pool and each run it is handed to share it
    id_hash: np.ndarray  # int64: data.schema.record_id_hash
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
    text: tuple[list[Any], ...] | None  # TEXT_FIELDS' columns; None: read without text
    labelled: np.ndarray  # int64 rows of the labelled records, in pool order
    success: np.ndarray  # bool per labelled record
    label_score: np.ndarray  # float64 per labelled record, nan where unknown
    label_scored: np.ndarray  # bool: whether it has a score
    outcome: np.ndarray  # int64 index into OUTCOMES, per labelled record
    key: np.ndarray  # int64 per labelled record: data.schema.labelled_hash
    judged: np.ndarray  # uint64 per labelled record: its judged_id's hash (id_digest)

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
        own = self.own[rows]
        if self.text is None:
            text: list[list[Any]] = [[value] * n for value in NO_TEXT]
        else:
            picks = rows.tolist()
            text = [list(map(column.__getitem__, picks)) for column in self.text]
        columns = (
            [self.ids[r] for r in rows.tolist()],
            self.agent.take(rows),
            _or_none(self.created[rows], self.timed[rows]),
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
                _or_none(self.label_score, self.label_scored),
                [OUTCOMES[k] for k in self.outcome.tolist()],
            ),
        )
        return objects(
            Example,
            ("trajectory_id", "attempt", "label"),
            ([self.ids[r] for r in rows.tolist()], self.attempts(rows), labels),
        )

    def pool(self) -> Pool:
        """Every record as the lineage sees it (``data.lineage.Pool``)."""
        everything = np.arange(len(self.ids))
        created = _or_none(self.created, self.timed)
        scores = _or_none(self.score, self.scored)
        entries = objects(
            PoolEntry,
            ("score", "parents", "operator", "created"),
            (scores, self.parent_ids(everything), self.operator.take(everything), created),
        )
        return Pool(dict(zip(self.ids, entries, strict=True)))

    @cached_property
    def example_ids(self) -> tuple[str, ...]:
        """Each labelled record's id, in ``labelled``'s order (a grown pool's: the old
        pool's and the new records', ``data.pool_extend``)."""
        return tuple(map(self.ids.__getitem__, self.labelled.tolist()))

    @cached_property
    def token(self) -> object:
        """An object that stands for this pool (its rows, in order) while it lives: a
        copy (:func:`frozen`, :func:`roomy`) carries the same one, a grown pool has its
        own and notes its old pool's (:data:`GROWN_FROM`). What was worked out of a pool
        and kept beside it (a judged run's listing of its records,
        ``recipes.retrain.scoring``) is known to be of these rows, or of their first."""
        return object()

    @cached_property
    def id_rank(self) -> IdRank | None:
        """The rows' id hashes sorted, with the row of each; None when two rows share a
        hash (a pool matched by string). A sort of every row (100,000: ~8 ms): a grown
        pool takes its old pool's and inserts the new rows (``data.pool_extend``)."""
        return IdRank.of(self.id_hash)


# What a pool works out from its columns once, when first asked (cached properties), and
# a copy or a grown pool takes along rather than working out again over every row;
# GROWN_FROM, a grown pool's note of the pool its first rows are (that pool's token); and
# SPLICED_FROM, a pool's note of the pool whose rows a read laid new ones among (that
# pool's token, and each of its rows' place here: ``data.pool_splice``), taken along by
# a copy (a later read of the same files takes the kept pool whole: the run's training
# and drift read the note there too).
GROWN_FROM = "grown_from"
SPLICED_FROM = "spliced_from"
DERIVED = ("example_ids", "id_rank", "token", GROWN_FROM, SPLICED_FROM)


def derived(columns: PoolColumns) -> dict[str, Any]:
    """What ``columns`` has worked out of :data:`DERIVED` so far, by name."""
    return {name: vars(columns)[name] for name in DERIVED if name in vars(columns)}


def set_derived(columns: PoolColumns, values: dict[str, Any]) -> None:
    """Give ``columns`` values of :data:`DERIVED` worked out elsewhere (a copy's source,
    or a grown pool's old one and its new rows): what the cached property would say."""
    vars(columns).update(values)  # a cached_property reads the instance's __dict__ first


def frozen(columns: PoolColumns) -> PoolColumns:
    """``columns`` made read-only where it is numpy (each array and coded column's codes,
    in place: a write into one raises ``ValueError: assignment destination is read-only``),
    and returned as another :class:`PoolColumns` that shares those arrays and its tuples
    (the ids, the labelled ids: 100,000 records' were list copies, two to four a read,
    each 0.6-2 ms) but holds its own lists (outside ids, coded values), whose copy is a
    pointer each. What the pool worked out (:data:`DERIVED`) goes along. So a kept
    pool and the run it is handed to share the memory of its columns, and neither can
    change the other's:

        kept = frozen(columns)  # columns.score[0] = 1.0 now raises
    """
    freeze(columns)
    columns.token  # noqa: B018 (a copy stands for the same rows: the same token)
    owned = {f.name: _own(getattr(columns, f.name)) for f in fields(columns)}
    text = None if columns.text is None else tuple(map(list, columns.text))  # lists, copied
    out = replace(columns, **{**owned, "text": text})
    # A list copied; a tuple (the labelled ids) or a ranking, which nothing changes, shared.
    worked = derived(columns).items()
    set_derived(out, {name: list(v) if isinstance(v, list) else v for name, v in worked})
    return out


def freeze(columns: PoolColumns) -> None:
    """Make ``columns``' arrays and codes read-only, in place (:func:`frozen`)."""
    for value in (getattr(columns, f.name) for f in fields(columns)):
        for array in _arrays_in(value):
            array.flags.writeable = False


def _arrays_in(value: Any) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    return [value.codes] if isinstance(value, Coded) else []


def _own(value: Any) -> Any:
    """A list copied (its items shared: strings and tuples), a coded column's values too,
    anything else (a tuple, an array) as it is."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, Coded):
        return Coded(value.codes, list(value.values))
    return value


# A grown pool's columns are the first rows of a buffer with room to spare (appended):
# each buffer's filled rows by its id, while it lives. Only a column that ends where its
# buffer's filled rows end may write after them: an older or shorter view of the same
# buffer (a pool grown before) never sees its rows change.
HEADROOM = 8  # a new buffer has room for 1/HEADROOM more rows than it is given
_FILLED: dict[int, int] = {}
_FILLED_LOCK = threading.Lock()  # two reads growing one pool at once: one appends


def appended(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``old``'s rows then ``new``'s, read-only, as ``np.concatenate`` would make them.

    When ``old`` is the filled rows of a buffer this made (a pool's last growth) with room
    for ``new``, ``new`` is written after them (costs what is new); otherwise both go into
    a new buffer with room for 1/``HEADROOM`` more: the whole column copied once in a
    while (a pool growing 1% a run, once every ~12 runs), so the copies cost, spread
    over the growths, a constant per new row."""
    n, k = len(old), len(new)
    dtype = np.result_type(old, new)
    with _FILLED_LOCK:
        buffer = old.base
        if not (
            isinstance(buffer, np.ndarray)
            and _FILLED.get(id(buffer)) == n
            and buffer.dtype == dtype
            and buffer.shape[1:] == old.shape[1:] == new.shape[1:]
            and buffer.strides == old.strides
            and len(buffer) >= n + k
            and old.__array_interface__["data"][0] == buffer.__array_interface__["data"][0]
        ):
            buffer = np.empty((n + k + (n + k) // HEADROOM, *old.shape[1:]), dtype)
            weakref.finalize(buffer, _FILLED.pop, id(buffer), None)
            buffer[:n] = old
        buffer[n : n + k] = new
        _FILLED[id(buffer)] = n + k
    out = buffer[: n + k]
    out.flags.writeable = False
    return out


def roomy(columns: PoolColumns) -> PoolColumns:
    """``columns`` with each array (and coded column's codes) copied into a buffer of
    :func:`appended`'s, with room for 1/``HEADROOM`` more rows: the same values,
    read-only. A pool kept for a later read to grow (``data.record_cache``) is made so
    as it is joined whole: its first growth then writes its new rows after the old
    ones, where a joined pool's columns, sized to their rows, were copied whole (at
    100,000 records, most of a later read's growth, issue 90). What it worked out
    (:data:`DERIVED`) goes along."""

    def room(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return appended(value, value[:0])
        return Coded(room(value.codes), value.values) if isinstance(value, Coded) else value

    out = replace(columns, **{f.name: room(getattr(columns, f.name)) for f in fields(columns)})
    columns.token  # noqa: B018 (the same rows: the same token)
    set_derived(out, derived(columns))
    return out


def column_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over a pool column's memory, for reading only: the column is read-only
    (:func:`frozen`: shared with the kept pool) and torch, which has no read-only tensors,
    would warn of it once a process. Never write into the tensor."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        return torch.from_numpy(array)


def held_bytes(columns: PoolColumns) -> int:
    """The bytes of the buffers under ``columns``' arrays beyond the arrays' own (the
    room :func:`appended` keeps): what an estimate of the arrays alone leaves out."""
    spare = 0
    for value in (getattr(columns, f.name) for f in fields(columns)):
        for array in _arrays_in(value):
            base = array.base
            if isinstance(base, np.ndarray) and id(base) in _FILLED:
                spare += base.nbytes - array.nbytes
    return spare


class IdRank:
    """A pool's id hashes sorted (each once), with the row each came from."""

    def __init__(self, order: np.ndarray, hashes: np.ndarray) -> None:
        order.flags.writeable = hashes.flags.writeable = False  # shared by a pool's copies
        self.order, self.hashes = order, hashes

    def __len__(self) -> int:
        return len(self.order)

    @classmethod
    def of(cls, id_hash: np.ndarray) -> IdRank | None:
        """None when two rows share a hash (a pool matched by string)."""
        # Distinct hashes sort one way whatever the sort: numpy's default, not its stable
        # one (a timsort of 64-bit keys: 34 ms for 100,000, against 2 ms).
        order = np.argsort(id_hash)
        hashes = id_hash[order]
        if len(hashes) > 1 and bool((hashes[1:] == hashes[:-1]).any()):
            return None
        return cls(order, hashes)

    def grown(self, hashes: np.ndarray, first_row: int) -> IdRank:
        """This ranking and ``hashes``, the rows from ``first_row`` on: what :meth:`of`
        says of the grown pool, each new hash sorted and inserted (none of them here,
        none twice: the caller found them so). Costs a sort of the new hashes alone."""
        order = np.argsort(hashes)  # distinct: any sort's order (:meth:`of`)
        added = hashes[order]
        at = np.searchsorted(self.hashes, added)
        return IdRank(
            np.insert(self.order, at, first_row + order), np.insert(self.hashes, at, added)
        )

    def agrees(self, id_hash: np.ndarray) -> bool:
        """Whether this ranking is one of ``id_hash`` (its length, and a sample of 64 rows
        and the sortedness of their hashes): the check before a kept ranking is used."""
        if len(self.order) != len(id_hash):
            return False
        if not len(id_hash):
            return True
        at = np.linspace(0, len(id_hash) - 1, min(64, len(id_hash)), dtype=np.int64)
        sample = self.hashes[at]
        return bool((id_hash[self.order[at]] == sample).all() and (sample[1:] > sample[:-1]).all())

    def find(
        self, hashes: np.ndarray, names: Sequence[str], ids: Sequence[str]
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Each of ``hashes`` (of ``names``) found here: the row of ``ids`` it names and
        whether it is here; the rows None when a hash found names another id."""
        at, found = find_ids(self.hashes, hashes)
        row = self.order[at] if len(self.order) else np.zeros(len(hashes), np.int64)
        hits = np.flatnonzero(found)
        if not same_ids(map(names.__getitem__, hits.tolist()), ids, row[hits]):
            return None, found
        return row, found


def _or_none(values: np.ndarray, present: np.ndarray) -> list[Any]:
    """An optional column as objects: each value where ``present``, else None."""
    return [v if k else None for v, k in zip(values.tolist(), present.tolist(), strict=True)]


_ATTEMPT_FIELDS = (
    "trajectory_id", "agent", "created", "operator", "generation", "parent_ids",
    *TEXT_FIELDS, "tools_used", "reasoning_pattern", "own",
)  # fmt: skip


def same_ids(left: Iterable[str], right: Sequence[str], at: np.ndarray) -> bool:
    """Whether the i-th of ``left`` equals ``right[at[i]]`` for every i (string
    compares: no string is hashed)."""
    return all(map(operator.eq, left, map(right.__getitem__, at.tolist())))


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + counts[i] - 1`` of every i, in order."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
    return offsets + np.arange(total, dtype=np.int64)


def objects(cls: type[_T], fields: Sequence[str], columns: Sequence[Sequence[Any]]) -> list[_T]:
    """One ``cls`` per row of ``columns``: field ``fields[k]`` from ``columns[k]``.

    Every slot of ``cls`` must be named (a slot left unset would raise on reading);
    columns of different lengths raise ValueError."""
    slots = _slots(cls)
    if sorted(fields) != sorted(slots):
        raise TypeError(f"{cls.__name__} has fields {slots}, given {tuple(fields)}")
    n = len(columns[0]) if columns else 0
    if any(len(column) != n for column in columns):
        raise ValueError(f"columns of {cls.__name__} differ in length")
    items = [_new(cls) for _ in range(n)]
    for name, column in zip(fields, columns, strict=True):
        deque(map(getattr(cls, name).__set__, items, column), maxlen=0)
    return items


def _slots(cls: type) -> tuple[str, ...]:
    """``cls``'s slots; TypeError for a class whose ``__init__`` does more than set them
    (a ``__post_init__``), which building by the slots would skip."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it by its __init__")
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names.extend(getattr(klass, "__slots__", ()))
    return tuple(n for n in names if n not in ("__weakref__", "__dict__"))
