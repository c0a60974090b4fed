"""The fast path's decoded records (``data.readers``' msgspec structs, every one valid) as
the columns of a :class:`~genesis_fp16_infrastructure.data.batch_block.Batch`: what
:func:`~genesis_fp16_infrastructure.data.batch_block.batch_block` writes into a block a
column at a time. A batch of trajectories is read a field at a time, as
``schema.trajectory_input`` reads one; a batch holding replay records goes through each
record's ``AttemptInput`` (``schema.replay_input``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec

from genesis_fp16_infrastructure.data.batch_block import Batch
from genesis_fp16_infrastructure.data.created_times import created_column
from genesis_fp16_infrastructure.data.schema import replay_input, trajectory_input


def columns_of(records: list[Any], replays: int) -> Batch:
    """The structs' fields as a :class:`Batch`: a trajectory's a column at a time, as
    ``schema.trajectory_input`` reads them; with replay records among them, each
    record's ``AttemptInput`` first (``schema.replay_input``), then its fields."""
    if replays:
        return _attempt_columns(records)
    # A field of every record at a time, each by one C-level pass (map of an attrgetter:
    # half a list comprehension's time; one pass of every field's tuples, transposed by
    # zip, took four times that)
    (ids, agent, created, operator, generation, parents, change, files, strategy, diagnosis,
     tools, pattern, word, score) = [list(map(get, records)) for get in _FIELDS]  # fmt: skip
    return Batch(
        trajectory_id=ids,
        agent=agent,
        created=created_column(created),
        operator=operator,
        generation=generation,
        # A record naming itself as parent would read its own score: dropped.
        parent_ids=[
            tuple(p for p in ps if p != tid) if tid in ps else tuple(ps)
            for tid, ps in zip(ids, parents, strict=True)
        ],
        code_changes=change,
        modified_files=list(map(tuple, files)),
        proposed_strategy=strategy,
        problem_diagnosis=diagnosis,
        tools_used=list(map(tuple, tools)),
        reasoning_pattern=pattern,
        word=word,
        score=score,
    )


_FIELDS = [
    attrgetter(name)
    for name in (
        "trajectory_id", "agent_name", "created_at", "operator_applied", "generation",
        "parent_trajectories", "code_changes", "modified_files", "proposed_strategy",
        "problem_diagnosis", "tools_used", "reasoning_pattern", "status", "success_score",
    )
]  # fmt: skip


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
