"""The drift report's reference, measured once in a resident process and grown by what is
new (issue 90 item 3).

The reference is the labelled records the served model trained on that the pool still
holds; past ``DRIFT_SAMPLE`` of them, a sample. What the report needs of it is each
numeric feature's values in order (its deciles and its bins' shares), each categorical
feature's count of every code, and the sampled records' numbers (what the noise draws
are drawn from): :class:`Reference`.

**A sample that grows.** A record is in the sample by its record hash alone: at level
``j`` (the smallest with ``records / 2**j <= DRIFT_SAMPLE``: the whole reference at level
0), when the top ``j`` bits of its hash mixed by splitmix64's finaliser are 0. So the
sample of a grown reference is the old one's and the new records' in it, whatever the
sizes, until the reference doubles past the sample's size (a new level: sampled again,
once per doubling); each record is in it or not with the same odds, whatever its numbers.

**Sorted values that grow.** Each feature's values are kept in order as a sorted base
and a few sorted values added since (:class:`SortedValues`): a decile is the value at
its rank in both (a binary search of the added ones in the base), a bin's count the
values at most its bound in both. The added values are sorted again as they grow and
merged into the base (one sort) once they pass 1/``GROWTH`` of it: spread over the
growths, a constant per new value. The same deciles and shares, bit for bit, as of one
sort of every value.

**Kept and checked.** In a resident process (``keep_in_memory_bytes``:
:mod:`~genesis_fp16_infrastructure.kept_in_memory`) the reference of the pool's first
labelled records (the served model's, when they are its first: ``new_records.new_at_end``)
is kept from one run to the next with what it was made of, and checked against it before
use: the record hashes of those records (every one compared), the categorical values
their codes name (the pool's values must begin with them), and the sampled records'
numbers as this run gives them (every value compared: a record's lineage numbers move
when the pool around it does). Where this run's rows are the kept numeric rows with their
stamps (``KeptNumeric.stamps_of``: the view the encode was handed, nothing written into
it) and the kept sample has the stamps its numbers were taken under, the sampled records'
stamps are compared instead, every one: a row worked out again gets a new stamp, so
equal stamps are the same numbers; 8 bytes a record read, not a row's 232 (at 100,000
records the numbers' gather was 2.5 ms of the report). Then only the records past them
are sampled, measured and added; a check that fails (a relabel, an edit, a removal, a
number moved, a stamp changed, another level) measures the reference again (:data:`KEPT`
counts what became of each: "measured" with nothing kept, "taken", "grown", "stale"), and
the report is the same either way, bit for bit: the same records, the same values.

**Laid among, not only after.** A new data file sorting among the old ones lays its
records among the kept pool's (``data.pool_splice``: the read notes the pool it laid
them in, ``SPLICED_FROM``, and where that pool's records now lie). The reference kept of
that pool is followed there: its records' places in this pool are worked out from the
note, and everything is checked at those places as above (every hash; the categorical
values, each kept code's value found among this pool's, its counts moved to that code;
the sampled numbers or their stamps). The records wanted that it does not hold are
sampled and added, laid in order among the kept ones, so the reference is the one a
measurement of the same records gives, bit for bit.

>>> ref = prefix_reference(columns, numeric, records, level, tables, budget)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import (
    GROWN_FROM,
    SPLICED_FROM,
    PoolColumns,
    appended,
)
from genesis_fp16_infrastructure.data.pool_splice import labelled_places
from genesis_fp16_infrastructure.kept_in_memory import process_memory
from genesis_fp16_infrastructure.recipes.retrain.drift_categories import Categorical
from genesis_fp16_infrastructure.recipes.retrain.new_records import mixed
from genesis_fp16_infrastructure.world_model.features import NUMERIC_FEATURES, numeric_rows

KIND = ("drift: the pool's reference",)  # the store's key (and identity)
GROWTH = 8  # the values added to a sorted base: merged into it past 1/GROWTH of its size
CHECK_ROWS = 2048  # sampled records' numbers gathered and compared at a time (in cache:
# 50,000 of 29 float32 numbers 0.8 ms of CPU against 1.1 at 8192, float64 1.5 against 2.4)
TRANSPOSE_ROWS = 1024  # the records a block of a transposed copy holds
# What became of each run's reference (this process's): "measured" (nothing kept, or a
# budget of 0), "taken" (kept, checked, nothing to add), "grown" (kept, checked, the
# records past it added), "stale" (kept of other records or numbers: measured again).
KEPT: Counter[str] = Counter()
logger = logging.getLogger(__name__)


def sample_level(records: int, sample: int) -> int:
    """The sample's level of a reference of ``records``: the smallest ``j`` with
    ``records / 2**j`` at most ``sample`` (the sample holds about that many).

    >>> sample_level(9_000, 50_000), sample_level(99_000, 50_000), sample_level(990_000, 50_000)
    (0, 1, 5)
    """
    level = 0
    while records > sample << level:
        level += 1
    return level


def in_sample(keys: np.ndarray, level: int) -> np.ndarray:
    """Which records of ``keys`` (record hashes) a sample of ``level`` holds: every one at
    level 0, else those whose mixed hash's top ``level`` bits are 0."""
    if level == 0:
        return np.ones(len(keys), dtype=np.bool_)
    return (mixed(keys) >> np.uint64(64 - level)) == 0


class SortedValues(NamedTuple):
    """Each feature's values in order (feature x value, each row ascending): a sorted
    ``base`` and the values ``added`` since, sorted (at most 1/``GROWTH`` of the base)."""

    base: np.ndarray
    added: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> SortedValues:
        """``values`` (feature x record) sorted: one numpy sort of each row."""
        return cls(np.sort(values, axis=1), values[:, :0].copy())

    @property
    def records(self) -> int:
        return self.base.shape[1] + self.added.shape[1]

    def grown(self, values: np.ndarray) -> SortedValues:
        """These and ``values`` (feature x record, of the same type): the added ones
        sorted again with them, or, past 1/``GROWTH`` of the base, merged into it."""
        if not values.shape[1]:
            return self
        added = np.sort(np.concatenate([self.added, values], axis=1), axis=1)
        if added.shape[1] * GROWTH <= self.base.shape[1]:
            return SortedValues(self.base, added)
        return SortedValues.of(np.concatenate([self.base, added], axis=1))

    def at(self, ranks: np.ndarray) -> np.ndarray:
        """Each feature's values at ``ranks`` (int64) of all its values in order: feature
        x rank. An added value's rank is its own index plus the base values at most it:
        a rank that is one is that added value; any other, the base value past the added
        ones before it. Ties are equal values: the same values as of one sort."""
        base, added = self.base, self.added
        if not added.shape[1]:
            return base[:, ranks]
        out = np.empty((len(base), len(ranks)), dtype=base.dtype)
        b, last = added.shape[1], base.shape[1] - 1
        own = np.arange(b)
        for feature, (row, more) in enumerate(zip(base, added, strict=True)):
            placed = np.searchsorted(row, more, "right") + own
            before = np.searchsorted(placed, ranks, "left")  # added values ranked below
            k = np.minimum(before, b - 1)
            out[feature] = np.where(
                placed[k] == ranks, more[k], row[np.clip(ranks - before, 0, last)]
            )
        return out

    def at_most(self, feature: int, bounds: np.ndarray) -> np.ndarray:
        """How many of ``feature``'s values are at most each of ``bounds`` (ascending,
        of the values' type)."""
        count = np.searchsorted(self.base[feature], bounds, "right")
        if self.added.shape[1]:
            count = count + np.searchsorted(self.added[feature], bounds, "right")
        return count


class Reference(NamedTuple):
    """A reference measured: its sampled records (``rows``: labelled indices, ascending),
    their numbers (record x feature, as the run gave them), each feature's values in
    order, and each categorical feature's count of every code (int64)."""

    rows: np.ndarray
    numbers: np.ndarray
    ordered: SortedValues
    per_code: dict[str, np.ndarray]


class _Kept(NamedTuple):
    """The reference of ``records`` labelled records at ``level`` (the pool's first, or
    those at ``at``), as a resident process keeps it, with what it was made of: those
    records' hashes and the categorical values their codes name."""

    records: int
    level: int
    keys: np.ndarray
    values: dict[str, list[Any]]
    reference: Reference
    # The sampled records' stamps as their numbers were taken (KeptNumeric.stamps_of),
    # one per ``reference.rows``; None when the run had none (checked by value then).
    stamps: np.ndarray | None = None
    # The records' labelled places (ascending; None: the first ``records``), their pool
    # rows and that pool's token: what a later pool's note (SPLICED_FROM) is followed by.
    at: np.ndarray | None = None
    rows: np.ndarray | None = None
    token: object = None


def measured(
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    rows: np.ndarray,
    tables: dict[str, Categorical],
) -> Reference:
    """The reference of the labelled records ``rows`` (sampled already), measured: their
    numbers (a NaN refused), sorted, and their codes counted. The rows and numbers are
    put where a growth writes after them (``pool_columns.appended``'s room)."""
    numbers = numbers_of(columns, numeric, rows)
    ordered = SortedValues.of(feature_major(numbers))
    counted = _counted(columns, rows, tables)
    return Reference(appended(rows, rows[:0]), appended(numbers, numbers[:0]), ordered, counted)


def prefix_reference(
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    records: int,
    level: int,
    tables: dict[str, Categorical],
    budget: int | None,
    stamp: np.ndarray | None = None,
    at: np.ndarray | None = None,
) -> Reference:
    """The reference of the pool's first ``records`` labelled records (or, given ``at``,
    of the labelled records there, ascending: a pool whose new records were laid among
    the old), sampled at ``level``: the one kept, checked and grown by the records it
    lacks, else measured; kept for the next run (module docstring). ``stamp``: the
    stamps of ``numeric``'s rows (``KeptNumeric.stamps_of``), or None."""
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get(KIND, KIND, given=False)
    out = None
    if isinstance(kept, _Kept):
        out = _grown(kept, columns, numeric, records, level, tables, stamp, at)
    wanted = np.arange(records) if at is None else at
    if out is None:
        if isinstance(kept, _Kept):
            KEPT["stale"] += 1
            logger.info(
                "drift: the kept reference of %s records is not of this pool's %s "
                "(records changed, numbers moved, or another sample): measured again",
                f"{kept.records:,}",
                f"{records:,}",
            )
        else:
            KEPT["measured"] += 1
        rows = wanted[in_sample(columns.key[wanted], level)]
        out = measured(columns, numeric, rows, tables)
        keys = columns.key[wanted].copy()
    else:
        assert isinstance(kept, _Kept)
        if _at_end(kept, columns, at):
            keys = appended(kept.keys, columns.key[kept.records : records])
        else:
            keys = columns.key[wanted]
        memory.note_given(f"drift reference of {len(out.rows):,} records")  # type: ignore[union-attr]
    if memory is not None:
        values = {name: list(v) for name, v in _values(columns).items()}
        stamps = _stamps_of(stamp, numeric, out.rows)
        sorted_bytes = out.ordered.base.nbytes + out.ordered.added.nbytes
        size = keys.nbytes + out.rows.nbytes + out.numbers.nbytes + sorted_bytes
        size += 0 if stamps is None else stamps.nbytes
        rows = columns.labelled[:records] if at is None else columns.labelled[at]
        size += 0 if at is None else at.nbytes + rows.nbytes
        what = f"drift reference of {len(out.rows):,} records"
        made = _Kept(records, level, keys, values, out, stamps, at, rows, columns.token)
        memory.put(KIND, KIND, made, size, what)
    return out


def _stamps_of(
    stamp: np.ndarray | None, numeric: torch.Tensor | None, rows: np.ndarray
) -> np.ndarray | None:
    """The stamps of the labelled records ``rows`` (ascending), when ``stamp`` is one per
    row of ``numeric``; None otherwise (the next check is by value)."""
    if stamp is None or numeric is None or len(stamp) != len(numeric):
        return None
    if len(rows) and int(rows[-1]) >= len(stamp):
        return None
    return np.take(stamp, rows)


def _grown(
    kept: _Kept,
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    records: int,
    level: int,
    tables: dict[str, Categorical],
    stamp: np.ndarray | None,
    at: np.ndarray | None = None,
) -> Reference | None:
    """``kept`` grown to the reference :func:`prefix_reference` is asked for, when its
    records are among them as they are now (every hash, value and sampled number, or
    sampled number's stamp, compared); None otherwise."""
    if kept.level != level or records > len(columns.key):
        return None
    if _at_end(kept, columns, at):
        return _grown_at_end(kept, columns, numeric, records, tables, stamp)
    covered = _places_now(kept, columns)
    if covered is None or not np.array_equal(columns.key[covered], kept.keys):
        return None
    wanted = np.zeros(len(columns.key), np.bool_)
    wanted[np.arange(records) if at is None else at] = True
    if not wanted[covered].all():
        return None
    wanted[covered] = False
    old = kept.reference
    per_code = _recoded(kept, columns, tables)
    if per_code is None:
        return None
    # The sampled records' places now: each kept record's, by its place among them
    rows = covered[old.rows if kept.at is None else np.searchsorted(kept.at, old.rows)]
    if not _same_sample(kept, columns, numeric, stamp, rows):
        return None
    added = np.flatnonzero(wanted)
    add = added[in_sample(columns.key[added], level)]
    return _with_added(old, rows, per_code, columns, numeric, tables, add)


def _grown_at_end(
    kept: _Kept,
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    records: int,
    tables: dict[str, Categorical],
    stamp: np.ndarray | None,
) -> Reference | None:
    """``kept`` (of a pool's first records) grown to the pool's first ``records``, when
    it is of their first ``kept.records`` as they are now; None otherwise."""
    old, first = kept.reference, kept.records
    if first > records:
        return None
    if not np.array_equal(kept.keys, columns.key[:first]):
        return None
    now = _values(columns)
    if any(now[name][: len(v)] != v for name, v in kept.values.items()):
        return None
    if not _same_sample(kept, columns, numeric, stamp, old.rows):
        return None
    add = first + np.flatnonzero(in_sample(columns.key[first:records], kept.level))
    per_code = {name: _padded(c, tables[name].width) for name, c in old.per_code.items()}
    return _with_added(old, old.rows, per_code, columns, numeric, tables, add)


def _with_added(
    old: Reference,
    rows: np.ndarray,
    per_code: dict[str, np.ndarray],
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    tables: dict[str, Categorical],
    add: np.ndarray,
) -> Reference:
    """``old`` (its sampled records at the labelled places ``rows`` now, its counts
    ``per_code`` by this pool's codes) with the sampled records ``add`` (ascending) taken
    in: after the kept ones where they all come after (written into their room), else
    laid among them in order."""
    if not len(add):
        KEPT["taken"] += 1
        return old._replace(rows=rows, per_code=per_code)
    KEPT["grown"] += 1
    numbers = numbers_of(columns, numeric, add)  # a NaN among them refused
    for name, counts in _counted(columns, add, tables).items():
        per_code[name] = per_code[name] + counts
    ordered = old.ordered.grown(feature_major(numbers))
    if not len(rows) or rows[-1] < add[0]:
        return Reference(appended(rows, add), appended(old.numbers, numbers), ordered, per_code)
    before = np.searchsorted(rows, add)
    rows = np.insert(rows, before, add)
    return Reference(rows, np.insert(old.numbers, before, numbers, axis=0), ordered, per_code)


def _same_sample(
    kept: _Kept,
    columns: PoolColumns,
    numeric: torch.Tensor | None,
    stamp: np.ndarray | None,
    rows: np.ndarray,
) -> bool:
    """Whether the kept sample's numbers are those of the labelled records ``rows`` now:
    their stamps compared where both sides have them, else their numbers."""
    stamps = _stamps_of(stamp, numeric, rows)
    if kept.stamps is not None and stamps is not None:
        return bool(np.array_equal(stamps, kept.stamps))  # a row worked out again: other
    return _same_numbers(columns, numeric, rows, kept.reference.numbers)


def _at_end(kept: _Kept, columns: PoolColumns, at: np.ndarray | None) -> bool:
    """Whether ``kept`` and the reference asked for are both of a pool's first records,
    and the pool did not lay new records among the kept one's."""
    return at is None and kept.at is None and kept.token is not _spliced_from(columns)


def _spliced_from(columns: PoolColumns) -> object:
    """The token of the pool ``columns`` laid new records among, if it did."""
    note = vars(columns).get(SPLICED_FROM)
    return None if note is None else note[0]


def _places_now(kept: _Kept, columns: PoolColumns) -> np.ndarray | None:
    """The labelled places, in ``columns``, of the kept reference's records (ascending):
    where they were, in the pool it was kept of or one grown at its end from it; where
    the read laid them (``SPLICED_FROM``), in a pool that laid new records among them;
    the first ``kept.records`` of any other; None where its pool's rows are unknown."""
    same = kept.token is not None and (
        kept.token is columns.token or kept.token is vars(columns).get(GROWN_FROM)
    )
    if same or (kept.token is not _spliced_from(columns) and kept.at is None):
        places = np.arange(kept.records) if kept.at is None else kept.at
        return places if not len(places) or places[-1] < len(columns.labelled) else None
    if kept.rows is None or kept.token is not _spliced_from(columns):
        return None
    return labelled_places(columns, vars(columns)[SPLICED_FROM][1], kept.rows)


def _recoded(
    kept: _Kept, columns: PoolColumns, tables: dict[str, Categorical]
) -> dict[str, np.ndarray] | None:
    """The kept counts of each categorical feature by this pool's codes: as they are
    where the pool's values begin with the kept ones, else each kept code's count moved
    to its value's code now; None when a counted value is not among this pool's."""
    now = _values(columns)
    out = {}
    for name, counts in kept.reference.per_code.items():
        values, width = kept.values[name], tables[name].width
        if now[name][: len(values)] == values:
            out[name] = _padded(counts, width)
            continue
        place = {value: k for k, value in enumerate(now[name])}
        code = np.array([place.get(v, -1) for v in values[: len(counts)]], dtype=np.int64)
        if (code[counts[: len(code)] > 0] < 0).any():
            return None
        out[name] = np.zeros(width, dtype=counts.dtype)
        np.add.at(out[name], code[code >= 0], counts[: len(code)][code >= 0])
    return out


def _same_numbers(
    columns: PoolColumns, numeric: torch.Tensor | None, rows: np.ndarray, kept: np.ndarray
) -> bool:
    """Whether the labelled records ``rows``' numbers are ``kept``, value for value, in
    their type (a NaN equals nothing): a slice's compared whole, else gathered and
    compared ``CHECK_ROWS`` records at a time (no fresh array of the sample's size)."""
    if numeric is None:
        given = numeric_rows(columns, columns.labelled[rows]).numpy()
        return given.dtype == kept.dtype and np.array_equal(given, kept)
    values = numeric.numpy()
    if values.dtype != kept.dtype or values.shape[1:] != kept.shape[1:]:
        return False
    if not len(rows):
        return True
    if int(rows[-1]) >= len(values):
        return False
    if int(rows[-1]) - int(rows[0]) + 1 == len(rows):  # ascending and distinct: a slice
        return np.array_equal(values[int(rows[0]) : int(rows[-1]) + 1], kept)
    return all(
        np.array_equal(
            np.take(values, rows[start : start + CHECK_ROWS], axis=0),
            kept[start : start + CHECK_ROWS],
        )
        for start in range(0, len(rows), CHECK_ROWS)
    )


def numbers_of(columns: PoolColumns, numeric: torch.Tensor | None, rows: np.ndarray) -> np.ndarray:
    """The numeric features of the labelled records ``rows`` (record x feature): of
    ``numeric`` when the caller has them, else built for these rows alone. A NaN is
    refused: the features never hold one, and it would make its feature's deciles NaN
    and its distance a silent 0."""
    if numeric is None:
        out = numeric_rows(columns, columns.labelled[rows]).numpy()
    else:
        out = np.take(numeric.numpy(), rows, axis=0)
    refuse_nan(out)
    return out


def refuse_nan(numbers: np.ndarray) -> None:
    """A ValueError naming the first feature of ``numbers`` (record x feature) with a
    NaN. Looked for first by numpy in memory order (0.8 ms at 50,000 records)."""
    if not np.isnan(numbers).any():
        return
    nans = np.isnan(numbers).sum(0)
    name, count = next((n, int(k)) for n, k in zip(NUMERIC_FEATURES, nans, strict=True) if k)
    raise ValueError(
        f"drift: numeric feature {name!r} has {count} NaN value(s) among "
        f"{numbers.shape[0]} records (the features are never NaN: the numbers are wrong)"
    )


def feature_major(numbers: np.ndarray) -> np.ndarray:
    """``numbers`` (record x feature) as float32 (float64 when given so), feature x
    record, contiguous: copied a block of ``TRANSPOSE_ROWS`` records at a time, each
    block's rows and columns in cache (50,000 records' 29 numbers: about 1 ms of CPU,
    torch's ``.T.contiguous()`` 2 and numpy's whole transposed copy 5). Not widened:
    float32 is measured exactly (``drift._at_most``)."""
    wide = numbers.dtype == np.float64 or numbers.dtype.kind != "f"
    out = np.empty(numbers.shape[::-1], dtype=np.float64 if wide else np.float32)
    for start in range(0, len(numbers), TRANSPOSE_ROWS):
        out[:, start : start + TRANSPOSE_ROWS] = numbers[start : start + TRANSPOSE_ROWS].T
    return out


def _values(columns: PoolColumns) -> dict[str, list[Any]]:
    """Each categorical feature's values, by the names ``drift_categories.tables`` gives."""
    return {
        "agent": columns.agent.values,
        "operator": columns.operator.values,
        "reasoning_pattern": columns.pattern.values,
        "tool": columns.tools.values,
    }


def _counted(
    columns: PoolColumns, rows: np.ndarray, tables: dict[str, Categorical]
) -> dict[str, np.ndarray]:
    """Each categorical feature's count of every code among the labelled records ``rows``."""
    at = np.take(columns.labelled, rows)
    return {
        name: np.bincount(np.take(t.codes, at), minlength=t.width) for name, t in tables.items()
    }


def _padded(counts: np.ndarray, width: int) -> np.ndarray:
    """``counts`` with a 0 for each code past them (values first seen since)."""
    if len(counts) >= width:
        return counts
    return np.concatenate([counts, np.zeros(width - len(counts), dtype=counts.dtype)])
