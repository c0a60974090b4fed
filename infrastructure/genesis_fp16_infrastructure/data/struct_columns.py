"""The fast path's decoded records (``data.readers``' msgspec structs, every one valid) as
the columns of a :class:`~genesis_fp16_infrastructure.data.batch_block.Batch`: what
:func:`~genesis_fp16_infrastructure.data.batch_block.batch_block` writes into a block a
column at a time. A batch of trajectories is read a field at a time, as
``schema.trajectory_input`` reads one; a batch holding replay records goes through each
record's ``AttemptInput`` (``schema.replay_input``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from genesis_fp16_infrastructure.data.batch_block import Batch
from genesis_fp16_infrastructure.data.schema import created_seconds, replay_input, trajectory_input


def columns_of(records: list[Any], replays: int) -> Batch:
    """The structs' fields as a :class:`Batch`: a trajectory's a column at a time, as
    ``schema.trajectory_input`` reads them; with replay records among them, each
    record's ``AttemptInput`` first (``schema.replay_input``), then its fields."""
    if replays:
        return _attempt_columns(records)
    ids = [r.trajectory_id for r in records]
    return Batch(
        trajectory_id=ids,
        agent=[r.agent_name for r in records],
        created=[created_seconds(r.created_at) for r in records],
        operator=[r.operator_applied for r in records],
        generation=[r.generation for r in records],
        # A record naming itself as parent would read its own score: dropped.
        parent_ids=[
            tuple(p for p in parents if p != tid) if tid in parents else tuple(parents)
            for tid, parents in zip(ids, [r.parent_trajectories for r in records], strict=True)
        ],
        code_changes=[r.code_changes for r in records],
        modified_files=[tuple(r.modified_files) for r in records],
        proposed_strategy=[r.proposed_strategy for r in records],
        problem_diagnosis=[r.problem_diagnosis for r in records],
        tools_used=[tuple(r.tools_used) for r in records],
        reasoning_pattern=[r.reasoning_pattern for r in records],
        word=[r.status for r in records],
        score=[r.success_score for r in records],
    )


def _attempt_columns(records: list[Any]) -> Batch:
    """A batch holding replay records, through each record's ``AttemptInput``."""
    fields: list[list[Any]] = [[] for _ in Batch._fields]
    for record in records:
        replay = record.operator_applied is msgspec.UNSET
        if replay:  # _settled set every replay key, and left operator_applied UNSET
            attempt = replay_input(record, [step.tool_name for step in record.steps])
            word, score = record.final_outcome, record.reward
        else:
            attempt = trajectory_input(record)
            word, score = record.status, record.success_score
        values = [getattr(attempt, name) for name in Batch._fields[:-2]]
        for column, value in zip(fields, [*values, word, score], strict=True):
            column.append(value)
    return Batch(*fields)
