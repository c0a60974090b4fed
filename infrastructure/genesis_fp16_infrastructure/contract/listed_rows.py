"""Records taken as rows of a checked listing (``RecordLosses.of_rows``): what such a
record keeps instead of its ids and segments (:class:`ListedRows`, marked so by
:func:`keep_listed`), and when it may still be believed (:func:`still_listed`); and
:func:`at_rows`, values at rows.

A record made of rows of a listing that passed its own check whole (``RecordIds``: each
id a distinct exact ``str``) keeps the listing's own tuples and its rows, an array over
bytes of its own: its ids are those at the rows, taken only when read. The judged run
pairs such records by their rows (the served model's scoring and the candidate's ask by
rows of the same listing): ~20,000 ids each at 100,000 records, never taken.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

T = TypeVar("T")
CHECKED = "_checked"  # a record's fields as its check passed them (judging._copy_and_check)
LISTED = "_listed"  # a record's rows of a checked listing (ListedRows)
TAKEN = "_taken"  # the ids and segments taken of those rows when read


class ListedRows(NamedTuple):
    """The rows ``at`` of a checked listing: its ids and segments, the very tuples its
    check passed (tuples of exact strs: nothing can change one), and the rows, ascending,
    an array over bytes of its own (``split._unchangeable``)."""

    ids: tuple[str, ...]
    segments: tuple[str, ...] | None
    at: np.ndarray


def rows_within(rows: np.ndarray, count: int) -> bool:
    """Whether ``rows`` are integers, one dimension, ascending, each in ``[0, count)``.

    >>> rows_within(np.array([0, 2]), 3), rows_within(np.array([2, 2]), 3)
    (True, False)
    """
    if rows.ndim != 1 or rows.dtype.kind not in "iu":
        return False
    inside = not len(rows) or (int(rows[0]) >= 0 and int(rows[-1]) < count)
    return inside and bool((rows[1:] > rows[:-1]).all())


def listed_rows(listing: Any, rows: np.ndarray) -> bool:
    """Whether ``listing`` (a ``RecordIds``) passed its own check whole and holds the
    very fields it passed (its ids distinct exact non-empty strings, its segments exact
    strings), and ``rows`` are ascending within it: then its ids and segments at
    ``rows`` are so too (``RecordLosses.of_rows``)."""
    checked, fields = vars(listing).get(CHECKED), (listing.ids, listing.segments)
    if not isinstance(checked, tuple) or len(checked) != len(fields):
        return False
    return all(map(operator.is_, fields, checked)) and rows_within(rows, len(listing.ids))


def still_listed(
    fields: dict[str, Any], losses: Mapping[str, Sequence[float]]
) -> ListedRows | None:
    """The rows of a listing a record (``fields``: its ``vars``; ``losses``: its columns)
    was made of, where it holds them as it was made: its ids and segments not set since
    (none, or those taken of the rows: a record whose fields were set behind its back is
    checked in full), its rows an unchangeable array ascending within the listing's ids,
    and its columns the very tuples its check passed, as many values as rows each. None:
    any other (a planted or changed record is never believed)."""
    listed, checked = fields.get(LISTED), fields.get(CHECKED)
    if not isinstance(listed, ListedRows) or not isinstance(checked, tuple):
        return None
    taken = fields.get(TAKEN, {})
    if any(name in fields and fields[name] is not taken.get(name) for name in ("ids", "segments")):
        return None
    columns = tuple(itertools.chain.from_iterable(losses.items()))
    if len(columns) != len(checked) or not all(map(operator.is_, columns, checked)):
        return None
    at = listed.at
    if not isinstance(at, np.ndarray) or at.dtype != np.int64 or at.flags.writeable:
        return None
    if not all(len(values) == len(at) for values in losses.values()):
        return None
    return listed if rows_within(at, len(listed.ids)) else None


def keep_listed(
    fields: dict[str, Any], listed: ListedRows, losses: Mapping[str, Sequence[float]]
) -> None:
    """Mark a record made of ``listed`` (``fields``: its ``vars``; ``losses``: its columns,
    checked) as :func:`still_listed` asks it again: the rows, and its columns' very tuples
    as checked."""
    fields.update({LISTED: listed, CHECKED: tuple(itertools.chain.from_iterable(losses.items()))})


def at_rows(values: Sequence[T], rows: Sequence[int]) -> tuple[T, ...]:
    """``values`` at ``rows``, in order: in C's loop, an ``itemgetter`` (about half a
    comprehension's time at 20,000 rows), whose answer for a single row is the value, not
    a tuple (those by the comprehension).

    >>> at_rows(("a", "b", "c"), [2, 0]), at_rows(("a", "b"), [1])
    (('c', 'a'), ('b',))
    """
    if len(rows) < 2:
        return tuple(values[i] for i in rows)
    return tuple(operator.itemgetter(*rows)(values))
