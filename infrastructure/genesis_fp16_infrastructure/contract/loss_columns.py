"""A loss column's numbers: made into Python floats once (:func:`columns_of`), and their
float64 array kept beside the tuple a ``RecordLosses`` holds (:func:`keep_arrays`), for
the questions that ask them as an array (:func:`column_array`).

Why keep the array: ``RecordLosses.of`` and ``of_rows`` make each column's array to check
it, then hold the column as a tuple of floats. The gate pairs both models' losses on
every column: at a 100,000-record pool, about 20,000 held-out records a column, and
turning each tuple into an array again cost 0.43 ms a column and model, four times a
verdict (issue 90: the gate grew with the pool).

An array is believed only beside the very tuple it was made of: a record keeps
``{name: (values, array)}`` (:data:`ARRAYS`), and the array is given only while the
record's column is still that tuple object (a tuple of exact floats cannot change; a
column set since, behind the record's back, is made into an array again). Each array
is over bytes of its own: read-only, and no one can make it writeable.

>>> fields = {}
>>> values, finite, arrays = columns_of({"loss": [0.5, 0.25]})
>>> keep_arrays(fields, values, arrays)
>>> column_array(fields, "loss", values["loss"]).tolist(), finite
([0.5, 0.25], {'loss'})
>>> column_array(fields, "loss", (0.5, 0.75)).tolist()  # another tuple: made again
[0.5, 0.75]
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from genesis_fp16_infrastructure.contract.listed_rows import ListedRows, keep_listed, still_listed
from genesis_fp16_infrastructure.contract.split import _unchangeable

ARRAYS = "_arrays"  # a record's {column name: (its tuple, that tuple's float64 array)}


def floats(column: Iterable[float]) -> np.ndarray:
    """A column of numbers as one float64 array (``float()`` of each, in one numpy pass):
    its ``tolist()`` is the column's Python floats."""
    if isinstance(column, np.ndarray):
        if column.ndim != 1:
            raise ValueError(f"a column of shape {column.shape}, not one value per record")
        return column.astype(np.float64)
    return np.fromiter(column, dtype=np.float64)


def finite_and_not_negative(values: np.ndarray) -> bool:
    """Whether every value is finite and 0 or more: ``judging._check_column``'s test of
    each Python float, on their float64 array (``float(x) >= 0.0`` is ``x >= 0.0``; -0.0
    passes both)."""
    return bool(np.isfinite(values).all() and (values >= 0.0).all())


def columns_of(
    losses: Mapping[str, Iterable[float]],
) -> tuple[dict[str, tuple[float, ...]], set[str], dict[str, np.ndarray]]:
    """Each column's Python floats, the names of those checked finite and not negative on
    their array (not walked again as floats), and the arrays. TypeError or ValueError: a
    value that is not a number."""
    found = {name: floats(column) for name, column in losses.items()}
    finite = {name for name, array in found.items() if finite_and_not_negative(array)}
    values = {name: tuple(array.tolist()) for name, array in found.items()}
    return values, finite, found


def keep_arrays(
    fields: dict[str, Any],
    columns: Mapping[str, tuple[float, ...]],
    arrays: Mapping[str, np.ndarray],
) -> None:
    """``arrays`` (each the float64 numbers of the column of the same name in ``columns``,
    the tuples a record holds) kept in the record's ``fields`` (its ``vars``), each as
    a copy of its own that no one can change; a column without one is left out."""
    kept = {
        name: (values, _unchangeable(arrays[name], np.float64))
        for name, values in columns.items()
        if name in arrays and len(arrays[name]) == len(values)
    }
    fields[ARRAYS] = kept


def believed_arrays(
    fields: dict[str, Any], columns: Mapping[str, tuple[float, ...]]
) -> dict[str, np.ndarray]:
    """The arrays a record kept (``fields``: its ``vars``) that are beside the very tuples
    of ``columns`` (its columns now, or a copy's, checked), by column name."""
    found = {}
    for name, values in columns.items():
        array = _believed(fields, name, values)
        if array is not None:
            found[name] = array
    return found


def column_array(fields: dict[str, Any], name: str, values: tuple[float, ...]) -> np.ndarray:
    """Column ``name``'s numbers (``values``: the record's column now), float64, read-only:
    the array kept beside that very tuple, else made of it."""
    array = _believed(fields, name, values)
    if array is None:
        array = np.fromiter(values, dtype=np.float64, count=len(values))
        array.flags.writeable = False
    return array


def _believed(fields: dict[str, Any], name: str, values: object) -> np.ndarray | None:
    kept = fields.get(ARRAYS)
    pair = kept.get(name) if isinstance(kept, dict) else None
    if not isinstance(values, tuple) or not isinstance(pair, tuple) or len(pair) != 2:
        return None  # a tuple only: a list could change after its array was made
    if pair[0] is not values:
        return None
    array = pair[1]
    ok = isinstance(array, np.ndarray) and array.dtype == np.float64 and array.ndim == 1
    if not ok or array.flags.writeable or len(array) != len(pair[0]):
        return None
    return array


# Columns kept as their arrays alone (a record of rows of a checked listing whose floats
# were checked on their arrays: ``RecordLosses.of_rows``, its copies and parts): each
# column's tuple of Python floats made when first read (:func:`made_column`), all of them
# when the record's ``losses`` is (:func:`made_losses`). The judged run reads them as
# arrays (the gate's pairs, the watch's new records): at 100,000 records, ~20,000 floats
# a column and scoring never made, nor cut to the gate's records.
#
# Such a record holds no ``losses`` yet, and ``{name: (None, array)}`` in :data:`ARRAYS`
# (a column made since: ``(its tuple, array)``); its check (``listed_rows.CHECKED``) is
# that of its arrays, each the array itself in the tuple's place (:func:`lazy_chain`).


def check_floats(
    losses: Mapping[str, Iterable[float]],
) -> tuple[dict[str, np.ndarray], set[str]]:
    """:func:`columns_of` less the tuples: each column's array, and the names of those
    finite and not negative. TypeError or ValueError: a value that is not a number."""
    found = {name: floats(column) for name, column in losses.items()}
    return found, {name for name, array in found.items() if finite_and_not_negative(array)}


def keep_lazy(fields: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` kept in a record's ``fields`` as its columns, no tuple made: each a copy
    of its own that no one can change (one already so, a lazy record's, as it is). Returns
    them, by name, as :func:`lazy_arrays` gives them."""
    kept = {
        name: array if _unchangeable_array(array) else _unchangeable(array, np.float64)
        for name, array in arrays.items()
    }
    fields[ARRAYS] = {name: (None, array) for name, array in kept.items()}
    return kept


def lazy_arrays(fields: dict[str, Any]) -> dict[str, np.ndarray] | None:
    """A record's columns as :func:`keep_lazy` kept them, by name, while it holds them so:
    no ``losses`` set (made or planted), and each kept array float64, one dimension, over
    bytes of its own; None: any other record (its ``losses`` are read as they are)."""
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


def lazy_chain(arrays: Mapping[str, np.ndarray]) -> tuple[object, ...]:
    """A lazy record's check: each column's name and array, in order (``keep_listed``'s
    chain of the columns, with each array in its tuple's place)."""
    return tuple(itertools.chain.from_iterable(arrays.items()))


def made_column(fields: dict[str, Any], name: str) -> tuple[float, ...]:
    """A lazy record's column ``name``, its tuple of Python floats made the first time and
    kept beside its array (KeyError: no such column)."""
    pair = fields[ARRAYS][name]
    if pair[0] is None:
        pair = fields[ARRAYS][name] = (tuple(pair[1].tolist()), pair[1])
    return pair[0]


def made_losses(fields: dict[str, Any], checked: str) -> dict[str, tuple[float, ...]]:
    """A lazy record's ``losses``, each column's tuple made (:func:`made_column`), set in
    ``fields``; where its check (``fields[checked]``) is still its arrays', the check of
    the tuples instead, as a record made with them holds it. From then on it is any
    record with its columns and their arrays (``believed_arrays``)."""
    arrays = lazy_arrays(fields)
    if arrays is None:  # not as kept (an unpickled copy): its numbers, no check carried
        kept = fields[ARRAYS]
        made = {
            n: tuple(np.asarray(p[1], np.float64).reshape(-1).tolist()) for n, p in kept.items()
        }
        fields["losses"] = made
        return made
    columns = {name: made_column(fields, name) for name in arrays}
    was = fields.get(checked)
    chain = lazy_chain(arrays)
    if isinstance(was, tuple) and len(was) == len(chain) and all(map(operator.is_, was, chain)):
        fields[checked] = tuple(itertools.chain.from_iterable(columns.items()))
    fields["losses"] = columns
    return columns


def lazy_record(record: Any, arrays: Mapping[str, np.ndarray], listed: ListedRows,
                quarantined: int, primary: str) -> Any:  # fmt: skip
    """``record`` (a ``RecordLosses``, made but not filled in) as one of the rows ``listed``
    of a checked listing, whose columns are ``arrays`` (checked finite and not negative:
    ``check_floats``), kept as them alone (:func:`keep_lazy`); its names and count
    checked as a record's are."""
    vars(record).update(quarantined=quarantined, primary=primary)
    record._check_columns(list(arrays))
    record._check_count()
    keep_listed(vars(record), listed, keep_lazy(vars(record), arrays))
    return record


def rows_listed(record: Any) -> ListedRows | None:
    """``still_listed`` of a ``RecordLosses``: of its arrays while it keeps its columns as
    them alone (:func:`lazy_arrays`), else of its columns (``losses``)."""
    lazy = lazy_arrays(vars(record))
    return still_listed(vars(record), record.losses if lazy is None else lazy)


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
