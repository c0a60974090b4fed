"""One codec for the library's typed records (the contract's reports, training's): a
record declares its fields once, typed, and :func:`to_json` and :func:`from_json` read
that declaration.

``to_json`` writes each field under its name (or ``metadata["json"]``), a record as its
own object, a tuple as a list, a non-finite float as null, and a float with
``metadata["round"]`` rounded. ``from_json`` takes the JSON back field by field, checks
each value against the field's type (a Literal's values included), turns null back into
NaN for a float, ignores keys it does not know (a file written by a newer version) and
refuses anything else in one line naming the record and the place::

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Pair(Record):
    ...     name: str
    ...     value: float = 0.0
    >>> Pair.from_json({"name": "loss", "value": None}).value
    nan
    >>> Pair.from_json({"value": 1})
    Traceback (most recent call last):
    ...
    genesis_fp16_infrastructure.record_codec.ReportError: Pair: 'name' missing
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

JSON = "json"  # metadata: the field's key in JSON, where its name cannot be (``from``)
ROUND = "round"  # metadata: the digits a float is rounded to in JSON
OMIT_NONE = "omit_none"  # metadata: the key is left out of the JSON while the field is None

R = TypeVar("R", bound="Record")


class ReportError(ValueError):
    """A record's JSON that does not fit its type: one line, naming the record, the field
    and what it held."""


class Record:
    """A frozen dataclass's ``to_json``/``from_json`` by its fields (the module docstring)."""

    def to_json(self) -> dict[str, Any]:
        return encode_fields(self)

    @classmethod
    def from_json(cls: type[R], data: object, where: str = "") -> R:
        """The record ``data`` holds, or :class:`ReportError` in one line."""
        return decode_fields(cls, data, where or cls.__name__)


def key_of(item: Field[Any]) -> str:
    """The JSON key of a field."""
    return str(item.metadata.get(JSON, item.name))


def encode_fields(record: Any, only: Sequence[str] | None = None) -> dict[str, Any]:
    """``record``'s fields (``only`` those named) as a JSON object."""
    out: dict[str, Any] = {}
    for item in fields(record):
        if only is not None and item.name not in only:
            continue
        value = getattr(record, item.name)
        if value is None and item.metadata.get(OMIT_NONE):
            continue
        out[key_of(item)] = encode(value, item.metadata.get(ROUND))
    return out


def encode(value: Any, digits: int | None = None) -> Any:
    """One value as JSON: records by their ``to_json``, NaN and infinities as null."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if digits is not None else value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): encode(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v, digits) for v in value]
    return value


def decode_fields(cls: type[Any], data: object, where: str) -> Any:
    """An instance of the dataclass ``cls`` from its JSON object ``data``."""
    if not isinstance(data, Mapping):
        raise ReportError(f"{where}: an object expected, got {_kind(data)}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for item in fields(cls):
        if not item.init:
            continue
        key = key_of(item)
        if key not in data:
            if item.default is MISSING and item.default_factory is MISSING:
                raise ReportError(f"{where}: {key!r} missing")
            continue
        values[item.name] = decode(data[key], hints[item.name], f"{where}.{key}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # the record's own check (__post_init__)
        raise ReportError(f"{where}: {exc}") from None


def decode(value: Any, hint: Any, where: str) -> Any:
    """``value`` read as a ``hint``; :class:`ReportError` where it is not one."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin is Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        for arg in others[:-1]:
            try:
                return decode(value, arg, where)
            except ReportError:
                continue
        return decode(value, others[-1], where)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(map(repr, args))
            raise ReportError(f"{where}: one of {choices} expected, got {value!r}")
        return value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value, where)
    if isinstance(hint, type) and is_dataclass(hint):
        return decode_fields(hint, value, where)
    if hint is float:  # null is a NaN that crossed JSON; an int is a float
        if value is None:
            return math.nan
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int or hint is str or hint is bool:
        if isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
            return value
    elif hint is Path:
        if isinstance(value, str):
            return Path(value)
    elif origin is Mapping or origin is dict:
        if isinstance(value, Mapping):
            item = args[1] if args else Any
            out = {}
            for key, v in value.items():
                if not isinstance(key, str):
                    raise ReportError(f"{where}: key {key!r} is not a str")
                out[key] = decode(v, item, f"{where}[{key!r}]")
            return out
    elif origin is tuple or origin is Sequence:
        if isinstance(value, list | tuple):
            if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed shape
                if len(value) != len(args):
                    raise ReportError(f"{where}: {len(args)} items expected, got {len(value)}")
                pairs = enumerate(zip(value, args, strict=True))
                return tuple(decode(v, a, f"{where}[{i}]") for i, (v, a) in pairs)
            item = args[0] if args else Any
            return tuple(decode(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    else:
        raise TypeError(f"{where}: the codec reads no {hint!r}")  # a record's own bug
    raise ReportError(f"{where}: {_name(hint)} expected, got {_kind(value)}")


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    if cls not in _HINTS:
        module = sys.modules[cls.__module__]
        _HINTS[cls] = get_type_hints(cls, vars(module))
    return _HINTS[cls]


def _name(hint: Any) -> str:
    text = str(hint) if get_origin(hint) else getattr(hint, "__name__", str(hint))
    return text.replace("collections.abc.", "").replace("typing.", "")


def _kind(value: object) -> str:
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:39] + '…'}"
