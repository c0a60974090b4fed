"""What the feature encoder reads of attempts besides their numbers, coded.

The encoder (``world_model.features``) turns an attempt's operator, tools, reasoning
pattern and agent into columns; a pool repeats a few hundred distinct values of each, so
each field is kept as codes into its distinct values and the encoder works a distinct
value at a time. A read's columns (``data.pool_columns``) hold them coded already
(:meth:`Categorical.of_rows` shares their codes); objects are coded here
(:meth:`Categorical.of`): the same columns either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns
from genesis_fp16_infrastructure.data.schema import AttemptInput


class Categorical(NamedTuple):
    """What the encoder reads of attempts besides their numbers, each field coded (every
    attempt's code into the field's distinct values), in the attempts' order: from
    objects (:meth:`of`) or from a read's columns (:meth:`of_rows`, whose codes it
    shares), the same values either way. The encoder works a distinct value at a time."""

    operator: Coded
    tools: Coded  # tool lists (tuples)
    pattern: Coded
    agent: Coded

    @classmethod
    def of(cls, attempts: Sequence[AttemptInput]) -> Categorical:
        return cls(
            Coded.of([a.operator for a in attempts]),
            Coded.of([a.tools_used for a in attempts]),
            Coded.of([a.reasoning_pattern for a in attempts]),
            Coded.of([a.agent for a in attempts]),
        )

    @classmethod
    def of_rows(cls, columns: PoolColumns, rows: np.ndarray) -> Categorical:
        """The pool's ``rows`` (``data.pool_columns``), without an object per record."""
        return cls(
            *(c.at(rows) for c in (columns.operator, columns.tools, columns.pattern, columns.agent))
        )

    def part(self, start: int, end: int) -> Categorical:
        """The attempts ``start`` to ``end``."""
        return Categorical(*(Coded(c.codes[start:end], c.values) for c in self))

    def __len__(self) -> int:
        return len(self.operator.codes)

    # Each attempt's value, as a list (a sample's: the drift report reads them).
    @property
    def operators(self) -> list[str]:
        return self.operator.take(np.arange(len(self)))

    @property
    def tool_lists(self) -> list[tuple[str, ...]]:
        return self.tools.take(np.arange(len(self)))

    @property
    def patterns(self) -> list[str]:
        return self.pattern.take(np.arange(len(self)))

    @property
    def agents(self) -> list[str]:
        return self.agent.take(np.arange(len(self)))
