"""One codec for the library's typed records (the contract's reports, training's, the
``TrainResult``), on msgspec: a record declares its fields once, typed, as a frozen
dataclass, and :func:`encode_record` and :func:`decode_record` read that declaration.

A record's JSON is each field under its name (or ``metadata["json"]``), a record as its
own object, a tuple as a list, a non-finite float as null, a float with
``metadata["round"]`` rounded, a field with ``metadata["omit_none"]`` left out while it
is None, and a callback (a field typed ``Callable``, or one or None: a request's
``on_log``) left out always: it cannot cross a process. Reading takes the JSON back with
the fields' types checked (a Literal's or an enum's values included, an enum's read back
as its member), null back into NaN for a float, keys it does not know ignored (a file
written by a newer version), and anything else refused in one line naming the record and
the place::

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

How: each record type gets a msgspec ``Struct`` of the same fields (its *mirror*, made
once per type by :func:`mirror_of`) that carries the JSON names (``rename``) and the
fields a JSON object may leave out (``UNSET``, then the dataclass's own default);
``msgspec.convert`` checks and reads the JSON into it. What msgspec has no word for is a
custom type of the mirror's: a float that reads null as NaN, a Literal or enum that
names its values when refused, a ``Path``, and a record that reads itself (its own ``from_json``,
as the calibration cache checks its version). msgspec's refusal (``Expected `int`, got
`str` - at `$.records```) is put in the record's words by :func:`one_line`. Writing is
the fields' own walk (:func:`encode_record`): a plugin's value that is not JSON stays as
it is, for ``check_result`` to name.
"""

from __future__ import annotations

import collections.abc
import enum
import math
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec

JSON = "json"  # metadata: the field's key in JSON, where its name cannot be (``from``)
ROUND = "round"  # metadata: the digits a float is rounded to in JSON
OMIT_NONE = "omit_none"  # metadata: the key is left out of the JSON while the field is None
LOCAL = "local"  # metadata: the field never crosses a process (left out, its default read)

R = TypeVar("R", bound="Record")
_INNER = "\x00"  # where a record read by its own from_json inside another one stands


class ReportError(ValueError):
    """A record's JSON that does not fit its type: one line, naming the record, the field
    and what it held."""


class Record:
    """A frozen dataclass's ``to_json``/``from_json`` by its fields (the module docstring).
    A record with a ``VERSION`` (a file's: the precision memory's) writes it as
    ``version`` and reads only that one."""

    VERSION: ClassVar[int | None] = None

    def to_json(self) -> dict[str, Any]:
        return (
            encode_record(self)
            if self.VERSION is None
            else {"version": self.VERSION, **encode_record(self)}
        )

    @classmethod
    def from_json(cls: type[R], data: object, where: str = "") -> R:
        """The record ``data`` holds, or :class:`ReportError` in one line."""
        where = where or cls.__name__
        version = data.get("version") if isinstance(data, Mapping) else None
        if cls.VERSION is not None and version != cls.VERSION:
            raise ReportError(f"{where}: version {version!r}, expected {cls.VERSION}")
        found: R = decode_record(cls, data, where)
        return found


def key_of(item: Field[Any]) -> str:
    """The JSON key of a field."""
    return str(item.metadata.get(JSON, item.name))


def encode_record(record: Any) -> dict[str, Any]:
    """``record``'s fields as a JSON object."""
    out = {}
    kind: type = type(record)
    for item in fields(record):
        value = getattr(record, item.name)
        if (value is None and item.metadata.get(OMIT_NONE)) or item.name in _callbacks(kind):
            continue
        out[key_of(item)] = plain(value, item.metadata.get(ROUND))
    return out


@cache
def _callbacks(cls: type) -> frozenset[str]:
    """The fields of the dataclass ``cls`` typed as callbacks (``Callable``, or one or
    None) or marked ``LOCAL``."""
    found = {item.name for item in fields(cls) if item.metadata.get(LOCAL)}
    for name, hint in get_type_hints(cls).items():
        kinds = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
        if any(get_origin(kind) is collections.abc.Callable for kind in kinds):
            found.add(name)
    return frozenset(found)


def plain(value: Any, digits: int | None = None) -> Any:
    """One value as JSON (a record's field, a run file's): a record as its own JSON (its
    ``to_json``: Calibration adds its version), a Path as text, NaN and infinities as
    null, a declared float rounded; what is not JSON is left as it is (``check_result``
    names it).

    >>> plain({"auc": float("nan"), "loss": (1.0, float("inf"))})
    {'auc': None, 'loss': [1.0, None]}
    """
    if isinstance(value, Record) or _reads_itself(type(value)):
        return value.to_json()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if digits is not None else value
    if isinstance(value, list | tuple):
        return [plain(v, digits) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v, digits) for k, v in value.items()}
    return value


def decode_record(cls: type[Any], data: object, where: str) -> Any:
    """An instance of the dataclass ``cls`` from its JSON object ``data``."""
    try:
        mirrored = msgspec.convert(data, mirror_of(cls), strict=True, dec_hook=_read_custom)
    except msgspec.ValidationError as exc:
        raise ReportError(one_line(str(exc), data, where)) from None
    try:
        return _thaw(mirrored)
    except (TypeError, ValueError) as exc:  # the record's own check (__post_init__)
        raise ReportError(f"{where}: {exc}") from None


# -- the mirrors: a msgspec Struct per record type ------------------------------------


class _Float(float):
    """A float field in a mirror: null reads as NaN, an int as a float, a bool refused."""


class _Choice(str):
    """A Literal or enum field in a mirror (a subclass per type, ``choices`` its values;
    ``enum``: the enum a value is read back as, None for a Literal)."""

    choices: tuple[Any, ...] = ()
    enum: type[enum.Enum] | None = None


_MIRRORS: dict[type[Any], type[msgspec.Struct]] = {}  # record type -> its mirror
_RECORDS: dict[type[Any], type[Any]] = {}  # mirror -> its record type


def mirror_of(cls: type[Any]) -> type[msgspec.Struct]:
    """The msgspec Struct that reads the dataclass ``cls``'s JSON, made once."""
    if cls not in _MIRRORS:
        _MIRRORS[cls] = _make_mirror(cls)
        _RECORDS[_MIRRORS[cls]] = cls
    return _MIRRORS[cls]


def _make_mirror(cls: type) -> type[msgspec.Struct]:
    hints = get_type_hints(cls)  # each field's in its own class's module
    specs: list[tuple[Any, ...]] = []
    for item in fields(cls):
        if not item.init or item.name in _callbacks(cls):
            continue
        hint = _mirror_hint(hints[item.name])
        optional = item.default is not MISSING or item.default_factory is not MISSING
        # A field left out of the JSON stays UNSET: the dataclass's own default applies.
        if optional:
            specs.append((item.name, Union[hint, msgspec.UnsetType], msgspec.UNSET))  # noqa: UP007
        else:
            specs.append((item.name, hint))
    names = {item.name: key_of(item) for item in fields(cls) if key_of(item) != item.name}
    return msgspec.defstruct(f"{cls.__name__}JSON", specs, rename=names, kw_only=True)


def _mirror_hint(hint: Any) -> Any:
    """A field's type as its mirror reads it: records by their mirrors (or themselves,
    when they read their own JSON), float, Literal and Path by the custom types."""
    origin, args = get_origin(hint), get_args(hint)
    union = origin in (Union, types.UnionType)
    if isinstance(hint, type) and is_dataclass(hint):
        return _own(hint) if _reads_itself(hint) else mirror_of(hint)
    if hint is float:
        return _Float
    if hint is object:  # any JSON value, kept as read (agent_folder.kept_record.Json)
        return Any
    if origin is Literal:
        return _choice(args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _choice(tuple(member.value for member in hint), hint)
    if union and all(get_origin(a) is Literal for a in args):
        return _choice(tuple(value for a in args for value in get_args(a)))  # one custom type
    if union:
        return Union[tuple(_mirror_hint(a) for a in args)]  # noqa: UP007
    if origin is Mapping or origin is dict:
        return dict[str, _mirror_hint(args[1])] if args else dict  # type: ignore[misc]
    if origin is Sequence or (origin is tuple and args[-1:] == (Ellipsis,)):
        return tuple[_mirror_hint(args[0]), ...]  # type: ignore[misc]
    if origin is tuple:
        return tuple[tuple(_mirror_hint(a) for a in args)]  # type: ignore[misc]
    return hint


def _reads_itself(cls: type[Any]) -> bool:
    """A record with a ``from_json`` of its own (Calibration checks its cache version) or a
    ``VERSION`` to check, or a dataclass with its own JSON (the served pointer's, the data
    manifest's: None read is refused)."""
    own = getattr(getattr(cls, "from_json", None), "__func__", None)
    versioned = getattr(cls, "VERSION", None) is not None
    record_read = Record.from_json.__func__  # type: ignore[attr-defined]
    return is_dataclass(cls) and own is not None and (own is not record_read or versioned)


class _Own:
    """A record that reads its own JSON, in a mirror (a subclass per record type: msgspec
    would read the dataclass itself, by its fields, past its ``from_json``)."""

    reads: type[Any] = object

    def __init__(self, record: Any) -> None:
        self.record = record


@cache
def _own(cls: type[Any]) -> type[_Own]:
    return type(f"{cls.__name__}Own", (_Own,), {"reads": cls})


@cache
def _choice(values: tuple[Any, ...], of: type[enum.Enum] | None = None) -> type[_Choice]:
    return type("Choice", (_Choice,), {"choices": values, "enum": of})


def _read_custom(kind: type[Any], value: Any) -> Any:
    """msgspec's ``dec_hook``: a value of one of the custom types, or why it is not one,
    worded as msgspec words its own refusals (``one_line`` rewrites both alike)."""
    if kind is _Float:
        if value is None:
            return _Float(math.nan)  # a NaN that crossed JSON
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _Float(value)
        raise ValueError(f"Expected `float`, got `{_json_kind(value)}`")
    if issubclass(kind, _Choice):
        if value in kind.choices:
            return kind(value)
        choices = ", ".join(map(repr, kind.choices))
        raise ValueError(f"one of {choices} expected, got {value!r}")
    if kind is Path:
        if isinstance(value, str):
            return Path(value)
        raise ValueError(f"Expected `str`, got `{_json_kind(value)}`")
    if issubclass(kind, _Own):  # its message goes on from this one's place
        reads = kind.reads
        try:
            read = (
                reads.from_json(value, _INNER)
                if issubclass(reads, Record)
                else reads.from_json(value)
            )
            if read is None:  # a reader that answers None for what it cannot read (Manifest)
                raise ValueError(f"a {reads.__name__} expected, got {_kind(value)}")
            return kind(read)
        except ValueError as exc:  # a ReportError, or a plain dataclass's own refusal
            raise ValueError(str(exc)) from None
    raise NotImplementedError(kind)  # a record's field of a type the mirror does not read


def _thaw(value: Any) -> Any:
    """A mirror's values back as the record's: mirrors as records, the custom types as
    plain float and str; UNSET left to the dataclass's default."""
    if isinstance(value, msgspec.Struct):
        values = {
            name: _thaw(getattr(value, name))
            for name in value.__struct_fields__
            if getattr(value, name) is not msgspec.UNSET
        }
        return _RECORDS[type(value)](**values)
    if isinstance(value, _Own):
        return value.record
    if isinstance(value, _Float):
        return float(value)
    if isinstance(value, _Choice):
        of = type(value).enum
        return str(value) if of is None else of(str(value))
    if isinstance(value, tuple):  # msgspec read a tuple field as one; Any's lists stay
        return tuple(_thaw(v) for v in value)
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    return value


# -- msgspec's refusal in the record's words --------------------------------------------

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`(?P<length> of length \d+)?, got (?P<got>.+)$")
_MISSING = re.compile(r"^Object missing required field `(?P<key>[^`]+)`$")


def one_line(message: str, data: object, where: str) -> str:
    """msgspec's message about ``data`` as one line naming ``where`` and the place in it:
    ``GateReport.comparisons[0]: 'candidate' missing``."""
    found = _AT.match(message)
    assert found is not None  # the pattern matches any text
    what = found["what"]
    expected = _EXPECTED.match(what)
    got = expected["got"].strip("`") if expected else None
    place, value = where, data
    for key, index in _STEP.findall(found["path"] or ""):
        value, step = _step(value, key or index, got)
        place += step
    if what.startswith(_INNER):  # a record that read itself said where, inside it
        return place + what[len(_INNER) :]
    missing = _MISSING.match(what)
    if missing:
        return f"{place}: {missing['key']!r} missing"
    if expected and expected["length"]:
        return f"{place}: {expected['length'].split()[-1]} items expected, got {got}"
    if expected:
        want = _article(expected["want"].replace("null", "None"))
        return f"{place}: {want} expected, got {_kind(value)}"
    return f"{place}: {what}"


def _step(value: Any, key: str, got: str | None) -> tuple[Any, str]:
    """One step of msgspec's path into the data, and how the place reads it. A mapping's
    key msgspec leaves unsaid (``[...]``): it stops at the first value that does not fit,
    so the first of the refused kind (``got``) is the one."""
    if key.isdigit():
        inside = value[int(key)] if isinstance(value, list | tuple) else None
        return inside, f"[{key}]"
    if key != "...":
        return (value.get(key) if isinstance(value, Mapping) else None), f".{key}"
    if isinstance(value, Mapping) and got is not None:
        for name, inside in value.items():
            if _json_kind(inside) == got:
                return inside, f"[{name!r}]"
    return None, "[...]"


def _article(want: str) -> str:
    return "an object" if want == "object" else want.replace("array", "list")


def _json_kind(value: object) -> str:
    names = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}
    return names.get(type(value), "array" if isinstance(value, list | tuple) else "object")


def _kind(value: object) -> str:
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:39] + '…'}"
