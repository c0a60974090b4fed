"""A record of a JSON object that keeps what it does not read: the agent folder's records
(``lifecycle_records``: a candidate's meta and verdict, the served pointer's entries, its
pin and journal) are each a :class:`KeptRecord`.

A record declares the keys the code reads, as a msgspec ``Struct``; every other key a
file holds is kept in ``extra`` and written back as it was. A declared field that holds
typed figures of their own codec (``Held``: a verdict's scores, a served entry's live
figures) keeps its JSON as read too, written back while the field still holds what was
read from it: a file written before these types, or by a newer release, reads and
writes the same JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import msgspec

Json = object  # a JSON value the record does not declare: kept as read, never read here
EXTRA = "extra"
_KEPT_FIELDS = frozenset({EXTRA, "as_read", "read_values"})


ONE, EACH, BY_KEY = "one", "each", "by_key"  # how a held field holds its records


@dataclass(frozen=True)
class Held:
    """A declared field that holds one of the contract's records, a tuple of them
    (``EACH``: a JSON list) or a map of them (``BY_KEY``: a JSON object): how one
    record's JSON is read and written (the record's own methods; the tuple and the map
    are walked here, once). Its JSON is a list for ``EACH``, an object otherwise: a
    value of that kind its records cannot read is kept as read (``tolerant``); a value
    of another kind is refused, as any wrong type is."""

    read: Callable[[Any], Any]
    write: Callable[[Any], Json]
    shape: str = ONE
    tolerant: bool = True


def _read_many(how: Held, value: Any) -> object:
    """A held tuple's or map's value from its JSON, each record by ``how.read``
    (``ValueError`` when one does not fit), from record to record with no call of this
    module's between them (one held record is read in place: :meth:`KeptRecord.from_json`)."""
    if how.shape == EACH:
        return tuple(map(how.read, value))
    return dict(zip(map(str, value), map(how.read, value.values()), strict=True))


def _write_many(how: Held, value: Any) -> Json:
    """A held tuple's or map's JSON, each record by ``how.write``."""
    if how.shape == EACH:
        return list(map(how.write, value))
    return dict(zip(value, map(how.write, value.values()), strict=True))


class KeptRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A record of a JSON object: its declared fields, and ``extra``, the keys it does
    not declare, kept as read.

    A declared field that holds the contract's records (``_HELD``: a verdict's scores, a
    served entry's live figures) is read by their own ``from_json`` and written by their
    ``to_json``. Its JSON as read is kept too (``as_read``), with what was read from it
    (``read_values``), and written back as it was while the field still holds that (the
    same object): so a form older than the record's, or a key a newer release added,
    comes back as the file held it, and so does a hand's edit the record cannot read
    (the field is then empty). A field given a new value is written by its record."""

    extra: dict[str, Json] = {}
    as_read: dict[str, Json] = {}  # each held field's JSON, as read
    read_values: dict[str, object] = {}  # what was read from it (None: unreadable)
    _HELD: ClassVar[Mapping[str, Held]] = {}
    # Declared keys written even while null (a journal entry's, as they always were).
    _NULLS_WRITTEN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> Self:
        """The record ``data`` holds; ``ValueError`` (one line) when it does not fit."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: a JSON {type(data).__name__}, not an object")
        declared = set(cls.__struct_fields__) - _KEPT_FIELDS
        known = {k: v for k, v in data.items() if k in declared and k not in cls._HELD}
        extra = {k: v for k, v in data.items() if k not in declared}
        held: dict[str, object] = {}
        as_read: dict[str, Json] = {}
        for name, how in cls._HELD.items():
            value = data.get(name)
            if value is None:
                continue
            if not isinstance(value, list if how.shape == EACH else dict):
                raise ValueError(f"{cls.__name__}.{name}: a JSON {type(value).__name__}")
            as_read[name] = value
            try:
                held[name] = how.read(value) if how.shape == ONE else _read_many(how, value)
            except ValueError as exc:
                if not how.tolerant:
                    raise ValueError(f"{cls.__name__}.{name}: {exc}") from None
        try:
            found = msgspec.convert({**known, EXTRA: extra}, cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{cls.__name__}: {exc}") from None
        read = {name: held.get(name) for name in as_read}
        return msgspec.structs.replace(found, **held, as_read=as_read, read_values=read)

    def to_json(self) -> dict[str, Json]:
        """The JSON object: ``extra``'s keys, then the declared fields that are set (and
        those of ``_NULLS_WRITTEN``, null while unset)."""
        cleared = {name: None for name in self._HELD}  # written below, each by its record
        blank = msgspec.structs.replace(self, extra={}, as_read={}, read_values={}, **cleared)
        out: dict[str, Json] = msgspec.to_builtins(blank, enc_hook=_plain)
        for name, how in self._HELD.items():
            out.pop(name, None)
            value = getattr(self, name)
            if name in self.as_read and value is self.read_values.get(name):
                out[name] = self.as_read[name]  # as read: nothing changed it
            elif value is not None and value != () and value != {}:
                out[name] = how.write(value) if how.shape == ONE else _write_many(how, value)
        return {**dict.fromkeys(self._NULLS_WRITTEN), **self.extra, **out}

    def overlaid(self, other: Self) -> Self:
        """This record with what ``other`` sets in its place: each declared field it sets
        (not empty), with its JSON as read, and its ``extra`` keys; what ``other`` leaves
        empty stays this record's. The record that reading the merge of their JSON
        objects (``{**self.to_json(), **other.to_json()}``) gives, without the JSON."""
        declared = set(self.__struct_fields__) - _KEPT_FIELDS
        taken = {
            name: value
            for name in declared
            if (value := getattr(other, name)) is not None and value != () and value != {}
        }
        taken |= {name: getattr(other, name) for name in other.as_read}  # as it read them
        kept = {k: v for k, v in self.as_read.items() if k not in taken}
        values = {k: v for k, v in self.read_values.items() if k not in taken}
        return msgspec.structs.replace(
            self,
            **taken,
            extra={**self.extra, **other.extra},
            as_read={**kept, **other.as_read},
            read_values={**values, **other.read_values},
        )

    def kept(self, name: str) -> Json:
        """The JSON of the held field ``name`` as read, where its record could not read
        it (a hand's edit: the field is empty); None otherwise."""
        unreadable = name in self.as_read and self.read_values.get(name) is None
        return self.as_read[name] if unreadable else None


def _plain(value: object) -> Json:
    """A subclass of a JSON scalar as its plain value (``torch.__version__`` is a str
    subclass, which ``json.dumps`` wrote and msgspec refuses); anything else is refused
    as msgspec refuses it."""
    for plain in (bool, int, float, str):
        if isinstance(value, plain):
            return plain(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")
