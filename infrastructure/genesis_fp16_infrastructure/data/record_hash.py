"""A labelled record's hash: its id, its label and every field of its attempt, in 64 bits.

The data fingerprint keeps it (``data.fingerprint``: whether a model trained on this very
record), the judged run names a record by it (``schema.judged_id``) and the kept encoded
rows are keyed by it (``world_model.kept_numeric``). The reader works it out once per
record and the block keeps it (``RecordBlock.key``).

Worked out a column at a time (issue 90: a read at its parser's speed): each field of
the attempt is hashed on its own, a value at a time where values repeat (an agent, an
operator, a tool list, a pattern, a strategy: once a distinct value), and a record's
fields are chained, in a fixed order, through splitmix64's finaliser
(:func:`fmix`, as ``world_model.content_keys`` chains its keys)::

    h = fmix(id_hash ^ TAG); for each part p: h = fmix(h ^ p)

* the id: ``schema.record_id_hash`` (blake2b of the id's text);
* the label: its outcome's index in ``schema.OUTCOMES`` (success is the outcome),
  whether it has a score and the score's float64 bits (0 without);
* the attempt: whether it is timed and ``created``'s float64 bits, ``generation``,
  each text or list field (agent, operator, change, files, strategy, diagnosis, tools,
  pattern) as the first 8 bytes of the blake2b of its msgpack encoding (a string and a
  list of strings never encode alike), and its parents: their count and the wrapped
  sum of each parent's id hash mixed with its place in the list.

``fmix`` is a bijection of 64-bit words, so two records that differ in one part always
hash apart; a record's hash is the same whichever path of the read made it (a batch's
columns, :func:`labelled_hashes`; one record's objects, :func:`labelled_hash`:
``tests/infrastructure/data/test_record_hash.py`` holds them to each other).

Version 3 of the fingerprint (``fingerprint.STATE_VERSION``). Version 2 hashed the text
``f"{id}\\0{success}\\0{score!r}\\0{outcome}\\0{attempt!r}"``, a repr per record that cost
more than msgspec's decode of it; a checkpoint's version-2 fingerprint counts as unknown
(its next run trains afresh once, and says why) and the record cache's entries of the
earlier version are read again (``record_cache.CACHE_VERSION``).

>>> from genesis_fp16_infrastructure.data.schema import AttemptInput, Label
>>> one = labelled_hash("t1", AttemptInput("t1", code_changes="+a"), Label(True, 0.9, "success"))
>>> one == labelled_hash("t1", AttemptInput("t1", code_changes="+b"), Label(True, 0.9, "success"))
False
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import numpy as np

from genesis_fp16_infrastructure.data.schema import OUTCOMES, record_id_hashes

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.data.schema import AttemptInput, Label

HASH_VERSION = 3  # the fingerprint's STATE_VERSION that holds these hashes
_TAG = np.uint64(0x6A09E667F3BCC908)  # a record hash's start, apart from an id hash's fmix
_MIX = np.uint64(0x9E3779B97F4A7C15)
_ENCODE = msgspec.msgpack.Encoder().encode
_blake2b = hashlib.blake2b
# The hashed fields of an attempt, in the chain's order (after the label and the time).
_VALUE_FIELDS = (
    "agent", "operator", "code_changes", "modified_files", "proposed_strategy",
    "problem_diagnosis", "tools_used", "reasoning_pattern",
)  # fmt: skip


class AttemptColumns(Protocol):
    """An attempt's fields as columns, a value per record (``batch_block.Batch``)."""

    @property
    def agent(self) -> Sequence[str]: ...
    @property
    def created(self) -> Sequence[float | None] | np.ndarray: ...
    @property
    def operator(self) -> Sequence[str]: ...
    @property
    def generation(self) -> Sequence[int]: ...
    @property
    def parent_ids(self) -> Sequence[tuple[str, ...]]: ...
    @property
    def code_changes(self) -> Sequence[str]: ...
    @property
    def modified_files(self) -> Sequence[tuple[str, ...]]: ...
    @property
    def proposed_strategy(self) -> Sequence[str]: ...
    @property
    def problem_diagnosis(self) -> Sequence[str]: ...
    @property
    def tools_used(self) -> Sequence[tuple[str, ...]]: ...
    @property
    def reasoning_pattern(self) -> Sequence[str]: ...


Coded = tuple[np.ndarray, list[Any]]  # a column's codes (intp) and its distinct values


def labelled_hashes(
    columns: AttemptColumns,
    id_hash: np.ndarray,
    outcome: np.ndarray,
    label_score: np.ndarray,
    parent_hash: np.ndarray | None = None,
    coded: dict[str, Coded] | None = None,
) -> np.ndarray:
    """Each record's hash (int64; 0 without a label): ``id_hash`` its id's
    (``schema.record_id_hashes``), ``outcome`` its label's index into ``OUTCOMES`` (-1:
    no label), ``label_score`` the label's score (nan: none); ``parent_hash`` each
    parent's id hash, back to back (worked out here when None); ``coded`` a column's
    codes and distinct values where the caller has them (each hashed once)."""
    n = len(outcome)
    labelled = outcome >= 0
    if not labelled.any():
        return np.zeros(n, np.int64)
    counts = np.fromiter(map(len, columns.parent_ids), np.int64, n)
    if parent_hash is None:
        parent_hash = record_id_hashes(p for ids in columns.parent_ids for p in ids)
    created = np.array(columns.created, "<f8").reshape(n)  # numpy reads None as nan
    timed = ~np.isnan(created)
    scored = ~np.isnan(label_score)
    parts = [
        outcome.astype(np.uint64),
        scored.astype(np.uint64),
        np.where(scored, label_score, 0.0).view(np.uint64),
        timed.astype(np.uint64),
        np.where(timed, created, 0.0).view(np.uint64),
        np.array(columns.generation, np.int64).reshape(n).view(np.uint64),
        counts.view(np.uint64),
        _parents_sum(parent_hash, counts),
    ]
    known = coded or {}
    for name in _VALUE_FIELDS:
        if name in known:
            parts.append(_values_hashed(*known[name]))
        elif name == "code_changes":  # nearly every change its own: no look-up of each
            parts.append(_digests(columns.code_changes))
        else:
            parts.append(_column_hashed(getattr(columns, name)))
    with np.errstate(over="ignore"):
        h = fmix(id_hash.astype(np.int64).view(np.uint64) ^ _TAG)
        for part in parts:
            h = fmix(h ^ part)
    return np.where(labelled, h.view(np.int64), 0)


def labelled_hash(trajectory_id: str, attempt: AttemptInput, label: Label) -> int:
    """One record's hash, as :func:`labelled_hashes` works it out for a batch."""
    columns = SimpleNamespace(**{name: [getattr(attempt, name)] for name in _ATTEMPT_FIELDS})
    outcome = np.array([OUTCOMES.index(label.outcome)], np.int8)
    score = np.array([np.nan if label.score is None else label.score], np.float64)
    return int(labelled_hashes(columns, record_id_hashes([trajectory_id]), outcome, score)[0])


_ATTEMPT_FIELDS = ("created", "generation", "parent_ids", *_VALUE_FIELDS)


def fmix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (uint64, wrapping;
    a bijection)."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(30))
        h = h * np.uint64(0xBF58476D1CE4E5B9)
        h = h ^ (h >> np.uint64(27))
        h = h * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def _parents_sum(parent_hash: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each record's parents (``counts`` of them each, back to back in ``parent_hash``)
    as the wrapped sum of each one's id hash mixed with its place in the list."""
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    place = np.arange(len(parent_hash), dtype=np.int64) - np.repeat(starts[:-1], counts)
    with np.errstate(over="ignore"):
        mixed = fmix(parent_hash.astype(np.int64).view(np.uint64) ^ (place.view(np.uint64) * _MIX))
    total = np.zeros(len(parent_hash) + 1, np.uint64)
    np.cumsum(mixed, out=total[1:])
    return total[starts[1:]] - total[starts[:-1]]


def _values_hashed(codes: np.ndarray, distinct: Sequence[Any]) -> np.ndarray:
    """A coded column's values hashed, a distinct value at a time."""
    return _digests(distinct)[codes]


def _column_hashed(column: Sequence[Any]) -> np.ndarray:
    """Each value's hash, a distinct value at a time (``dict.fromkeys``)."""
    index = {value: code for code, value in enumerate(dict.fromkeys(column))}
    codes = np.fromiter(map(index.__getitem__, column), np.intp, len(column))
    return _digests(list(index))[codes]


def _digests(values: Sequence[Any]) -> np.ndarray:
    """The first 8 bytes of each value's msgpack encoding's blake2b, as uint64."""
    b2, encode = _blake2b, _ENCODE
    joined = b"".join([b2(encode(v), digest_size=8).digest() for v in values])
    return np.frombuffer(joined, "<u8")
