"""Records taken as rows of a checked listing (``RecordLosses.of_rows``): what such a
record keeps instead of its ids and segments (:class:`ListedRows`, marked so by
:func:`keep_listed`) and instead of its loss columns' tuples (their arrays alone,
:func:`keep_lazy_listed`), when it may still be believed (:func:`still_listed`,
:func:`rows_listed`); :func:`at_rows`, values at rows, and :func:`taken_at`, a record's
ids or segments at some of its rows.

A record made of rows of a listing that passed its own check whole (``RecordIds``: each
id a distinct exact ``str``) keeps the listing's own tuples and its rows, an array over
bytes of its own: its ids are those at the rows, taken only when read. The judged run
pairs such records by their rows (the served model's scoring and the candidate's ask by
rows of the same listing): ~20,000 ids each at 100,000 records, never taken.

Its loss columns likewise (checked finite and not negative on their arrays): kept as the
arrays alone, each column's tuple of Python floats made when first read
(:func:`made_column`), all of them when the record's ``losses`` is (:func:`made_losses`).
The judged run reads them as arrays (the gate's pairs, the served records counted): at
100,000 records, ~20,000 floats a column and scoring never made, nor cut to the gate's
records. Such a record holds no ``losses`` yet, and ``{name: (None, array)}`` in
``loss_columns.ARRAYS`` (a column made since: ``(its tuple, array)``, as
``loss_columns`` keeps a column's array beside its tuple); its check (:data:`CHECKED`)
is that of its arrays, each the array itself in the tuple's place. The record's own
module calls these and ``loss_columns``' alike; neither calls the other.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence, Sized
from typing import Any, NamedTuple, TypeVar

import numpy as np

from genesis_fp16_infrastructure.contract.loss_columns import ARRAYS
from genesis_fp16_infrastructure.contract.split import _unchangeable

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


def still_listed(fields: dict[str, Any], losses: Mapping[str, Sized]) -> ListedRows | None:
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


def keep_listed(fields: dict[str, Any], listed: ListedRows, losses: Mapping[str, Sized]) -> None:
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


def taken_at(record: Any, name: str, rows: np.ndarray) -> tuple[str, ...] | None:
    """``record``'s ``ids`` or ``segments`` (``name``) at its ``rows`` alone, in order;
    None: no segments. Of a record made of rows of a listing whose tuple is not taken yet,
    from the listing's own at those rows: no tuple of every record's made (the live watch
    reads the new ~5% of ~200,000 scored records at 1,000,000).

    >>> from genesis_fp16_infrastructure.contract.record_losses import RecordLosses
    >>> taken_at(RecordLosses.of(["a", "b", "c"], [0.5, 0.2, 0.1]), "ids", np.array([2, 0]))
    ('c', 'a')
    """
    fields = vars(record)
    listed = fields.get(LISTED) if name not in fields else None
    if isinstance(listed, ListedRows):
        values, at = (listed.ids if name == "ids" else listed.segments), listed.at[rows]
    else:
        values, at = getattr(record, name), rows
    return None if values is None else at_rows(values, at.tolist())


def keep_lazy_listed(
    fields: dict[str, Any], listed: ListedRows, arrays: Mapping[str, np.ndarray]
) -> None:
    """A record (``fields``: its ``vars``; its names and count checked) made of ``listed``
    whose columns are ``arrays`` (checked finite and not negative), kept as them alone:
    each a copy of its own that no one can change (one already so, a lazy record's, as it
    is), and marked as :func:`still_listed` asks it again, by those arrays."""
    kept = {
        name: array if _unchangeable_array(array) else _unchangeable(array, np.float64)
        for name, array in arrays.items()
    }
    fields[ARRAYS] = {name: (None, array) for name, array in kept.items()}
    keep_listed(fields, listed, kept)


def lazy_arrays(fields: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """A record's columns as :func:`keep_lazy_listed` kept them, by name, while it holds
    them so: no ``losses`` set (made or planted), and each kept array float64, one
    dimension, over bytes of its own; None: any other record (its ``losses`` are read)."""
    kept = fields.get(ARRAYS)
    if "losses" in fields or not isinstance(kept, dict) or not kept:
        return None
    found = {}
    for name, pair in kept.items():
        if not isinstance(pair, tuple) or len(pair) != 2 or not _unchangeable_array(pair[1]):
            return None
        if pair[0] is not None and not isinstance(pair[0], tuple):
            return None
        found[name] = pair[1]
    return found


def rows_listed(fields: dict[str, Any]) -> ListedRows | None:
    """:func:`still_listed` of a record (``fields``: its ``vars``): of its arrays while it
    keeps its columns as them alone (:func:`lazy_arrays`), else of its ``losses``."""
    columns = lazy_arrays(fields)
    losses = fields.get("losses") if columns is None else columns
    return still_listed(fields, losses) if isinstance(losses, Mapping) else None


def made_column(fields: dict[str, Any], name: str) -> tuple[float, ...]:
    """A lazy record's column ``name``, its tuple of Python floats made the first time and
    kept beside its array (KeyError: no such column)."""
    pair = fields[ARRAYS][name]
    if pair[0] is None:
        pair = fields[ARRAYS][name] = (tuple(pair[1].tolist()), pair[1])
    return pair[0]


def made_losses(fields: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """A lazy record's ``losses``, each column's tuple made (:func:`made_column`), set in
    ``fields``; where its check is still its arrays', the check of the tuples instead, as
    a record made with them holds it. From then on it is any record with its columns and
    their arrays (``loss_columns.believed_arrays``)."""
    arrays = lazy_arrays(fields)
    if arrays is None:  # not as kept (an unpickled copy): its numbers, no check carried
        kept = fields[ARRAYS]
        made = {
            n: tuple(np.asarray(p[1], np.float64).reshape(-1).tolist()) for n, p in kept.items()
        }
        fields["losses"] = made
        return made
    columns = {name: made_column(fields, name) for name in arrays}
    was, chain = fields.get(CHECKED), tuple(itertools.chain.from_iterable(arrays.items()))
    if isinstance(was, tuple) and len(was) == len(chain) and all(map(operator.is_, was, chain)):
        fields[CHECKED] = tuple(itertools.chain.from_iterable(columns.items()))
    fields["losses"] = columns
    return columns


def _unchangeable_array(array: object) -> bool:
    """Whether ``array`` is float64, one dimension, read-only, over an immutable ``bytes``
    (``split._unchangeable``'s: no one can make it writeable)."""
    return (
        isinstance(array, np.ndarray)
        and array.dtype == np.float64
        and array.ndim == 1
        and not array.flags.writeable
        and isinstance(array.base, bytes)
    )
