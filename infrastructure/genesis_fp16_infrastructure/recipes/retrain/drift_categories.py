"""The drift report's categorical features (agent, operator, reasoning pattern, tool) of
some labelled records: each record's code and each code's count of every category, so
that a set of records' counts (one set, or a batch of draws) is one bincount of their
codes times a table, exact in float64 integers (issue 90 item 3).

The tool lists' table is kept in a resident process (``kept_in_memory``) with the
distinct lists it was made of, and used only when this pool's lists begin with those
(every one compared); grown by the lists past them (:func:`_tool_table`).

Three records of two distinct tool lists (codes 0, 1, 1), the lists counting two tools
(list 0: tool 0; list 1: tools 0 and 1); two draws, of records (0, 1) and (1, 2):

>>> import numpy as np, torch
>>> lists = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
>>> tool = Categorical(np.array([0, 1, 1]), 2, lists)
>>> tool.counts(torch.tensor([[0, 1], [1, 2]])).tolist()
[[2.0, 1.0], [2.0, 2.0]]
"""

from __future__ import annotations

import logging
from collections import Counter
from itertools import chain, filterfalse
from typing import Any, NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.pool_columns import PoolColumns
from genesis_fp16_infrastructure.kept_in_memory import process_memory

TOOLS_KIND = ("drift: tool table",)  # the store's key (and identity) of the tool table
# The tool table: "kept" (this pool's lists begin with the kept table's), "refused" (a kept
# table of other lists: built again).
TOOL_TABLES: Counter[str] = Counter()
logger = logging.getLogger(__name__)


class Categorical(NamedTuple):
    """One categorical feature of some labelled records: each record's code (``codes``,
    of ``width`` codes) and each code's count of every category (``table``, code x
    category: a record's tool list counts each of its tools; None where each code is a
    category of its own), so that a set of records' counts is the bincount of their
    codes, times the table: exact, in float64 integers."""

    codes: np.ndarray  # int64 per record
    width: int
    table: torch.Tensor | None  # float64, code x category; None: the identity
    # Index arrays a record's position goes through, in order, before ``codes``: a
    # reference's sampled records (labelled indices, then the pool's rows), so that the
    # codes of the records drawn alone are gathered, not every record's
    rows: tuple[np.ndarray, ...] = ()

    def counts(self, picked: torch.Tensor) -> torch.Tensor:
        """The category counts of each row of ``picked`` (draw x record: positions, through
        ``rows``, into ``codes``): draw x category. numpy's gathers and bincount (torch's
        indexing took twice the time)."""
        draws, width = picked.shape[0], self.width
        offsets = np.arange(draws, dtype=np.int64)[:, None] * width
        at = picked.numpy()
        for index in self.rows:
            at = np.take(index, at)
        keys = np.take(self.codes, at) + offsets
        found = np.bincount(keys.ravel(), minlength=draws * width).reshape(draws, width)
        per_code = torch.from_numpy(found.astype(np.float64))
        return per_code if self.table is None else per_code @ self.table


def tables(columns: PoolColumns, budget: int | None) -> dict[str, Categorical]:
    """Each categorical feature of the pool, in the report's order, its codes the pool's
    rows' (taken at the records measured by :func:`categorical`), its table built once
    for both sides. A column's values are distinct (``Coded``), so the agent, operator
    and pattern codes are their own categories; the tool lists' table is
    :func:`_tool_table`'s."""
    out = {
        name: Categorical(coded.codes, len(coded.values), None)
        for name, coded in (
            ("agent", columns.agent),
            ("operator", columns.operator),
            ("reasoning_pattern", columns.pattern),
        )
    }
    lists = columns.tools.values
    table = torch.from_numpy(_tool_table(lists, budget).astype(np.float64))
    out["tool"] = Categorical(columns.tools.codes, len(lists), table)
    return out


class _ToolTable(NamedTuple):
    """The tool lists' table as a resident process keeps it: the distinct lists it was
    made of (in code order), its tools' columns and each list's count of each tool."""

    lists: list[Any]
    vocab: dict[Any, int]
    pairs: np.ndarray  # int64, list x tool


def _tool_table(lists: list[Any], budget: int | None) -> np.ndarray:
    """Each distinct tool list's count of each tool (list x tool, the tools in order of
    first appearance): one bincount of (list, tool) pairs, the lists flattened in C
    (``chain``, ``map``), work per distinct list, none per record, and no Python loop.
    In a resident process the last run's table is kept with the lists it was made of;
    when this pool's lists begin with those (every one compared: a pool's distinct
    values are numbered in first-seen order, so a grown pool's begin with its earlier
    ones), only the lists past them are counted (a 100,000-record pool's 2,080 lists:
    1.3 ms of CPU, against 0.5 at 10,000's 1,700); else all of them (``TOOL_TABLES``)."""
    memory = process_memory(budget or 0)
    kept = None if memory is None else memory.get(TOOLS_KIND, TOOLS_KIND, given=False)
    start, vocab, before = 0, {}, np.zeros((0, 0), dtype=np.int64)
    if isinstance(kept, _ToolTable) and kept.lists == lists[: len(kept.lists)]:
        TOOL_TABLES["kept"] += 1
        start, vocab, before = len(kept.lists), dict(kept.vocab), kept.pairs
    elif kept is not None:
        TOOL_TABLES["refused"] += 1
        logger.info("drift: the kept tool table is not of this pool's tool lists: built again")
    added = lists[start:]
    flat = list(chain.from_iterable(added))
    fresh = list(filterfalse(vocab.__contains__, dict.fromkeys(flat)))  # in first-seen order
    vocab.update(zip(fresh, range(len(vocab), len(vocab) + len(fresh)), strict=True))
    lengths = np.fromiter(map(len, added), dtype=np.int64, count=len(added))
    code = np.repeat(np.arange(len(added), dtype=np.int64), lengths)
    tool = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    width = len(vocab)
    pairs = np.zeros((len(lists), width), dtype=np.int64)
    pairs[:start, : before.shape[1]] = before
    found = np.bincount(code * width + tool, minlength=len(added) * width)
    pairs[start:] = found.reshape(len(added), width)
    pairs.flags.writeable = False  # kept: read, never changed
    if memory is not None:
        kept = _ToolTable(list(lists), vocab, pairs)
        memory.put(TOOLS_KIND, TOOLS_KIND, kept, pairs.nbytes + 64 * len(lists), "tool table")
    return pairs


def categorical(
    tables: dict[str, Categorical], columns: PoolColumns, picked: torch.Tensor
) -> dict[str, Categorical]:
    """Each categorical feature of the labelled records ``picked`` (their indices)."""
    rows = np.take(columns.labelled, picked.numpy())
    return {name: t._replace(codes=np.take(t.codes, rows)) for name, t in tables.items()}
