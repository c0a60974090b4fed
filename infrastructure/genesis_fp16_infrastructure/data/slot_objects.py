"""Many frozen, slotted dataclass objects at once, built a field at a time.

A read makes several objects per record (issue 36: a million records, five objects
each). A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
in Python; :func:`objects` makes the empty objects first, then sets one field of all of
them with ``map`` over the field's slot setter, which runs in C: the same objects, with
the same field values, at a fraction of the cost. Only for classes whose ``__init__``
does nothing but set its fields (no ``__post_init__``, no defaults computed)::

    entries = objects(PoolEntry, ("score", "parents"), (scores, parents))
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")
_new = object.__new__


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


def builder(cls: type[_T], fields: Sequence[str]) -> Callable[[Sequence[Any]], _T]:
    """A function making one ``cls`` from its ``fields``' values, in that order, by the
    same slot setters (checked once, here, that every slot is named)::

        make = builder(PoolEntry, ("score", "parents", "operator", "created"))
        entry = make((0.5, (), "mutation", None))
    """
    slots = _slots(cls)
    if sorted(fields) != sorted(slots):
        raise TypeError(f"{cls.__name__} has fields {slots}, given {tuple(fields)}")
    setters = tuple(getattr(cls, name).__set__ for name in fields)

    def make(values: Sequence[Any]) -> _T:
        item = _new(cls)
        for put, value in zip(setters, values, strict=True):
            put(item, value)
        return item

    return make


def _slots(cls: type) -> tuple[str, ...]:
    """``cls``'s slots; TypeError for a class whose ``__init__`` does more than set them
    (a ``__post_init__``), which building by the slots would skip."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it by its __init__")
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        names.extend(getattr(klass, "__slots__", ()))
    return tuple(n for n in names if n not in ("__weakref__", "__dict__"))
