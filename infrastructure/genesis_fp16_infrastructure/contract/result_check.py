"""A plugin's :class:`TrainResult`, checked field by field before anyone uses it.

A dataclass does not check its fields' types, so a plugin can build a result that holds
the wrong thing (plugin API 1's ``precision_requested=request.precision``, a
``PrecisionRequest`` since API 2; a loss left as a tensor). Such a result used to fail
much later, as a ``json.dumps`` traceback in the run's child process. :func:`check_result`
names the field in one line instead; ``train``, the daemon's in-process runs and
``check-agent`` call it on every result a plugin returns.

>>> check_result(result)  # doctest: +SKIP
Traceback (most recent call last):
TrainResultError: my_agent's TrainResult.precision_requested: Literal['auto', 'fp32', \
'bf16', 'fp16'] expected, got PrecisionRequest; report request.precision.requested \
(plugin API 2)
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping, Sequence
from dataclasses import fields
from os import PathLike
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.train_result import TrainResult
from genesis_fp16_infrastructure.record_codec import Record, ReportError


class TrainResultError(TrainRequestError):
    """A result the plugin built wrong: one line naming the field, what it should hold
    and what it held. A refusal like a bad request's (one line, the run refused)."""


def _fits(value: Any, hint: Any) -> bool:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if origin is Union or origin is types.UnionType:
        return any(_fits(value, arg) for arg in args)
    if origin is Literal:  # a precision name: one of its values
        return isinstance(value, str) and value in args
    if isinstance(hint, type) and issubclass(hint, Record):  # read back as it is written
        return isinstance(value, hint) and _record_misfit(value) is None
    if origin is Mapping:
        key, item = args or (Any, Any)
        return isinstance(value, Mapping) and all(
            _fits(k, key) and _fits(v, item) for k, v in value.items()
        )
    if origin is Sequence:
        (item,) = args or (Any,)
        return isinstance(value, list | tuple) and all(_fits(v, item) for v in value)
    return _fits_plain(value, hint)


def _fits_plain(value: Any, hint: Any) -> bool:
    """A value against a hint that holds no other: None, a number, a Path, a class."""
    if hint is type(None):
        return value is None
    if hint is float:  # an int is a float here, as in Python's typing; a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is Path:  # str(checkpoint) is all anyone does with it
        return isinstance(value, str | PathLike)
    return isinstance(value, get_origin(hint) or hint)


def _misfit(value: Any, hint: Any, where: str) -> str | None:
    """What is wrong with ``value`` as a ``hint``, at its innermost place, or None."""
    if _fits(value, hint):
        return None
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is types.UnionType:
        others = [arg for arg in args if arg is not type(None)]
        if value is not None and len(others) == 1:  # X | None holding a wrong X
            return _misfit(value, others[0], where)
    elif origin is Mapping and isinstance(value, Mapping):
        key_hint, item_hint = args or (Any, Any)
        for key, item in value.items():
            if not _fits(key, key_hint):
                return f"{where}: key {key!r} is not a {_name(key_hint)}"
            found = _misfit(item, item_hint, f"{where}[{key!r}]")
            if found:
                return found
    elif origin is Sequence and isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _misfit(item, args[0] if args else Any, f"{where}[{i}]")
            if found:
                return found
    elif isinstance(hint, type) and isinstance(value, hint) and isinstance(value, Record):
        return f"{where}: {_record_misfit(value)}"
    elif origin is Literal and isinstance(value, str):
        return f"{where}: one of {', '.join(map(repr, args))} expected, got {value!r}"
    return f"{where}: {_name(hint)} expected, got {type(value).__name__}"


def _record_misfit(record: Record) -> str | None:
    """What keeps a contract record from reading back from its own JSON, or None."""
    try:
        type(record).from_json(record.to_json())
    except ReportError as exc:
        return str(exc)
    return None


def _name(hint: Any) -> str:
    text = str(hint) if get_origin(hint) else getattr(hint, "__name__", str(hint))
    return text.replace("collections.abc.", "").replace("typing.", "").replace("NoneType", "None")


def _not_json(value: Any, where: str) -> str | None:
    """Where inside ``value`` (a field's JSON form) something is not JSON, or None."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where}: key {key!r} is not a str"
            found = _not_json(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _not_json(item, f"{where}[{i}]")
            if found:
                return found
        return None
    if value is None or isinstance(value, str | int | float):  # to_json made NaN null
        return None
    return f"{where}: {type(value).__name__} is not JSON (use a number, str, list or dict)"


def check_result(result: object, agent: str = "the plugin") -> TrainResult:
    """``result`` when it is a :class:`TrainResult` whose fields hold their declared types
    and whose ``to_json()`` is JSON; else :class:`TrainResultError` naming the first bad
    field. ``agent`` names the plugin in the message."""
    if not isinstance(result, TrainResult):
        kind = type(result).__name__
        raise TrainResultError(f"{agent}'s train() returned a {kind}, not a TrainResult")
    hints = get_type_hints(TrainResult)
    for field in fields(TrainResult):
        value = getattr(result, field.name)
        found = _misfit(value, hints[field.name], f"TrainResult.{field.name}")
        if found:
            if type(value).__name__ == "PrecisionRequest":
                found += "; report request.precision.requested (plugin API 2)"
            raise TrainResultError(f"{agent}'s {found}")
    out = result.to_json()
    for name, value in out.items():
        found = _not_json(value, f"TrainResult.{name}")
        if found:
            raise TrainResultError(f"{agent}'s {found}")
    json.dumps(out, allow_nan=False)  # what train --json does: cannot fail now
    return result
