"""The read's fast path: a record's JSON bytes straight to a typed msgspec struct, no
dict (``data.readers``' module docstring says why, and how the slow path decides what
this one refuses).

:data:`_Record` holds every field of both shapes (``schema.Trajectory``,
``schema.ReplayRecord``) with their types, bounds and defaults, made from the pydantic
models (:func:`_fast_struct`): the schema declares each field once. :func:`decode_record`
and :func:`_vouched` read one record, :func:`_settled` gives a decoded one its id and its
shape's defaults, and :func:`_utf8` says whether bytes are UTF-8 throughout (msgspec
skips a field it does not name unread).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from types import GenericAlias, NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec
from pydantic import BaseModel

from genesis_fp16_infrastructure.data.file_records import FileRecord
from genesis_fp16_infrastructure.data.schema import (
    ReplayRecord,
    Trajectory,
    derive_label,
    replay_input,
    trajectory_input,
)

_REPLAY_KEYS = frozenset({"final_outcome", "agent_id", "steps", "reward", "task_description"})


def _labelled(record: Any, replay: bool, thresholds: tuple[float, float]) -> FileRecord:
    """A valid record, a schema model or the fast path's struct of the same fields, as a
    read keeps it: its pre-attempt input, its label and its recorded score."""
    if replay:  # labelled by its final outcome and reward
        attempt = replay_input(record, [step.tool_name for step in record.steps])
        word, score = record.final_outcome, record.reward
    else:  # by its status word and success score
        attempt = trajectory_input(record)
        word, score = record.status, record.success_score
    return FileRecord(record.trajectory_id, attempt, derive_label(word, score, *thresholds), score)


# The fast path: a record's JSON bytes straight to a typed struct (see the module docstring).
def _fast_struct(name: str, *models: type[BaseModel], unset: frozenset[str] = frozenset()) -> Any:
    """The fields of ``models`` (the first model's where two share a name) as one msgspec
    struct, with the same types, bounds and defaults, a nested model as a struct of its
    own: the schema declares each field once, and the fast path reads what it declares.
    A field named in ``unset`` is UNSET when absent (the fields that decide the shape)."""
    fields: dict[str, tuple[str, Any, Any]] = {}
    for model in models:
        for field, info in model.model_fields.items():
            kind = _fast_type(info.annotation, info.metadata)
            if field in unset:
                kind, default = kind | msgspec.UnsetType, msgspec.UNSET
            else:  # a new empty list or dict: msgspec copies it for each record
                default = info.get_default(call_default_factory=True)
            fields.setdefault(field, (field, kind, default))
    return msgspec.defstruct(name, list(fields.values()))


def _fast_type(kind: Any, metadata: list[Any]) -> Any:
    """A pydantic field's type as msgspec reads it: its bounds (annotated_types' ``Ge``,
    ``Le``, ``MinLen``) as a ``msgspec.Meta`` on the type itself, or on each member of a
    union but None; a model, or a list of them, as its struct."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return _fast_struct(kind.__name__, kind)
    if get_origin(kind) in (Union, UnionType):
        return functools.reduce(operator.or_, [_fast_type(a, metadata) for a in get_args(kind)])
    if get_origin(kind) is list:
        return GenericAlias(list, _fast_type(get_args(kind)[0], []))
    bounds = {k: v for bound in metadata for k, v in dataclasses.asdict(bound).items()}
    return Annotated[kind, msgspec.Meta(**bounds)] if bounds and kind is not NoneType else kind


# Every field of both shapes (schema.Trajectory, schema.ReplayRecord); the shape is replay
# when the record has no operator_applied and any of _REPLAY_KEYS.
_Record = _fast_struct(
    "_Record", Trajectory, ReplayRecord, unset=_REPLAY_KEYS | {"trajectory_id", "operator_applied"}
)
_DECODER = msgspec.json.Decoder(_Record)
_BATCH_DECODER = msgspec.json.Decoder(list[_Record])  # type: ignore[valid-type]
_VALUES_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


def decode_record(
    raw: bytes | msgspec.Raw, thresholds: tuple[float, float], key: str | None = None
) -> FileRecord | None:
    """The record in ``raw`` (one JSON object's bytes), or None when the fast path cannot
    vouch for it and the slow path must decide. ``key``: the id a pool maps it under,
    used when the record names none."""
    fast = _vouched(raw, key)
    return None if fast is None else _labelled(*fast, thresholds)


def _vouched(raw: Any, key: str | None) -> tuple[Any, bool] | None:
    """``raw`` as the fast path reads it, (its struct, whether it is a replay record),
    or None when the fast path cannot vouch for it. ``raw``: a record's JSON bytes, a
    struct ``sources`` decoded with its document (vouched there), or an object the
    slow split parsed (never vouched for)."""
    if isinstance(raw, _Record):
        return _settled(raw, key)
    if not isinstance(raw, bytes | msgspec.Raw) or not _utf8(raw):
        return None  # the slow path quarantines it: "binary line, not UTF-8 text (...)"
    try:
        record = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        # ValueError: msgspec's UnicodeDecodeError for bytes that are not UTF-8
        return None
    return _settled(record, key)


def _settled(record: Any, key: str | None) -> tuple[Any, bool] | None:
    """The decoded ``record`` with its id (``key`` when it names none) and its shape's
    defaults set, and whether it is a replay record; None without an id."""
    if record.trajectory_id is msgspec.UNSET:
        if not key:
            return None  # no id at all, or an empty key: the slow path's reason
        record.trajectory_id = key
    # The shape as _validate decides it; a field of that shape left UNSET takes its default.
    replay = record.operator_applied is msgspec.UNSET and any(
        getattr(record, name) is not msgspec.UNSET for name in _REPLAY_KEYS
    )
    model = ReplayRecord if replay else Trajectory
    for name in _REPLAY_KEYS if replay else ("operator_applied",):
        if getattr(record, name) is msgspec.UNSET:
            setattr(record, name, model.model_fields[name].get_default(call_default_factory=True))
    return record, replay


def _utf8(raw: bytes | msgspec.Raw) -> bool:
    """Whether ``raw`` is UTF-8 throughout. msgspec checks the text it decodes, but skips
    a field the struct does not name unread: a key or value of bytes that are not UTF-8
    there would keep the record (issue 92). ASCII (nearly every record) is a scan with no
    copy; anything else is decoded once."""
    data = raw if isinstance(raw, bytes) else bytes(raw)
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
