"""What a read makes of a file's records.

:class:`FileRecord` is one valid record as a parse makes it, :class:`Rejected` one
quarantined entry, :class:`RecordBlock` a file's records as columns (what the record
cache keeps and a read joins into its ``data.pool_columns.PoolColumns``), :class:`Head`
what an appended ``.jsonl`` file's stored records hold, and :class:`FileCache` where a
read finds a file's records from an earlier read (``data.record_cache`` is one).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import msgspec
import numpy as np

from genesis_fp16_infrastructure.data.attempt_numbers import OWN_FEATURES, own_numbers, pack
from genesis_fp16_infrastructure.data.record_key import record_id_hash
from genesis_fp16_infrastructure.data.schema import OUTCOMES, AttemptInput, Label

_H = TypeVar("_H", bound=Hashable)


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One valid record of a file, as the rest of a read needs it: its pre-attempt input,
    its label (None: unfinished or unlabelled) and its recorded score."""

    trajectory_id: str
    attempt: AttemptInput
    label: Label | None
    score: float | None
    # data.record_key.record_hash of the labelled record, worked out while its text was
    # there (None: unlabelled, in no fingerprint)
    key: int | None = None
    id_key: int | None = None  # data.record_key.record_id_hash of trajectory_id


@dataclass(frozen=True, slots=True)
class Rejected:
    """One quarantined entry of a file, as written to the quarantine file."""

    where: str
    reason: str
    text: str


OWN_BYTES = 8 * len(OWN_FEATURES)  # a record's packed own numbers (attempt_numbers.pack)
_CODE = "<i4"  # a coded column's codes, little-endian int32, back to back


class RecordBlock(msgspec.Struct):
    """A file's valid records as columns, in file order, and its quarantined entries:
    what the record cache stores and what a read joins into its pool
    (``data.pool_columns.collect``), with no object per record (issue 36).

    A column a file repeats (agent, operator, tools, pattern) is coded: int32 codes into
    the list of its distinct values, so that a million records hold a few dozen strings.
    A record's parents are back to back in ``parent_ids``, ``parent_counts`` of them each.
    A label is ``success`` (None: unfinished or unlabelled), ``label_score`` and
    ``outcome`` (an index into ``schema.OUTCOMES``, -1 without a label)."""

    trajectory_id: list[str]
    agent: bytes
    agents: list[str]
    created: list[float | None]
    operator: bytes
    operators: list[str]
    generation: list[int]
    parent_ids: list[str]
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
    success: list[bool | None]
    label_score: list[float | None]
    outcome: bytes  # int8 per record
    score: list[float | None]  # the recorded success score (a parent's, for lineage)
    key: bytes  # <i8 per record: data.record_key.record_hash of a labelled record, else 0
    id_key: bytes  # <i8 per record: data.record_key.record_id_hash of its id
    rejected: list[tuple[str, str, str]]  # (where, reason, text) as quarantined
    version: str = ""  # the record cache's CACHE_VERSION, when stored

    @classmethod
    def of(cls, records: list[FileRecord], rejected: list[Rejected]) -> RecordBlock:
        """The block of parsed records, in their order."""
        attempts = [r.attempt for r in records]
        own = (a.own if len(a.own) == OWN_BYTES else pack(own_numbers(a)) for a in attempts)
        labels = [r.label for r in records]
        outcome = array("b", [-1 if x is None else _OUTCOME[x.outcome] for x in labels])
        parents = [a.parent_ids for a in attempts]
        agent, agents = _coded(_column(attempts, "agent"))
        operator, operators = _coded(_column(attempts, "operator"))
        tools, tool_lists = _coded(_column(attempts, "tools_used"))
        pattern, patterns = _coded(_column(attempts, "reasoning_pattern"))
        return cls(
            trajectory_id=_column(records, "trajectory_id"),
            agent=agent,
            agents=agents,
            created=_column(attempts, "created"),
            operator=operator,
            operators=operators,
            generation=_column(attempts, "generation"),
            parent_ids=list(chain.from_iterable(parents)),
            parent_counts=array("i", map(len, parents)).tobytes(),
            code_changes=_column(attempts, "code_changes"),
            modified_files=_column(attempts, "modified_files"),
            proposed_strategy=_column(attempts, "proposed_strategy"),
            problem_diagnosis=_column(attempts, "problem_diagnosis"),
            tools_used=tools,
            tool_lists=tool_lists,
            reasoning_pattern=pattern,
            patterns=patterns,
            own=b"".join(own),
            success=[None if x is None else x.success for x in labels],
            label_score=[None if x is None else x.score for x in labels],
            outcome=outcome.tobytes(),
            score=_column(records, "score"),
            key=_int64s([0 if r.key is None else r.key for r in records]),
            id_key=_int64s([_id_key(r) for r in records]),
            rejected=[(e.where, e.reason, e.text) for e in rejected],
        )

    @property
    def rejected_entries(self) -> list[Rejected]:
        return [Rejected(*e) for e in self.rejected]

    def __len__(self) -> int:
        return len(self.trajectory_id)

    def check(self) -> None:
        """ValueError unless every column has a value per record and every code names a
        value (a damaged cache entry)."""
        n = len(self.trajectory_id)
        lists = (
            self.created, self.generation, self.code_changes, self.modified_files,
            self.proposed_strategy, self.problem_diagnosis, self.success, self.label_score,
            self.score,
        )  # fmt: skip
        sized = {len(x) for x in lists} | {len(self.outcome)}
        sized |= {len(x) // 4 for x in (self.agent, self.operator, self.tools_used)}
        sized |= {len(self.reasoning_pattern) // 4, len(self.parent_counts) // 4}
        sized |= {len(self.key) // 8, len(self.id_key) // 8, len(self.own) // OWN_BYTES}
        if sized != {n} or int(self.parent_count_array().sum()) != len(self.parent_ids):
            raise ValueError("the block's columns differ in length")
        for codes, values in self.coded():
            if n and not 0 <= int(codes.min()) <= int(codes.max()) < len(values):
                raise ValueError("the block's codes name no value")

    def coded(self) -> list[tuple[np.ndarray, list[Any]]]:
        """(codes, values) of the agent, operator, tools and pattern columns."""
        return [
            (np.frombuffer(self.agent, _CODE), self.agents),
            (np.frombuffer(self.operator, _CODE), self.operators),
            (np.frombuffer(self.tools_used, _CODE), self.tool_lists),
            (np.frombuffer(self.reasoning_pattern, _CODE), self.patterns),
        ]

    def parent_count_array(self) -> np.ndarray:
        return np.frombuffer(self.parent_counts, _CODE)

    def joined(self, more: RecordBlock) -> RecordBlock:
        """This block's records, then ``more``'s (an appended file's head and its new
        lines)."""
        columns: dict[str, Any] = {
            name: getattr(self, name) + getattr(more, name) for name in _LISTS + _BYTES
        }
        for name, values in _CODED:
            both = [
                [getattr(b, values)[c] for c in np.frombuffer(getattr(b, name), _CODE).tolist()]
                for b in (self, more)
            ]
            columns[name], columns[values] = _coded(both[0] + both[1])
        return RecordBlock(**columns, version=self.version)


_LISTS = (
    "trajectory_id", "created", "generation", "parent_ids", "code_changes", "modified_files",
    "proposed_strategy", "problem_diagnosis", "success", "label_score", "score", "rejected",
)  # fmt: skip
_BYTES = ("parent_counts", "own", "outcome", "key", "id_key")
_CODED = (
    ("agent", "agents"), ("operator", "operators"), ("tools_used", "tool_lists"),
    ("reasoning_pattern", "patterns"),
)  # fmt: skip
_OUTCOME = {name: i for i, name in enumerate(OUTCOMES)}


def _coded(values: list[_H]) -> tuple[bytes, list[_H]]:
    """Each value's code (int32 bytes) and the distinct values, in first-seen order."""
    index: dict[_H, int] = {}
    codes = array("i", [index.setdefault(v, len(index)) for v in values])
    return codes.tobytes(), list(index)


def _int64s(values: list[int]) -> bytes:
    return np.array(values, dtype="<i8").reshape(len(values)).tobytes()


def _id_key(record: FileRecord) -> int:
    return record_id_hash(record.trajectory_id) if record.id_key is None else record.id_key


def _column(items: list[Any], name: str) -> list[Any]:
    """Each item's ``name``, read in C."""
    return list(map(attrgetter(name), items))


class Head(NamedTuple):
    """What an appended file's stored head holds, and where its new lines begin."""

    block: RecordBlock
    offset: int  # bytes of the head: the new lines start here
    lines: int  # lines of the head: the first new line is number lines + 1


class FileCache(Protocol):
    """Where a read finds a file's records from an earlier read of the same bytes."""

    def load(self, file: Path, slim: bool) -> RecordBlock | None: ...

    def load_head(self, file: Path, slim: bool) -> Head | None:
        """An appended file's earlier records and where its new lines begin, or None."""

    def store(self, file: Path, block: RecordBlock, slim: bool) -> None: ...
