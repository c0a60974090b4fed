"""What a read makes of a file's records.

:class:`FileRecord` is one valid record as a parse makes it (either path of
``data.readers``), :class:`Rejected` one quarantined entry, :class:`BlockWriter` writes
each parsed record into the columns of a :class:`RecordBlock`, a file's records as
columns (what the record cache keeps and a read joins into its
``data.pool_columns.PoolColumns``), and :class:`Head` what the record cache holds of a
file (``data.record_cache.RecordCache.load``).

And :func:`own_numbers`, an attempt's own record in numbers (change, files, words, tools;
named by ``OWN_FEATURES``): the encoder's features that need no other record. They cost
most of a record's encoding and never change while the record does not, so the reader
works them out once and the block keeps them (``RecordBlock.own``, :func:`pack`).

>>> own_numbers(AttemptInput(code_changes="@@ -1 +1 @@\\n+ a\\n- b"))[:3]
(0.0, 0.0, 1.3862943611198906)
"""

from __future__ import annotations

import functools
import math
import struct
from array import array
from collections.abc import Hashable, Iterable, Sequence
from itertools import chain
from typing import Any, NamedTuple, TypeVar

import msgspec
import numpy as np

from genesis_fp16_infrastructure.data.schema import (
    OUTCOMES,
    AttemptInput,
    Label,
    id_digest,
    judged_id,
    labelled_hash,
    record_id_hashes,
)

_H = TypeVar("_H", bound=Hashable)

# Bump when a value below changes: cached numbers of another version are worked out again.
NUMBERS_VERSION = 1
OWN_FEATURES: tuple[str, ...] = (
    "log_generation", "parents", "log_change_lines", "log_change_chars", "log_modified_files",
    "log_strategy_words", "log_diagnosis_words", "tools", "added_share", "log_hunks",
    "log_distinct_files", "touches_tests", "touches_config", "touches_docs", "touches_code",
)  # fmt: skip
_PACKED = struct.Struct(f"<{len(OWN_FEATURES)}d")
_TEST_MARKS = ("test_", "tests/", "_test.", "/test/", "conftest")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".json", ".env")
_DOCS_SUFFIXES = (".md", ".rst", ".txt")
# str.splitlines also ends a line at these (and at three characters outside ASCII); a
# diff holding none of them (nearly every one) has its lines counted by str.count instead
# of split one by one. Looked for one by one with `in`: a regex's character class took
# 2.5 µs a 400-character diff, half of the numbers' cost (tests/infrastructure/data/
# test_attempt_numbers.py holds the counts to the line-by-line ones).
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


class FileRecord(msgspec.Struct, frozen=True):
    """One valid record of a file, as either path of a parse makes it
    (``data.readers``): its pre-attempt input, its label (None: unfinished or
    unlabelled) and its recorded score."""

    trajectory_id: str
    attempt: AttemptInput
    label: Label | None
    score: float | None


class Rejected(msgspec.Struct, frozen=True, array_like=True):
    """One quarantined entry of a file, as written to the quarantine file (a block
    stores it as the array ``[where, reason, text]``)."""

    where: str
    reason: str
    text: str


OWN_BYTES = 8 * len(OWN_FEATURES)  # a record's packed own numbers (pack)
_CODE = "<i4"  # a coded column's codes, little-endian int32, back to back


class RecordBlock(msgspec.Struct):
    """A file's valid records as columns, in file order, and its quarantined entries:
    what the record cache stores and what a read joins into its pool
    (``data.pool_join.collect``), with no object per record (issue 36).

    A column a file repeats (agent, operator, tools, pattern) is coded: int32 codes into
    the list of its distinct values, so that a million records hold a few dozen strings.
    A record's parents are back to back in ``parent_ids``, ``parent_counts`` of them each,
    with each one's ``schema.record_id_hash`` in ``parent_hash``. A label is
    ``success`` (-1: unfinished or unlabelled, 0, 1), ``label_score`` and ``outcome`` (an
    index into ``schema.OUTCOMES``, -1 without a label).

    Numbers and flags are little-endian bytes, one value per record back to back, so that
    decoding a stored block makes no object per record and a read joins them with
    ``np.frombuffer``. An optional number is two columns: the value (nan where there is
    none) and a mask (one byte, 1 where there is one), so that None stays distinct from a
    stored nan."""

    trajectory_id: list[str]
    agent: bytes
    agents: list[str]
    created: bytes  # <f8 per record, nan where untimed
    timed: bytes  # a byte per record: 1 where created is not None
    operator: bytes
    operators: list[str]
    generation: bytes  # <i8 per record
    parent_ids: list[str]
    parent_hash: bytes  # <i8 per parent: data.schema.record_id_hash of parent_ids
    parent_counts: bytes
    code_changes: list[str]
    modified_files: list[tuple[str, ...]]
    proposed_strategy: list[str]
    problem_diagnosis: list[str]
    tools_used: bytes
    tool_lists: list[tuple[str, ...]]
    reasoning_pattern: bytes
    patterns: list[str]
    own: bytes  # every record's AttemptInput.own, OWN_BYTES each, back to back
    success: bytes  # <i1 per record: -1 no label, 0 failed, 1 succeeded
    label_score: bytes  # <f8 per record, nan where none
    label_scored: bytes  # a byte per record: 1 where the label has a score
    outcome: bytes  # <i1 per record
    score: bytes  # <f8 per record: the recorded success score (a parent's, for lineage)
    scored: bytes  # a byte per record: 1 where score is not None
    key: bytes  # <i8 per record: data.schema.labelled_hash of a labelled record, else 0
    id_key: bytes  # <i8 per record: data.schema.record_id_hash of its id
    judged: bytes  # 8 per record: a labelled one's schema.id_digest of its judged_id
    rejected: list[Rejected]  # as quarantined
    version: str = ""  # the record cache's CACHE_VERSION, when stored

    def __len__(self) -> int:
        return len(self.trajectory_id)

    def check(self) -> None:
        """ValueError unless every column has a value per record, every code names a
        value and every flag is 0 or 1 (a damaged cache entry)."""
        n = len(self.trajectory_id)
        sized = {len(getattr(self, name)) for name in TEXT_FIELDS}
        sized |= {_count(getattr(self, name), width) for name, width in _WIDTHS.items()}
        if sized != {n} or _count(self.parent_hash, 8) != len(self.parent_ids):
            raise ValueError("the block's columns differ in length")
        if int(np.frombuffer(self.parent_counts, _CODE).sum()) != len(self.parent_ids):
            raise ValueError("the block's columns differ in length")
        for codes, values in self.coded():
            if n and not 0 <= int(codes.min()) <= int(codes.max()) < len(values):
                raise ValueError("the block's codes name no value")
        success = np.frombuffer(self.success, np.int8)
        outcome = np.frombuffer(self.outcome, np.int8)
        flags = np.frombuffer(self.timed + self.scored + self.label_scored, np.uint8)
        if (
            (n and not -1 <= int(success.min()) <= int(success.max()) <= 1)
            or (n and not -1 <= int(outcome.min()) <= int(outcome.max()) < len(OUTCOMES))
            or ((success < 0) != (outcome < 0)).any()
            or (flags > 1).any()
        ):
            raise ValueError("the block's codes name no value")

    def coded(self) -> list[tuple[np.ndarray, list[Any]]]:
        """(codes, values) of the agent, operator, tools and pattern columns."""
        return [
            (np.frombuffer(self.agent, _CODE), self.agents),
            (np.frombuffer(self.operator, _CODE), self.operators),
            (np.frombuffer(self.tools_used, _CODE), self.tool_lists),
            (np.frombuffer(self.reasoning_pattern, _CODE), self.patterns),
        ]

    @classmethod
    def concat(cls, blocks: Sequence[RecordBlock]) -> RecordBlock:
        """The records of ``blocks``, one block after another, as one block: a large
        file parsed a chunk at a time, an appended file's head and its new lines. A coded
        column is coded again: each block's codes are mapped into the distinct values in
        first-seen order, a lookup per distinct value, not per record."""
        if len(blocks) == 1:
            return blocks[0]
        columns: dict[str, Any] = {
            name: list(chain.from_iterable(getattr(b, name) for b in blocks)) for name in _LISTS
        }
        columns.update({name: b"".join(getattr(b, name) for b in blocks) for name in _BYTES})
        by_block = zip(*(b.coded() for b in blocks), strict=True)  # each block's decoded once
        for (name, values), parts in zip(_CODED, by_block, strict=True):
            codes, distinct = joined_codes(parts)
            columns[name], columns[values] = codes.astype(_CODE).tobytes(), distinct
        return cls(**columns, version=blocks[0].version)


class BlockWriter:
    """A file's records written into a :class:`RecordBlock`'s columns as the read parses
    them, one record at a time, nothing of it kept as an object: its own numbers and
    hashes are worked out while its text is here, its repeated values coded as they come
    (the block holds each distinct agent, operator, tool list and pattern once).
    ``keep_text=False`` (a read for training only) writes no change, files, strategy or
    diagnosis: their columns hold empty values.

    >>> writer = BlockWriter(keep_text=False)
    >>> writer.add(FileRecord("t1", AttemptInput("t1", code_changes="+a"), None, None))
    >>> block = writer.block([])
    >>> len(block), block.code_changes
    (1, [''])
    """

    def __init__(self, keep_text: bool) -> None:
        self.keep_text = keep_text
        self.ids: list[str] = []
        self.created: list[float | None] = []
        self.generation: list[int] = []
        self.parents: list[tuple[str, ...]] = []
        self.text: tuple[list[Any], ...] = ([], [], [], [])  # TEXT_FIELDS' columns
        # _CODED's columns: each record's code, and the distinct values by code
        self.codes = (array("i"), array("i"), array("i"), array("i"))
        self.distinct: tuple[dict[Any, int], ...] = ({}, {}, {}, {})
        # OWN_FEATURES of each record, back to back: 8 bytes a number, where a list of
        # floats holds 32 (47 MB more for the reader's block of 131,072 records)
        self.own = array("d")
        self.score: list[float | None] = []
        self.success = array("b")
        self.outcome = array("b")
        self.label_score: list[float | None] = []
        self.key: list[int] = []
        self.judged: list[bytes] = []

    def add(self, record: FileRecord) -> None:
        """Write one record into the columns."""
        trajectory_id, attempt, label = record.trajectory_id, record.attempt, record.label
        self.ids.append(trajectory_id)
        self.created.append(attempt.created)
        self.generation.append(attempt.generation)
        self.parents.append(attempt.parent_ids)
        if self.keep_text:
            text = (
                attempt.code_changes, attempt.modified_files, attempt.proposed_strategy,
                attempt.problem_diagnosis,
            )  # fmt: skip
        else:
            text = NO_TEXT
        for column, value in zip(self.text, text, strict=True):
            column.append(value)
        coded = (attempt.agent, attempt.operator, attempt.tools_used, attempt.reasoning_pattern)
        for codes, index, value in zip(self.codes, self.distinct, coded, strict=True):
            codes.append(index.setdefault(value, len(index)))
        self.own.extend(own_numbers(attempt))
        self.score.append(record.score)
        if label is None:
            self.success.append(-1)
            self.outcome.append(-1)
            self.label_score.append(None)
            self.key.append(0)
            self.judged.append(bytes(8))
        else:
            key = labelled_hash(trajectory_id, attempt, label)
            self.success.append(label.success)
            self.outcome.append(_OUTCOME[label.outcome])
            self.label_score.append(label.score)
            self.key.append(key)
            self.judged.append(id_digest(judged_id(trajectory_id, key)))

    def block(self, rejected: list[Rejected]) -> RecordBlock:
        """The records written so far, in their order, and the file's quarantined entries."""
        parent_ids = list(chain.from_iterable(self.parents))
        columns: dict[str, Any] = dict(zip(TEXT_FIELDS, self.text, strict=True))
        for (name, values), codes, distinct in zip(_CODED, self.codes, self.distinct, strict=True):
            columns[name], columns[values] = codes.tobytes(), list(distinct)
        columns["created"], columns["timed"] = _optional(self.created)
        columns["score"], columns["scored"] = _optional(self.score)
        columns["label_score"], columns["label_scored"] = _optional(self.label_score)
        return RecordBlock(
            trajectory_id=self.ids,
            generation=_int64s(self.generation),
            parent_ids=parent_ids,
            parent_hash=_int64s(record_id_hashes(parent_ids)),
            parent_counts=array("i", map(len, self.parents)).tobytes(),
            own=np.array(self.own, dtype="<f8").tobytes(),  # little-endian, as stored
            success=self.success.tobytes(),
            outcome=self.outcome.tobytes(),
            key=_int64s(self.key),
            id_key=_int64s(record_id_hashes(self.ids)),
            judged=b"".join(self.judged),
            rejected=rejected,
            **columns,
        )


_LISTS = (
    "trajectory_id", "parent_ids", "code_changes", "modified_files", "proposed_strategy",
    "problem_diagnosis", "rejected",
)  # fmt: skip
# Each bytes column of one value per record, and its value's width in bytes.
_WIDTHS = {
    "agent": 4, "created": 8, "timed": 1, "operator": 4, "generation": 8, "parent_counts": 4,
    "tools_used": 4, "reasoning_pattern": 4, "own": OWN_BYTES, "success": 1,
    "label_score": 8, "label_scored": 1, "outcome": 1, "score": 8, "scored": 1, "key": 8,
    "id_key": 8, "judged": 8,
}  # fmt: skip
_CODED = (
    ("agent", "agents"), ("operator", "operators"), ("tools_used", "tool_lists"),
    ("reasoning_pattern", "patterns"),
)  # fmt: skip
# concat() joins these as they are; the coded columns it codes again.
_BYTES = ("parent_hash", *(name for name in _WIDTHS if name not in dict(_CODED)))
_OUTCOME = {name: i for i, name in enumerate(OUTCOMES)}
# An attempt's text fields, and what a read that keeps no text holds in their place.
TEXT_FIELDS = ("code_changes", "modified_files", "proposed_strategy", "problem_diagnosis")
NO_TEXT: tuple[Any, ...] = ("", (), "", "")


def joined_codes(parts: Iterable[tuple[np.ndarray, list[_H]]]) -> tuple[np.ndarray, list[_H]]:
    """Coded columns (each part's codes into its own distinct values, in first-seen
    order) one after another, as one: int64 codes into one list of the distinct values,
    in first-seen order, mapped a distinct value at a time, not a record at a time. How
    every coded column is coded (a block's, a read's, the encoder's)."""
    index: dict[_H, int] = {}
    joined = [np.zeros(0, np.int64)]
    for codes, values in parts:
        moved = np.array([index.setdefault(v, len(index)) for v in values], np.int64)
        joined.append(moved.reshape(len(values))[codes])
    return np.concatenate(joined), list(index)


def _count(column: bytes, width: int) -> int:
    """How many values of ``width`` bytes ``column`` holds; -1 for a partial one."""
    count, rest = divmod(len(column), width)
    return -1 if rest else count


def _optional(values: list[float | None]) -> tuple[bytes, bytes]:
    """An optional number column as its values (<f8, nan for None) and its mask."""
    numbers = np.array(values, dtype="<f8")  # numpy reads None as nan
    mask = np.array([v is not None for v in values], dtype=np.bool_)
    return numbers.reshape(len(values)).tobytes(), mask.reshape(len(values)).tobytes()


def _int64s(values: Sequence[int] | np.ndarray) -> bytes:
    return np.array(values, dtype="<i8").reshape(len(values)).tobytes()


class Head(NamedTuple):
    """What the record cache holds of a file: all its records (``offset`` None), or an
    appended file's stored head and where its new lines begin."""

    block: RecordBlock
    offset: int | None  # bytes of the head: the new lines start here
    lines: int  # lines of the head: the first new line is number lines + 1


def own_numbers(attempt: AttemptInput) -> tuple[float, ...]:
    """The attempt's ``OWN_FEATURES``, in that order."""
    diff = attempt.code_changes
    lines = diff.count("\n") + 1 if diff else 0
    added_share, hunks = change_shape(diff)
    kinds = {_kind(name) for name in attempt.modified_files}
    return (
        math.log1p(attempt.generation),
        float(len(attempt.parent_ids)),
        math.log1p(lines),
        math.log1p(len(diff)),
        math.log1p(len(attempt.modified_files)),
        math.log1p(len(attempt.proposed_strategy.split())),
        math.log1p(len(attempt.problem_diagnosis.split())),
        float(len(set(attempt.tools_used))),
        added_share,
        math.log1p(hunks),
        math.log1p(len(set(attempt.modified_files))),
        # whether the change touches tests, configuration, docs, other code (1.0 or 0.0)
        *(float(kind in kinds) for kind in ("test", "config", "docs", "code")),
    )


def pack(numbers: Sequence[float]) -> bytes:
    """``own_numbers`` as little-endian float64 bytes (120 bytes; a tuple of floats held
    per record costs five times that)."""
    return _PACKED.pack(*numbers)


def change_shape(diff: str) -> tuple[float, float]:
    """(share of added among added and removed lines, 0.5 when neither; number of hunks).

    A line starting ``@@`` opens a hunk; ``+`` (not ``+++``) is added, ``-`` (not
    ``---``) removed. Counted with ``str.count`` on the line starts when the diff's only
    line break is ``\\n`` (the same counts, without a Python loop over its lines)."""
    r, vt, ff, fs, gs, rs = _OTHER_BREAKS
    if diff.isascii() and not (
        r in diff or vt in diff or ff in diff or fs in diff or gs in diff or rs in diff
    ):
        text = "\n" + diff
        hunks = text.count("\n@@")
        added = text.count("\n+") - text.count("\n+++")
        removed = text.count("\n-") - text.count("\n---")
    else:
        added = removed = hunks = 0
        for line in diff.splitlines():
            if line.startswith("@@"):
                hunks += 1
            elif line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
    share = added / (added + removed) if added + removed else 0.5
    return share, float(hunks)


@functools.lru_cache(maxsize=2**16)  # a repository's files recur across its attempts
def _kind(name: str) -> str:
    lower = name.lower()
    if any(mark in lower for mark in _TEST_MARKS):
        return "test"
    if lower.endswith(_CONFIG_SUFFIXES):
        return "config"
    if lower.endswith(_DOCS_SUFFIXES):
        return "docs"
    return "code"
