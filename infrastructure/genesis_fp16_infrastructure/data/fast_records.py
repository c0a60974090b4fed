"""The fast path of a read: a record's JSON bytes straight to a typed struct, no dict.

``json.loads`` then one pydantic model per record cost 65 µs a generated record (100,000
records: 6.5 s); msgspec decodes the same bytes into a typed struct, checking the same
types and bounds, in 9 µs (``benchmarks/pool_scale.py``, issue 36). The pydantic models of
``schema.py`` stay the schema's one authority: msgspec is strict where pydantic is lax (a
float ``3.0`` for an int, ``NaN``, ``true`` for a number), so every record the fast path
refuses is read again the slow way, and the slow way decides whether it is valid and what
its quarantine reason says. The fast path only ever accepts records the slow one accepts
with the same values (``tests/infrastructure/data/test_fast_records.py`` holds the pairs).

A record's shape is decided as the slow path does: a replay-buffer record has no
``operator_applied`` and at least one of the replay keys; anything else is a trajectory.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from genesis_fp16_infrastructure.data.schema import (
    MAX_GENERATION,
    AttemptInput,
    Label,
    derive_label,
    outcome_for_score,
    replay_input,
    trajectory_input,
)

_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Count = Annotated[int, msgspec.Meta(ge=0)]
_When = str | float | None
_UNSET: Any = msgspec.UNSET


class _Tests(msgspec.Struct):
    tasks_total: _Count | None = None
    tasks_passed: _Count | None = None
    tasks_failed: _Count | None = None


class _Metrics(msgspec.Struct):
    accuracy: float | None = None
    speed: float | None = None
    robustness: float | None = None


class _Step(msgspec.Struct):
    timestamp: _When = None
    tool_name: str = ""
    tool_args: dict[str, Any] = {}
    tool_result: Any = None
    agent_reasoning: str = ""


class _Record(msgspec.Struct):
    """Every field of both shapes (schema.Trajectory, schema.ReplayRecord), with their
    types and bounds; the fields that decide the shape are UNSET when absent."""

    trajectory_id: Annotated[str, msgspec.Meta(min_length=1)] | msgspec.UnsetType = _UNSET
    created_at: _When = None
    # a trajectory's
    generation: Annotated[int, msgspec.Meta(ge=0, le=MAX_GENERATION)] = 0
    agent_name: str = ""
    parent_trajectories: list[str] = []
    plan_id: str | None = None
    operator_applied: (
        Literal["baseline", "revision", "recombination", "refinement"] | msgspec.UnsetType
    ) = _UNSET
    code_changes: str = ""
    problem_diagnosis: str = ""
    proposed_strategy: str = ""
    code_after: str | None = None
    strategy_description: str = ""
    status: Literal["pending", "executing", "success", "partial_success", "failure", "pruned"] = (
        "pending"
    )
    success_score: _Unit | None = None
    test_results: _Tests | None = None
    metrics: _Metrics | None = None
    failure_reasons: list[str] = []
    tools_used: list[str] = []
    reasoning_pattern: str = ""
    key_insights: list[str] = []
    assumptions_made: list[str] = []
    modified_files: list[str] = []
    execution_time_seconds: float | None = None
    cost_dollars: float | None = None
    # a replay record's (the shape is replay when any of these is present)
    agent_id: str | msgspec.UnsetType = _UNSET
    task_description: str | msgspec.UnsetType = _UNSET
    initial_state: dict[str, Any] = {}
    steps: list[_Step] | msgspec.UnsetType = _UNSET
    final_outcome: Literal["success", "failure", "partial", "unknown"] | msgspec.UnsetType = _UNSET
    reward: _Unit | msgspec.UnsetType | None = _UNSET
    metadata: dict[str, Any] = {}
    duration_seconds: float | None = None
    failure_rationale: str | None = None
    error_category: str | None = None
    fix_applied: str | None = None


_DECODER = msgspec.json.Decoder(_Record)
_REPLAY_OUTCOME = {"success": "success", "partial": "partial", "failure": "failure"}


class Fast(msgspec.Struct, frozen=True):
    """A record decoded by the fast path: what ``file_records.FileRecord`` is built from."""

    trajectory_id: str
    attempt: AttemptInput
    label: Label | None
    score: float | None


def decode_record(
    raw: bytes | msgspec.Raw, thresholds: tuple[float, float], key: str | None = None
) -> Fast | None:
    """The record in ``raw`` (one JSON object's bytes), or None when the fast path cannot
    vouch for it and the slow path must decide. ``key``: the id a pool maps it under,
    used when the record names none."""
    try:
        record = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        # ValueError: msgspec's UnicodeDecodeError for bytes that are not UTF-8
        return None
    trajectory_id = record.trajectory_id
    if trajectory_id is msgspec.UNSET:
        if not key:
            return None  # no id at all, or an empty key: the slow path's reason
        trajectory_id = key
    record.trajectory_id = trajectory_id
    success, failure = thresholds
    if _is_replay(record):
        return _replay(record, trajectory_id, success, failure)
    if record.operator_applied is msgspec.UNSET:
        record.operator_applied = "baseline"
    attempt = trajectory_input(record)
    label = derive_label(record.status, record.success_score, success, failure)
    return Fast(trajectory_id, attempt, label, record.success_score)


def _or_empty(value: str | msgspec.UnsetType) -> str:
    return "" if value is msgspec.UNSET else value


def _is_replay(record: _Record) -> bool:
    if record.operator_applied is not msgspec.UNSET:
        return False
    return any(
        value is not msgspec.UNSET
        for value in (
            record.final_outcome,
            record.agent_id,
            record.steps,
            record.reward,
            record.task_description,
        )
    )


def _replay(record: _Record, trajectory_id: str, success: float, failure: float) -> Fast:
    """schema.ReplayRecord.to_input and derive_replay_label, on the struct."""
    steps = [] if record.steps is msgspec.UNSET else record.steps
    record.agent_id = _or_empty(record.agent_id)
    record.task_description = _or_empty(record.task_description)
    attempt = replay_input(record, [step.tool_name for step in steps])
    reward = None if record.reward is msgspec.UNSET else record.reward
    label: Label | None
    if reward is not None:
        outcome = outcome_for_score(reward, success, failure)
        label = Label(success=outcome == "success", score=reward, outcome=outcome)
    else:
        final = record.final_outcome if record.final_outcome is not msgspec.UNSET else "unknown"
        word = _REPLAY_OUTCOME.get(final)
        label = None if word is None else Label(word == "success", None, word)
    return Fast(trajectory_id, attempt, label, reward)
