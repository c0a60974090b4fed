"""The trajectory schema (version 1): the two record shapes Genesis writes, and their labels.

Genesis writes two shapes of record:

* trajectory pools, one JSON object per agent with a ``trajectories`` mapping
  from id to :class:`Trajectory`;
* replay-buffer records, one :class:`ReplayRecord` per JSON line.

Both become :class:`Example` objects: an :class:`AttemptInput` (what was known before the
attempt ran, the only thing the feature encoder sees) and a :class:`Label` (the outcome).

How labels are derived (see :func:`derive_label`): the measured score decides when it is
present (``score >= success_threshold`` is a success, ``score < failure_threshold`` a
failure, anything between partial); the status word decides only when the score is
missing. Real pools hold records whose status disagrees with their score (status
``failure`` with ``success_score`` 0.68); the score is the measurement, while the status
is a word set by the agent's control flow, so the score wins. Pending and executing
records, pruned records without a score, and replay records with outcome ``unknown`` and
no reward have no label.

>>> t = Trajectory(trajectory_id="t1", status="failure", success_score=0.68)
>>> derive_label(t.status, t.success_score).outcome
'partial'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import repeat
from typing import Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

SUCCESS_THRESHOLD = 0.7
FAILURE_THRESHOLD = 0.3
# Far beyond any real evolution run; a larger generation is corrupt (10**400 overflows the
# encoder's float features) and is quarantined.
MAX_GENERATION = 10**9

Operator = Literal["baseline", "revision", "recombination", "refinement"]
OPERATORS: tuple[str, ...] = get_args(Operator)
Status = Literal["pending", "executing", "success", "partial_success", "failure", "pruned"]
UNFINISHED_STATUSES = frozenset({"pending", "executing"})

# Outcome classes, in the order of the world model's class head.
OUTCOMES: tuple[str, ...] = ("failure", "partial", "success")

# A trajectory's status word or a replay record's final outcome, when no score decides.
_WORD_OUTCOME = {
    "success": "success", "partial_success": "partial", "partial": "partial",
    "failure": "failure",
}  # fmt: skip


class _Record(BaseModel):
    # Real files carry fields we do not model; they are ignored, not errors.
    model_config = ConfigDict(extra="ignore", frozen=True)


class TestResults(_Record):
    __test__ = False  # not a pytest class, despite the name

    tasks_total: int | None = Field(default=None, ge=0)
    tasks_passed: int | None = Field(default=None, ge=0)
    tasks_failed: int | None = Field(default=None, ge=0)


class TrajectoryMetrics(_Record):
    accuracy: float | None = None
    speed: float | None = None
    robustness: float | None = None


class Trajectory(_Record):
    """One attempt of an evolving agent, as stored in a trajectory pool. Only the id is required."""

    # identity and lineage
    trajectory_id: str = Field(min_length=1)
    generation: int = Field(default=0, ge=0, le=MAX_GENERATION)
    agent_name: str = ""
    parent_trajectories: list[str] = Field(default_factory=list)
    plan_id: str | None = None
    # the attempt
    operator_applied: Operator = "baseline"
    code_changes: str = ""
    problem_diagnosis: str = ""
    proposed_strategy: str = ""
    code_after: str | None = None
    strategy_description: str = ""
    # the result (labels and post-hoc measurements: never features)
    status: Status = "pending"
    success_score: float | None = Field(default=None, ge=0.0, le=1.0)
    test_results: TestResults | None = None
    metrics: TrajectoryMetrics | None = None
    failure_reasons: list[str] = Field(default_factory=list)
    # context
    tools_used: list[str] = Field(default_factory=list)
    reasoning_pattern: str = ""
    key_insights: list[str] = Field(default_factory=list)
    assumptions_made: list[str] = Field(default_factory=list)
    modified_files: list[str] = Field(default_factory=list)
    # bookkeeping
    created_at: str | float | None = None
    execution_time_seconds: float | None = None
    cost_dollars: float | None = None

    def to_input(self) -> AttemptInput:
        """The pre-attempt view of this record: the encoder's only input."""
        return trajectory_input(self)


def trajectory_input(record: Trajectory) -> AttemptInput:
    """A trajectory's pre-attempt view: of a :class:`Trajectory`, or of the read's fast
    struct, which has its fields (``data.fast_records._fast_struct``)."""
    return AttemptInput(
        trajectory_id=record.trajectory_id,
        agent=record.agent_name,
        created=created_seconds(record.created_at),
        operator=record.operator_applied,
        generation=record.generation,
        # A record naming itself as parent would read its own score: dropped.
        parent_ids=tuple(p for p in record.parent_trajectories if p != record.trajectory_id),
        code_changes=record.code_changes,
        modified_files=tuple(record.modified_files),
        proposed_strategy=record.proposed_strategy,
        problem_diagnosis=record.problem_diagnosis,
        tools_used=tuple(record.tools_used),
        reasoning_pattern=record.reasoning_pattern,
    )


class TrajectoryPool(_Record):
    """The header of a ``trajectory_pool.json`` file; records are validated one by one."""

    agent_name: str = ""
    max_trajectories: int | None = None
    success_threshold: float = Field(default=SUCCESS_THRESHOLD, ge=0.0, le=1.0)
    failure_threshold: float = Field(default=FAILURE_THRESHOLD, ge=0.0, le=1.0)
    total_added: int | None = None
    total_pruned: int | None = None
    saved_at: str | float | None = None
    trajectories: dict[str, Any] = Field(default_factory=dict)


class ReplayStep(_Record):
    timestamp: str | float | None = None
    tool_name: str = ""
    tool_args: dict[str, Any] = Field(default_factory=dict)
    tool_result: Any = None
    agent_reasoning: str = ""


class ReplayRecord(_Record):
    """One replay-buffer line.

    Mapped to an attempt as: operator and generation from ``metadata`` (``baseline`` and
    0 when absent), the task description as the problem diagnosis, the distinct tool
    names of the steps as ``tools_used``; the reward is the score.
    """

    trajectory_id: str = Field(min_length=1)
    agent_id: str = ""
    task_description: str = ""
    initial_state: dict[str, Any] = Field(default_factory=dict)
    steps: list[ReplayStep] = Field(default_factory=list)
    final_outcome: Literal["success", "failure", "partial", "unknown"] = "unknown"
    reward: float | None = Field(default=None, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: str | float | None = None
    duration_seconds: float | None = None
    failure_rationale: str | None = None
    error_category: str | None = None
    fix_applied: str | None = None


def replay_input(record: ReplayRecord, tool_names: Sequence[str]) -> AttemptInput:
    """A replay record's pre-attempt view (:class:`ReplayRecord`, or the read's fast
    struct of its fields): ``tool_names`` are its steps' tools, in order."""
    metadata = record.metadata
    operator = metadata.get("operator_applied", "baseline")
    generation = metadata.get("generation", 0)
    return AttemptInput(
        trajectory_id=record.trajectory_id,
        agent=record.agent_id,
        created=created_seconds(record.created_at),
        operator=operator if operator in OPERATORS else "baseline",
        generation=generation
        if isinstance(generation, int) and 0 <= generation <= MAX_GENERATION
        else 0,
        parent_ids=tuple(
            str(p) for p in metadata.get("parent_trajectories", ()) if p != record.trajectory_id
        ),
        code_changes=str(metadata.get("code_changes", "")),
        modified_files=tuple(str(f) for f in metadata.get("modified_files", ())),
        proposed_strategy=str(metadata.get("proposed_strategy", "")),
        problem_diagnosis=record.task_description,
        tools_used=tuple(dict.fromkeys(name for name in tool_names if name)),
        reasoning_pattern=str(metadata.get("reasoning_pattern", "")),
    )


@dataclass(frozen=True, slots=True)
class AttemptInput:
    """What is known before an attempt runs. The feature encoder sees nothing else.

    ``trajectory_id`` and ``created`` place the attempt in its pool (its own id is never
    its relative; siblings count only when created before it); ``agent`` wrote it.
    """

    trajectory_id: str = ""
    agent: str = ""
    created: float | None = None  # seconds since the epoch; None when not recorded
    operator: str = "baseline"
    generation: int = 0
    parent_ids: tuple[str, ...] = ()
    code_changes: str = ""
    modified_files: tuple[str, ...] = ()
    proposed_strategy: str = ""
    problem_diagnosis: str = ""
    tools_used: tuple[str, ...] = ()
    reasoning_pattern: str = ""
    # The reader's packed ``data.file_records.own_numbers`` of this very object (b"":
    # not worked out). Not an init field, so ``dataclasses.replace`` never carries it to
    # an attempt with other values; no part of equality, repr or the data fingerprint.
    own: bytes = field(default=b"", init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Label:
    """The outcome of a finished attempt: the three targets of the world model."""

    success: bool
    score: float | None  # None when only the status word is known: no regression target
    outcome: str  # one of OUTCOMES


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled attempt: its id, its pre-attempt input and its label."""

    trajectory_id: str
    attempt: AttemptInput
    label: Label


def outcome_for_score(
    score: float,
    success_threshold: float = SUCCESS_THRESHOLD,
    failure_threshold: float = FAILURE_THRESHOLD,
) -> str:
    """``success`` at or above the success threshold, ``failure`` below the failure one."""
    if score >= success_threshold:
        return "success"
    if score < failure_threshold:
        return "failure"
    return "partial"


def derive_label(
    status: str,
    score: float | None,
    success_threshold: float = SUCCESS_THRESHOLD,
    failure_threshold: float = FAILURE_THRESHOLD,
) -> Label | None:
    """The label of a trajectory pool record (``status``: its status word) or of a replay
    record (its final outcome, ``score`` its reward), or None when it has none (see the
    module doc)."""
    if status in UNFINISHED_STATUSES:
        return None
    if score is not None:
        outcome = outcome_for_score(score, success_threshold, failure_threshold)
        return Label(success=outcome == "success", score=score, outcome=outcome)
    from_status = _WORD_OUTCOME.get(status)
    if from_status is None:  # pruned without a score, or unknown: the outcome is unknown
        return None
    return Label(success=from_status == "success", score=None, outcome=from_status)


# derive_label's outcome (an index into OUTCOMES) of each word when no score decides; -1:
# none (pruned, unknown), -2: never a label (unfinished, whatever its score).
_WORD_CODE = {word: OUTCOMES.index(outcome) for word, outcome in _WORD_OUTCOME.items()} | {
    word: -2 for word in UNFINISHED_STATUSES
}


def derive_outcomes(
    words: Sequence[str],
    scores: np.ndarray,
    success_threshold: float = SUCCESS_THRESHOLD,
    failure_threshold: float = FAILURE_THRESHOLD,
) -> np.ndarray:
    """:func:`derive_label`'s outcome of each record at once, as an index into
    ``OUTCOMES`` (int8; -1 where it gives no label): ``words`` their status words or final
    outcomes, ``scores`` their scores as float64 (nan where None; a score is never nan, the
    schema's bounds refuse it). The same comparisons in the same order, a column at a time.

    >>> derive_outcomes(["failure", "pending", "pruned"], np.array([0.68, 0.9, np.nan])).tolist()
    [1, -1, -1]
    """
    scored = ~np.isnan(scores)
    by_score = np.where(scores >= success_threshold, 2, np.where(scores < failure_threshold, 0, 1))
    by_word = np.fromiter(map(_WORD_CODE.get, words, repeat(-1)), np.int8, len(words))
    outcome = np.where(scored, by_score, by_word)
    return np.where(by_word == -2, -1, outcome).astype(np.int8).reshape(len(words))


def created_seconds(value: str | float | None) -> float | None:
    """A record's ``created_at`` as seconds since the epoch; None when absent or unreadable.

    >>> created_seconds("2025-01-06T09:00:00+00:00")
    1736154000.0
    """
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # a naive time is read as UTC
    return moment.timestamp()


# A record's identity for the data fingerprint: one 64-bit hash of its id, and one of its
# id, label and every field the encoder reads (torch-free: the reader works the second out
# once per record, when the record's text is still there, and the cache keeps it).


def record_id_hash(trajectory_id: str) -> int:
    """A record's id hash as the fingerprint keeps it in ``ids``: whether a model's pool
    held a record; the retrain recipe's folds and validation draw
    (genesis_fp16_infrastructure.recipes.retrain.split). The signed 64-bit blake2b of
    the text, :func:`id_digest` read as a number (:func:`labelled_hash` hashes a record's
    text with it)."""
    return int.from_bytes(id_digest(trajectory_id), "big", signed=True)


def judged_id(trajectory_id: str, key: int) -> str:
    """A labelled record's id as the judged run knows it: its trajectory id and its
    :func:`labelled_hash` ``key`` (a record relabelled or edited in place is a new one)."""
    return f"{trajectory_id}#{key & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def judged_ids_of(trajectory_ids: Sequence[str], keys: np.ndarray) -> list[str]:
    """:func:`judged_id` of each record (``keys``: their :func:`labelled_hash` values,
    int64), the same texts: a key's ``:016x`` of its unsigned value is its big-endian
    bytes in hex, so every key's hex is written at once and cut 16 digits a record (no
    call and no int format a record: 100,000 ids 39 ms against 81, benchmarks/judged_ids_cost.py).

    >>> judged_ids_of(["t1", "t2"], np.array([-1, 255]))
    ['t1#ffffffffffffffff', 't2#00000000000000ff']
    """
    hexed = np.asarray(keys, np.int64).astype(">u8").tobytes().hex()
    starts = range(0, len(hexed), 16)
    return [f"{tid}#{hexed[at : at + 16]}" for at, tid in zip(starts, trajectory_ids, strict=True)]


def id_digest(id_: str) -> bytes:
    """An id's 64-bit blake2b digest: the judged run's id hash (contract.split.id_hashes)."""
    return hashlib.blake2b(id_.encode("utf-8"), digest_size=8).digest()


def record_id_hashes(trajectory_ids: Iterable[str]) -> np.ndarray:
    """``record_id_hash`` of each id, as int64: the digests joined and read at once (a
    million ids: one pass of blake2b, no Python int each)."""
    return np.frombuffer(b"".join(map(id_digest, trajectory_ids)), ">i8").astype(np.int64)


def find_ids(
    ranked: np.ndarray, hashes: np.ndarray, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each of the id hashes ``hashes`` found in ``ranked`` (sorted, distinct): its row there
    (any row when absent) and whether it is there, searched in sorted order: a binary
    search of 100,000 unsorted ones took 28 ms, sorted (the sort included) 13 ms.

    ``order``: an order that sorts ``hashes``, kept from before (``judging.id_lookups.ranked``),
    so that they need no sort (a million: 0.1 s). It is checked before it is believed:
    every row taken once, the hashes in that order sorted; else they are sorted here.

    >>> ranked = np.array([2, 5, 9])
    >>> find_ids(ranked, np.array([9, 4]), order=np.array([1, 0]))[1].tolist()
    [True, False]
    """
    if not len(ranked):
        return np.zeros(len(hashes), np.intp), np.zeros(len(hashes), np.bool_)
    at = searched_in_order(ranked, hashes, order)
    if at is None:
        order = np.argsort(hashes)
        at = np.empty(len(hashes), np.intp)
        at[order] = np.searchsorted(ranked, hashes[order])
    np.minimum(at, len(ranked) - 1, out=at)
    return at, ranked[at] == hashes


def known(ids: np.ndarray, sorted_known: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Which of ``ids`` are in ``sorted_known`` (sorted, distinct): a boolean per id, as
    ``np.isin`` answers, searched as :func:`find_ids` does. ``order``: an order that sorts
    ``ids`` (``judging.id_lookups.ranked``'s), checked before it is believed.

    >>> known(np.array([7, 3]), np.array([3, 5])).tolist()
    [False, True]
    """
    return find_ids(sorted_known, ids, order)[1]


def searched_in_order(
    ranked: np.ndarray, hashes: np.ndarray, order: np.ndarray | None
) -> np.ndarray | None:
    """``hashes``' places in ``ranked`` (``np.searchsorted``'s), searched in the kept
    ``order``; None when there is none, or it does not sort ``hashes`` (another length,
    a row missed or taken twice, two hashes out of order): one pass over them, no sort."""
    n = len(hashes)
    if order is None or len(order) != n or order.dtype.kind not in "iu":
        return None
    if n and not (int(order.min()) >= 0 and int(order.max()) < n):
        return None
    ordered = hashes[order]
    if n > 1 and not bool((ordered[1:] >= ordered[:-1]).all()):
        return None
    at = np.full(n, -1, np.intp)
    at[order] = np.searchsorted(ranked, ordered)
    return at if n == 0 or bool((at >= 0).all()) else None  # a row missed: taken twice


def labelled_hash(trajectory_id: str, attempt: AttemptInput, label: Label) -> int:
    """A record's (id, label, attempt) hash as the fingerprint keeps it in ``labelled``:
    whether a model trained on this very record (drift, the gate). The reader works it
    out once per record, while the record's text is there (``PoolColumns.key``)."""
    # The attempt's repr names every field with its value (a frozen dataclass of strings,
    # numbers and tuples of strings): what the encoder reads, in a stable text.
    attempt_text = _ATTEMPT_REPR(attempt)
    return record_id_hash(
        f"{trajectory_id}\x00{label.success}\x00{label.score!r}\x00{label.outcome}\x00{attempt_text}"
    )


# The dataclass's own __repr__ without the recursion guard dataclasses wraps it in (an
# attempt holds no attempt): the same text, a quarter faster, once per record read.
_ATTEMPT_REPR = getattr(AttemptInput.__repr__, "__wrapped__", AttemptInput.__repr__)
