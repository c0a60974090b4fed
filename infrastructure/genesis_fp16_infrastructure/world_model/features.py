"""The feature encoder: one code path from an attempt to a feature row, for training and prediction.

The encoder sees an :class:`~genesis_fp16_infrastructure.data.schema.AttemptInput` only, which holds
what is known before an attempt runs: the operator, the generation, the parents, the
planned change (its size, the share of added lines, which kinds of file it touches), the
tools, the reasoning pattern and the agent that wrote it; and the pool around it
(:class:`~genesis_fp16_infrastructure.data.lineage.Pool`): the parents' recorded scores and
operators,
the grandparents' scores, the lineage's depth, and how earlier siblings fared. The
attempt's own status, score, test results, metrics, failure reasons, run time and cost
never reach it; ``tests/infrastructure/world_model`` checks
that changing them leaves the features unchanged.

Its vocabularies, normalisation statistics and per-agent base rates (each agent's
success rate on the training split, pulled towards the overall rate by
``AGENT_PRIOR`` pseudo-records) are fitted on the training split and saved as plain types
with the model (:meth:`FeatureEncoder.state_dict`), so that prediction after a restart
encodes exactly as training did. The saved form is versioned: a checkpoint from an older
encoder (version 1, before the lineage, file, change and agent features) is refused with
a message saying to retrain. It also says how many records it was fitted on
(``fitted``, optional: an older checkpoint's says nothing): a later scheduled run encodes
with the served model's encoder instead of fitting one while the pool has only grown, by
less than a quarter of those records (``recipes.retrain.encoder_choice``, issue 90), so
that a record's encoded row stays what it was (``world_model.kept_encoded``).

What it reads of attempts besides their numbers (operator, tools, reasoning pattern,
agent) is :class:`Categorical`: each field kept as codes into its distinct values, since
a pool repeats a few hundred of each, so the encoder works a distinct value at a time
(a read's columns hold them coded already: :meth:`Categorical.of_rows` shares their codes).

>>> encoder = FeatureEncoder.fit(attempts, pool, successes)  # doctest: +SKIP
>>> x = encoder.encode(attempts, pool)  # doctest: +SKIP
>>> restored = FeatureEncoder.from_state(encoder.state_dict())  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, count, repeat
from typing import Any, NamedTuple

import numpy as np
import torch

from genesis_fp16_infrastructure.data.file_records import OWN_FEATURES, own_numbers, pack
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.pool_columns import Coded, PoolColumns, column_tensor
from genesis_fp16_infrastructure.data.schema import OPERATORS, AttemptInput
from genesis_fp16_infrastructure.world_model.lineage_columns import (
    PoolIndex,
    columns_index,
    lineage_columns,
    lineage_rows,
)

ENCODER_VERSION = 2
AGENT_PRIOR = 20.0  # pseudo-records at the overall rate in an agent's base rate
ENCODE_ROWS = 65_536  # rows encoded at a time (FeatureEncoder.encode)
LINEAGE_ROWS = 131_072  # records whose lineage numbers are worked out at a time (numeric_rows)
PoolLike = Pool | Mapping[str, float]  # a pool, or only its scores (no lineage beyond parents)
NUMERIC_FEATURES: tuple[str, ...] = (
    "log_generation",
    "parents",
    "parent_score_mean",
    "parent_score_max",
    "parent_score_min",
    "parent_score_known",
    "log_change_lines",
    "log_change_chars",
    "log_modified_files",
    "log_strategy_words",
    "log_diagnosis_words",
    "tools",
    # version 2: the change, the files, the lineage beyond the parents
    "added_share",
    "log_hunks",
    "log_distinct_files",
    "touches_tests",
    "touches_config",
    "touches_docs",
    "touches_code",
    "log_depth",
    "grandparent_score_mean",
    "grandparent_score_known",
    "log_siblings",
    "sibling_score_mean",
    "sibling_success_share",
    *(f"parents_{op}" for op in OPERATORS),
)
# The features the pool decides, in NUMERIC_FEATURES' order (the rest are the record's
# own, data.file_records).
LINEAGE_FEATURES = tuple(name for name in NUMERIC_FEATURES if name not in OWN_FEATURES)
_OWN_COLUMNS = [NUMERIC_FEATURES.index(name) for name in OWN_FEATURES]
_LINEAGE_COLUMNS = [NUMERIC_FEATURES.index(name) for name in LINEAGE_FEATURES]
assert sorted(_OWN_COLUMNS + _LINEAGE_COLUMNS) == list(range(len(NUMERIC_FEATURES)))


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

    def __len__(self) -> int:
        return len(self.operator.codes)


class WordTables(NamedTuple):
    """An encoder's columns for each distinct value of each categorical field
    (:meth:`FeatureEncoder.tables`), float32, a row per value."""

    operator: torch.Tensor
    tools: torch.Tensor
    pattern: torch.Tensor
    agent: torch.Tensor
    # The distinct values they were built from (the Coded columns' own lists): tables are
    # used only for parts that share these very lists (FeatureEncoder.encode_parts).
    of: tuple[list[Any], ...]

    def fit(self, parts: Categorical) -> bool:
        """Whether these are ``parts``' tables: built from its values' very lists."""
        return all(a is b.values for a, b in zip(self.of, _fields(parts), strict=True))


def _fields(parts: Categorical) -> tuple[Coded, Coded, Coded, Coded]:
    return (parts.operator, parts.tools, parts.pattern, parts.agent)


@dataclass(frozen=True)
class FeatureEncoder:
    """Turns attempts into a float32 matrix; fitted once, then frozen and saved."""

    tools: tuple[str, ...]
    patterns: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    base_rate: float = 0.5  # the training split's success rate
    agent_rates: tuple[tuple[str, float], ...] = ()  # (agent, smoothed success rate)
    fitted: int | None = None  # the records it was fitted on (None: not said, an older save)

    @property
    def n_features(self) -> int:
        # numeric, operators, tools + "other tools", patterns + "other pattern", agent rate
        return len(NUMERIC_FEATURES) + len(OPERATORS) + len(self.tools) + len(self.patterns) + 3

    @classmethod
    def fit(
        cls,
        attempts: Sequence[AttemptInput],
        pool: PoolLike,
        successes: Sequence[bool] | np.ndarray | None = None,
        max_tools: int = 32,
        max_patterns: int = 16,
    ) -> FeatureEncoder:
        """Learn the vocabularies, the numeric features' mean and spread and, given the
        attempts' ``successes``, the per-agent base rates from ``attempts``."""
        numeric = numeric_columns(attempts, pool)
        return cls.fit_parts(Categorical.of(attempts), numeric, successes, max_tools, max_patterns)

    @classmethod
    def fit_parts(
        cls,
        parts: Categorical,
        numeric: torch.Tensor,
        successes: Sequence[bool] | np.ndarray | None = None,
        max_tools: int = 32,
        max_patterns: int = 16,
    ) -> FeatureEncoder:
        """:meth:`fit` on the attempts' categorical ``parts`` and their
        :func:`numeric_columns` (a read's columns give both without objects)."""
        if not len(parts):
            raise ValueError("cannot fit a feature encoder on no attempts")
        # Counted a distinct value at a time (a pool repeats a few hundred tool lists).
        tool_counts: Counter[str] = Counter()
        for tools_used, times in parts.tools.counts():
            for tool in tools_used:
                tool_counts[tool] += times
        pattern_counts = Counter(dict(parts.pattern.counts()))
        pattern_counts.pop("", None)
        # Most frequent first, ties by name, so that the vocabulary is deterministic.
        tools = tuple(sorted(tool_counts, key=lambda t: (-tool_counts[t], t))[:max_tools])
        patterns = tuple(
            sorted(pattern_counts, key=lambda p: (-pattern_counts[p], p))[:max_patterns]
        )
        mean = numeric.mean(dim=0)
        std = numeric.std(dim=0, unbiased=False)
        # A column constant in training (one hunk per diff, say) is centred on its value
        # exactly and left unscaled: its mean's float dust (1e-10 after dividing by a
        # clamped spread) flushed to zero in fp16 while fp32 kept a gradient for it, and a
        # different value at prediction time stays finite instead of growing a million-fold.
        constant = std < 1e-6
        mean = torch.where(constant, numeric[0], mean)
        std = torch.where(constant, torch.ones_like(std), std)
        base_rate, agent_rates = _agent_rates(parts.agent, successes)
        return cls(
            tools,
            patterns,
            tuple(mean.tolist()),
            tuple(std.tolist()),
            base_rate,
            agent_rates,
            fitted=len(parts),
        )

    def encode(self, attempts: Sequence[AttemptInput], pool: PoolLike) -> torch.Tensor:
        """A ``(len(attempts), n_features)`` float32 matrix, built column-wise.

        The same numbers as a row at a time in Python floats, bit for bit: the numeric
        columns are centred and scaled in float64 (IEEE subtraction and division round
        the same in a vector as in a Python float) and rounded to float32 once, at the
        end; the agent column is worked out once per agent, not once per record.

        Built ``ENCODE_ROWS`` rows at a time into the float32 result: the float64 parts
        of a million rows at once held 0.7 GB on top of it (each row's numbers are its
        own, so the bits are the same either way)."""
        return self.encode_parts(Categorical.of(attempts), numeric_columns(attempts, pool))

    def encode_parts(
        self,
        parts: Categorical,
        numeric: torch.Tensor,
        rows: torch.Tensor | None = None,
        tables: WordTables | None = None,
    ) -> torch.Tensor:
        """:meth:`encode` of the attempts' categorical ``parts`` and their
        :func:`numeric_columns`: the same matrix, bit for bit. With ``rows``, the
        attempts' numbers are those rows of ``numeric`` (taken a block at a time, not
        copied whole). ``tables``: this encoder's :meth:`tables` of ``parts``' values,
        built once for the parts of one pool (they share their values), else built here
        (as they are for parts of other values: tables are never looked up by codes into
        other lists)."""
        n = len(parts)
        if tables is None or not tables.fit(parts):
            tables = self.tables(parts, used_only=True)
        out = torch.empty((n, self.n_features), dtype=torch.float32)
        mean = torch.tensor(self.mean, dtype=torch.float64)
        std = torch.tensor(self.std, dtype=torch.float64)
        width = len(NUMERIC_FEATURES)
        coded = _fields(parts)
        for start in range(0, n, ENCODE_ROWS):
            end = min(n, start + ENCODE_ROWS)
            if rows is None:  # a view of the caller's rows: scaled into a new tensor
                block = torch.sub(numeric[start:end], mean)
            else:  # a gathered copy, the encoder's own: scaled in place
                block = numeric.index_select(0, rows[start:end]).sub_(mean)
            # Centred and scaled in float64, rounded into float32 once as it is written:
            # the same bits as a Python float's (x - mean) / std, rounded.
            out[start:end, :width] = block.div_(std)
            at = width
            for table, c in zip(tables[:4], coded, strict=True):
                # A float32 table: rounding its float64 values before the lookup or after
                # is the same rounding of the same numbers (and half the bytes moved).
                looked_up = table.index_select(0, column_tensor(c.codes[start:end]))
                out[start:end, at : at + looked_up.shape[1]] = looked_up
                at += looked_up.shape[1]
        return out

    def tables(self, parts: Categorical, used_only: bool = False) -> WordTables:
        """Each categorical field's columns for each of its distinct values (``parts``'
        ``values``), float32: the rows :meth:`encode_parts` looks up by code. A pool
        repeats a few hundred to a few thousand of each, worked out once per encode of a
        pool, not once per part of it. ``used_only``: the rows of the values ``parts``'
        codes use alone worked out, the others left zero (tables for these parts only,
        never for another part of the same values). A row is its value's alone, so the
        rows worked out are the same either way: a later run's 1,000 new records use 473
        of a 100,000-record pool's 2,080 tool lists (tables 1.8 -> 0.7 ms, issue 90)."""
        fields = _fields(parts)
        used = [_used(c) if used_only else None for c in fields]
        # The agent's base rate as log-odds against the overall rate; 0 for an unknown
        # agent. Rounded: a one-agent pool's smoothed rate equals the overall one only up
        # to float rounding, and a 1e-16 input flushes to zero in fp16 while its fp32
        # gradient does not (the precision probe counted 32 flushed gradients for it).
        rates, base = dict(self.agent_rates), _logit(self.base_rate)

        def agent_rates(agents: Sequence[str]) -> torch.Tensor:
            rows = [[round(_logit(rates.get(a, self.base_rate)) - base, 6)] for a in agents]
            return torch.tensor(rows, dtype=torch.float64).reshape(-1, 1)

        made: tuple[Callable[[Sequence[Any]], torch.Tensor], ...] = (
            partial(_word_columns, vocabulary=OPERATORS, other=False),
            partial(_word_columns, vocabulary=self.tools, other=True),
            partial(_word_columns, vocabulary=self.patterns, other=True),
            agent_rates,
        )
        operator, tools, pattern, agent = (
            _rows_of(make, c.values, at).float()
            for make, c, at in zip(made, fields, used, strict=True)
        )
        return WordTables(operator, tools, pattern, agent, tuple(c.values for c in fields))

    def state_dict(self) -> dict[str, Any]:
        """Plain lists, strings and floats: safe for ``torch.load(weights_only=True)``.
        ``fitted`` only when known: an older checkpoint's encoder reads and saves as it was
        (a resume compares the two, ``WorldModelTask.load_extra_state``)."""
        fitted = {} if self.fitted is None else {"fitted": self.fitted}
        return fitted | {
            "version": ENCODER_VERSION,
            "numeric_features": list(NUMERIC_FEATURES),
            "operators": list(OPERATORS),
            "tools": list(self.tools),
            "patterns": list(self.patterns),
            "mean": list(self.mean),
            "std": list(self.std),
            "base_rate": self.base_rate,
            "agent_rates": dict(self.agent_rates),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FeatureEncoder:
        """Rebuild the encoder saved by :meth:`state_dict`; refuses another layout."""
        if state.get("version") != ENCODER_VERSION:
            raise ValueError(
                f"feature encoder version {state.get('version')!r} is not supported "
                f"(this build reads version {ENCODER_VERSION}, which adds the lineage, file, "
                "change and agent features): train a new model into a fresh checkpoint folder"
            )
        if list(state["numeric_features"]) != list(NUMERIC_FEATURES) or list(
            state["operators"]
        ) != list(OPERATORS):
            raise ValueError("saved feature encoder has a different feature layout")
        return cls(
            tools=tuple(state["tools"]),
            patterns=tuple(state["patterns"]),
            mean=tuple(float(v) for v in state["mean"]),
            std=tuple(float(v) for v in state["std"]),
            base_rate=float(state["base_rate"]),
            agent_rates=tuple((str(k), float(v)) for k, v in state["agent_rates"].items()),
            fitted=_fitted(state.get("fitted")),
        )


def _fitted(value: Any) -> int | None:
    """A saved encoder's ``fitted``: a count of records, or None (not saved)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"saved feature encoder's fitted {value!r} is not a count of records")
    return value


def numeric_columns(attempts: Sequence[AttemptInput], pool: PoolLike) -> torch.Tensor:
    """The unscaled numeric features (NUMERIC_FEATURES) of ``attempts`` in ``pool``: a
    ``(len(attempts), len(NUMERIC_FEATURES))`` float64 matrix, fit's and encode's input.

    An attempt's own numbers come from the reader when it worked them out
    (``AttemptInput.own``, kept by the record cache), else are worked out here; its
    lineage numbers are the pool's, worked out for all attempts at once in arrays
    (``world_model.lineage_columns``)."""
    pool = pool if isinstance(pool, Pool) else Pool.from_scores(pool)
    n = len(attempts)
    out = torch.empty((n, len(NUMERIC_FEATURES)), dtype=torch.float64)
    if not n:
        return out
    packed = b"".join(a.own or pack(own_numbers(a)) for a in attempts)
    own = torch.frombuffer(bytearray(packed), dtype=torch.float64).view(n, len(OWN_FEATURES))
    out[:, _OWN_COLUMNS] = own
    out[:, _LINEAGE_COLUMNS] = torch.from_numpy(lineage_columns(attempts, pool))
    return out


def numeric_rows(
    columns: PoolColumns, rows: np.ndarray, index: PoolIndex | None = None
) -> torch.Tensor:
    """:func:`numeric_columns` of the pool's own records ``rows``, from a read's columns
    (``data.pool_columns``): the same numbers, bit for bit, without an object per
    record. ``index``: the columns' (``columns_index``, or a ``rows_index`` of ``rows``),
    built here when not given."""
    index = columns_index(columns) if index is None else index
    out = np.empty((len(rows), len(NUMERIC_FEATURES)), dtype=np.float64)
    # LINEAGE_ROWS at a time: each record's numbers are its own, and a million records'
    # temporary index arrays at once held ~400 MB more at the run's peak.
    for start in range(0, len(rows), LINEAGE_ROWS):
        part = rows[start : start + LINEAGE_ROWS]
        lineage = lineage_rows(index, part)
        block = out[start : start + len(part)]
        own = columns.own[part]
        # A column at a time: numpy's fancy column assignment took twice as long.
        for k, column in enumerate(_LINEAGE_COLUMNS):
            block[:, column] = lineage[k]
        for k, column in enumerate(_OWN_COLUMNS):
            block[:, column] = own[:, k]
    return torch.from_numpy(out)


def _used(coded: Coded) -> np.ndarray:
    """The places in ``coded.values`` of the values its codes use, ascending."""
    seen = np.zeros(len(coded.values), dtype=np.bool_)
    seen[coded.codes] = True
    return np.flatnonzero(seen)


def _rows_of(
    make: Callable[[Sequence[Any]], torch.Tensor], values: list[Any], at: np.ndarray | None
) -> torch.Tensor:
    """``make(values)`` (a row per value, float64); with ``at``, the rows of those values
    alone worked out (``make`` of them), each in its place, and the others zero."""
    if at is None:
        return make(values)
    rows = make([values[i] for i in at.tolist()])
    out = torch.zeros((len(values), rows.shape[1]), dtype=rows.dtype)
    out[torch.from_numpy(at)] = rows
    return out


def _word_columns(values: Sequence[Any], vocabulary: Sequence[str], other: bool) -> torch.Tensor:
    """A row per distinct value (a word, or a tuple of words: the tools used): 1.0 in the
    column of each of its words in ``vocabulary``; with ``other``, a last column counting
    its words in none (the empty pattern included)."""
    width = len(vocabulary) + 1
    # A value at a time in Python, a word at a time in C (map over dict methods), the
    # rest in numpy: a word at a time in a Python generator took ~4 ms of a 100,000-record
    # pool's ~6.5 ms (2,080 tool lists, ~7,900 words), and each run builds three tables
    # (its encoder's, and the served model's for the watch and the gate).
    items = [(v,) if isinstance(v, str) else v for v in values]
    lengths = np.fromiter(map(len, items), np.int64, len(items))
    flat = list(chain.from_iterable(items))
    # Each distinct word numbered by its first place (count's numbers, some unused); a
    # word twice in a value counts once.
    words: dict[Any, int] = {}
    number = np.fromiter(map(words.setdefault, flat, count()), np.int64, len(flat))
    owner = np.repeat(np.arange(len(items), dtype=np.int64), lengths)
    pair = owner * max(len(flat), 1) + number
    order = np.argsort(pair, kind="stable")
    ordered = pair[order]
    first = order[np.r_[True, ordered[1:] != ordered[:-1]]] if len(flat) else order
    index = {word: i for i, word in enumerate(vocabulary)}
    column = np.fromiter(map(index.get, flat, repeat(width - 1)), np.int64, len(flat))
    cells = np.bincount(owner[first] * width + column[first], minlength=len(items) * width)
    out = cells.reshape(len(items), width).astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(out[:, : width - 1 + other]))


def _logit(p: float) -> float:
    p = min(1 - 1e-6, max(1e-6, p))
    return math.log(p / (1 - p))


def _agent_rates(
    agents: Coded, successes: Sequence[bool] | np.ndarray | None
) -> tuple[float, tuple[tuple[str, float], ...]]:
    """The overall success rate and each agent's, smoothed towards it (sorted by agent)."""
    if successes is None:
        return 0.5, ()
    if len(successes) != len(agents.codes):
        raise ValueError(f"{len(successes)} successes for {len(agents.codes)} attempts")
    won_flags = np.asarray(successes, dtype=np.bool_).reshape(-1)
    base = int(won_flags.sum()) / len(won_flags)
    size = len(agents.values)
    totals = np.bincount(agents.codes, minlength=size).tolist()
    wins = np.bincount(agents.codes[won_flags], minlength=size).tolist()
    rates = tuple(
        (agent, (won + AGENT_PRIOR * base) / (total + AGENT_PRIOR))
        for agent, won, total in sorted(zip(agents.values, wins, totals, strict=True))
        if total
    )
    return base, rates
