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

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

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
    """Whether every value is finite and 0 or more: ``column_fault``'s test of
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


def check_floats(
    losses: Mapping[str, Iterable[float]],
) -> tuple[dict[str, np.ndarray], set[str]]:
    """:func:`columns_of` less the tuples: each column's array, and the names of those
    finite and not negative. TypeError or ValueError: a value that is not a number."""
    found = {name: floats(column) for name, column in losses.items()}
    return found, {name for name, array in found.items() if finite_and_not_negative(array)}


def column_fault(
    name: str, ids: Sequence[str], values: tuple[float, ...], finite: bool, exact: bool
) -> tuple[bool, str | None]:
    """Loss column ``name`` against its record's ``ids``: as long, each a finite float of
    0 or more (``finite``: floats checked so already, their length alone; ``exact``: each
    value exactly a ``float``, as the record's check found them: checked as an array).
    Whether each is exactly a ``float``, and what is wrong, in one line (None: nothing;
    the record's check raises it as a ``RecordLossesError``)."""
    if len(values) != len(ids):
        return False, f"RecordLosses: {len(ids)} ids but {len(values)} {name} values"
    if finite:
        return True, None
    if exact and finite_and_not_negative(np.fromiter(values, np.float64, len(values))):
        return True, None
    for id_, loss in zip(ids, values, strict=True):
        if isinstance(loss, bool) or not isinstance(loss, float) or not math.isfinite(loss):
            return False, f"RecordLosses: {name} of {id_!r} is {loss!r}, not a finite float"
        if loss < 0.0:  # clipped to 0, all-negative losses would promote on "0 vs 0"
            return False, f"RecordLosses: {name} of {id_!r} is {loss!r}; losses are 0 or more"
    return False, None
