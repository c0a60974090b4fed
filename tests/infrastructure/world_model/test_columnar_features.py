"""The column-wise encoder gives today's row-at-a-time features bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lineage_walk import lineage as walk

from genesis_fp16_infrastructure.data.file_records import OWN_FEATURES, own_numbers
from genesis_fp16_infrastructure.data.lineage import Pool
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import OPERATORS, SUCCESS_THRESHOLD, AttemptInput
from genesis_fp16_infrastructure.data.synthetic import write_pool, write_replay_buffer
from genesis_fp16_infrastructure.world_model.features import (
    LINEAGE_FEATURES,
    NUMERIC_FEATURES,
    FeatureEncoder,
    numeric_columns,
)


def _mean(values: tuple[float, ...] | list[float], default: float = 0.5) -> float:
    return sum(values) / len(values) if values else default


def _numeric(attempt: AttemptInput, pool: Pool) -> list[float]:
    """One attempt's numeric row by the first formulas, kept here as the yardstick: its own
    numbers, and the means and shares of its lineage (tests/lineage_walk.py), each summed
    in the lineage's order."""
    scores = pool.scores
    known = [scores[p] for p in attempt.parent_ids if p in scores]
    lineage = walk(pool, attempt.trajectory_id, attempt.parent_ids, attempt.created)
    siblings, operators = lineage.sibling_scores, lineage.parent_operators
    row = dict(zip(OWN_FEATURES, own_numbers(attempt), strict=True))
    lineage_row = [
        _mean(known),
        max(known) if known else 0.5,
        min(known) if known else 0.5,
        1.0 if known else 0.0,
        math.log1p(lineage.depth),
        _mean(lineage.grandparent_scores),
        1.0 if lineage.grandparent_scores else 0.0,
        math.log1p(len(siblings)),
        _mean(siblings),
        _mean([float(s >= SUCCESS_THRESHOLD) for s in siblings], 0.0),
        *(_mean([float(v == op) for v in operators], 0.0) for op in OPERATORS),
    ]
    row.update(zip(LINEAGE_FEATURES, lineage_row, strict=True))
    return [row[name] for name in NUMERIC_FEATURES]


def _row_reference(encoder: FeatureEncoder, attempt: AttemptInput, pool: Pool) -> list[float]:
    """The encoder's row as it was computed before the columns (kept here as the yardstick)."""
    numeric = _numeric(attempt, pool)
    row = [(v - m) / s for v, m, s in zip(numeric, encoder.mean, encoder.std, strict=True)]
    row += [1.0 if attempt.operator == op else 0.0 for op in OPERATORS]
    used = set(attempt.tools_used)
    row += [1.0 if tool in used else 0.0 for tool in encoder.tools]
    row.append(float(len(used - set(encoder.tools))))
    row += [1.0 if attempt.reasoning_pattern == p else 0.0 for p in encoder.patterns]
    row.append(0.0 if attempt.reasoning_pattern in encoder.patterns else 1.0)
    rate = dict(encoder.agent_rates).get(attempt.agent, encoder.base_rate)

    def logit(p: float) -> float:
        p = min(1 - 1e-6, max(1e-6, p))
        return math.log(p / (1 - p))

    row.append(round(logit(rate) - logit(encoder.base_rate), 6))
    return row


def test_column_features_equal_row_features_bit_for_bit(tmp_path: Path) -> None:
    """A generated pool and a replay buffer (several agents, unknown tools and patterns,
    an encoder fitted on a part) encode to the very bits the per-row code gave."""
    write_pool(tmp_path / "pools", 1500, seed=3, agent="se_darwin")
    write_replay_buffer(tmp_path / "pools" / "replay.jsonl", 300, seed=4, agent="other")
    data = read_trajectories(tmp_path / "pools")
    attempts = [e.attempt for e in data.examples]
    fitted_on = attempts[: len(attempts) // 2]
    successes = [e.label.success for e in data.examples[: len(fitted_on)]]
    encoder = FeatureEncoder.fit(fitted_on, data.pool, successes, max_tools=4, max_patterns=3)
    expected = torch.tensor(
        [_row_reference(encoder, a, data.pool) for a in attempts], dtype=torch.float32
    )
    got = encoder.encode(attempts, data.pool)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_an_empty_list_encodes_to_no_rows() -> None:
    """No attempts: a (0, n_features) matrix, as before."""
    width = len(NUMERIC_FEATURES)
    encoder = FeatureEncoder(("a",), ("p",), (0.0,) * width, (1.0,) * width)
    assert encoder.encode([], {}).shape == (0, encoder.n_features)


def test_lineage_columns_equal_the_lineage_rows_on_awkward_pools() -> None:
    """Cycles, parents outside the pool, a parent named twice, a record naming itself,
    unknown times and scores: each attempt's lineage numbers are the row code's bits."""
    from genesis_fp16_infrastructure.data.lineage import PoolEntry

    entries = {
        "a": PoolEntry(0.9, (), "baseline", 1.0),
        "b": PoolEntry(0.4, ("a",), "revision", 2.0),
        "c": PoolEntry(None, ("a", "a"), "refinement", 3.0),
        "d": PoolEntry(0.7, ("b", "c", "ghost"), "recombination", None),
        "e": PoolEntry(0.1, ("f",), "revision", 4.0),
        "f": PoolEntry(0.2, ("e",), "revision", 5.0),  # a cycle
        "g": PoolEntry(0.3, ("g", "a"), "revision", 0.5),
        "h": PoolEntry(0.65, ("a",), "refinement", 2.5),
    }
    pool = Pool(entries)
    attempts = [
        AttemptInput(trajectory_id=k, parent_ids=e.parents, created=e.created)
        for k, e in entries.items()
    ]
    attempts += [
        AttemptInput(trajectory_id="new", parent_ids=("a", "b", "a", "zz"), created=9.0),
        AttemptInput(trajectory_id="new2", parent_ids=("e",), created=None),
        AttemptInput(trajectory_id="b", parent_ids=("a",), created=10.0),
    ]
    expected = torch.tensor([_numeric(a, pool) for a in attempts], dtype=torch.float64)
    got = numeric_columns(attempts, pool)
    assert torch.equal(got.view(torch.int64), expected.view(torch.int64))


def test_encoding_in_blocks_gives_the_same_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of 7 rows (a last block short) encode to the one-block matrix, bit for bit."""
    import genesis_fp16_infrastructure.world_model.features as features

    data = read_trajectories(write_pool(tmp_path, 300, seed=6))
    attempts = [e.attempt for e in data.examples]
    encoder = FeatureEncoder.fit(attempts, data.pool, [e.label.success for e in data.examples])
    whole = encoder.encode(attempts, data.pool)
    monkeypatch.setattr(features, "ENCODE_ROWS", 7)
    assert len(attempts) % 7
    assert torch.equal(
        encoder.encode(attempts, data.pool).view(torch.int32), whole.view(torch.int32)
    )
    assert encoder.encode([], data.pool).shape == (0, encoder.n_features)


def test_parts_by_rows_with_shared_tables_give_the_row_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts of a read's records taken by rows (shuffled, blocks of 7), each encoded with
    one set of tables built from the pool's distinct values: the per-row code's bits."""
    import numpy as np

    import genesis_fp16_infrastructure.world_model.features as features

    write_pool(tmp_path / "pools", 600, seed=3, agent="se_darwin")
    write_replay_buffer(tmp_path / "pools" / "replay.jsonl", 200, seed=4, agent="other")
    data = read_trajectories(tmp_path / "pools")
    columns, attempts = data.columns, [e.attempt for e in data.examples]
    successes = [e.label.success for e in data.examples]
    encoder = FeatureEncoder.fit(attempts[:300], data.pool, successes[:300], 4, 3)
    numeric = features.numeric_rows(columns, columns.labelled)
    tables = encoder.tables(features.Categorical.of_rows(columns, columns.labelled[:0]))
    monkeypatch.setattr(features, "ENCODE_ROWS", 7)
    order = np.random.default_rng(0).permutation(len(attempts))
    for rows in np.array_split(order, 3):
        parts = features.Categorical.of_rows(columns, columns.labelled[rows])
        got = encoder.encode_parts(parts, numeric, torch.from_numpy(rows), tables)
        expected = torch.tensor(
            [_row_reference(encoder, attempts[i], data.pool) for i in rows.tolist()],
            dtype=torch.float32,
        )
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_tables_of_other_values_are_not_used(tmp_path: Path) -> None:
    """Tables built from another read's distinct values (codes into other lists) are
    set aside: the parts encode as with their own tables."""
    import genesis_fp16_infrastructure.world_model.features as features

    data = read_trajectories(write_pool(tmp_path / "a", 300, seed=6))
    other = read_trajectories(write_pool(tmp_path / "b", 300, seed=7))
    attempts = [e.attempt for e in data.examples]
    encoder = FeatureEncoder.fit(attempts, data.pool, [e.label.success for e in data.examples])
    columns = data.columns
    parts = features.Categorical.of_rows(columns, columns.labelled)
    numeric = features.numeric_rows(columns, columns.labelled)
    foreign = encoder.tables(features.Categorical.of_rows(other.columns, other.columns.labelled))
    assert not foreign.fit(parts) and encoder.tables(parts).fit(parts)
    got = encoder.encode_parts(parts, numeric, tables=foreign)
    assert torch.equal(
        got.view(torch.int32), encoder.encode_parts(parts, numeric).view(torch.int32)
    )


def test_a_parts_own_tables_work_out_the_values_it_uses_alone(tmp_path: Path) -> None:
    """A part of a pool's records (its last 40, as a later run's new records), encoded
    with no tables given: the tables it builds hold the rows of the values its codes use,
    each the pool's tables' row bit for bit, and zeros for the values it does not use;
    the part encodes to the per-row code's bits, as with the pool's tables."""
    import numpy as np

    import genesis_fp16_infrastructure.world_model.features as features

    write_pool(tmp_path / "pools", 600, seed=3, agent="se_darwin")
    write_replay_buffer(tmp_path / "pools" / "replay.jsonl", 200, seed=4, agent="other")
    data = read_trajectories(tmp_path / "pools")
    columns, attempts = data.columns, [e.attempt for e in data.examples]
    encoder = FeatureEncoder.fit(attempts, data.pool, [e.label.success for e in data.examples])
    rows = np.arange(len(attempts) - 40, len(attempts))
    parts = features.Categorical.of_rows(columns, columns.labelled[rows])
    whole = encoder.tables(parts)
    own = encoder.tables(parts, used_only=True)
    assert own.fit(parts)
    fields = (parts.operator, parts.tools, parts.pattern, parts.agent)
    unused = 0
    for table, full, coded in zip(own[:4], whole[:4], fields, strict=True):
        used = np.zeros(len(coded.values), dtype=bool)
        used[coded.codes] = True
        assert table.shape == full.shape and table.dtype == full.dtype
        assert torch.equal(table[used].view(torch.int32), full[used].view(torch.int32))
        assert not table[~used].any()
        unused += int((~used).sum())
    assert unused  # the part leaves some of the pool's tool lists unused
    numeric = features.numeric_rows(columns, columns.labelled)
    got = encoder.encode_parts(parts, numeric, torch.from_numpy(rows))
    expected = torch.tensor(
        [_row_reference(encoder, attempts[i], data.pool) for i in rows.tolist()],
        dtype=torch.float32,
    )
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
    with_whole = encoder.encode_parts(parts, numeric, torch.from_numpy(rows), whole)
    assert torch.equal(got.view(torch.int32), with_whole.view(torch.int32))


def test_word_columns_of_awkward_values_give_the_row_features() -> None:
    """Tool lists that repeat a tool, hold two unknown tools, hold none, or are the only
    one; an empty and an unknown pattern; an agent of no rate: the encoder's columns,
    worked out a distinct value at a time, are the per-row code's bits."""
    from genesis_fp16_infrastructure.data.lineage import PoolEntry

    pool = Pool({"p": PoolEntry(0.5, (), "baseline", 1.0)})
    tools = [("a", "a", "b"), ("zz", "yy"), (), ("a", "zz", "zz"), ("b",), ("c", "a")]
    patterns = ["x", "", "y", "x", "unheard", ""]
    attempts = [
        AttemptInput(
            trajectory_id=f"t{i}",
            agent=("one", "two", "three")[i % 3],
            operator=OPERATORS[i % len(OPERATORS)],
            parent_ids=("p",),
            tools_used=t,
            reasoning_pattern=p,
        )
        for i, (t, p) in enumerate(zip(tools, patterns, strict=True))
    ]
    fitted_on = attempts[:4]  # "c", "unheard" and agent "three"'s last record unseen
    encoder = FeatureEncoder.fit(fitted_on, pool, [True, False, True, False], 2, 1)
    expected = torch.tensor(
        [_row_reference(encoder, a, pool) for a in attempts], dtype=torch.float32
    )
    got = encoder.encode(attempts, pool)
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_word_columns_count_each_distinct_word_of_a_value_once() -> None:
    """Random word lists and single words against a value-at-a-time reference: a word in
    the vocabulary sets its column, each distinct other word adds one to the last column
    (with ``other``), a word twice in a value counts once, an empty list is all zeros."""
    import random

    import genesis_fp16_infrastructure.world_model.features as features

    rng = random.Random(0)
    words = [f"w{i}" for i in range(12)]
    for _ in range(50):
        lists = [tuple(rng.choice(words) for _ in range(rng.randint(0, 5))) for _ in range(30)]
        vocabulary = tuple(rng.sample(words, rng.randint(0, 6)))
        for values in (lists, [rng.choice([*words, ""]) for _ in range(20)], []):
            for other in (False, True):
                expected = torch.zeros((len(values), len(vocabulary) + other), dtype=torch.float64)
                for row, value in enumerate(values):
                    for word in {value} if isinstance(value, str) else set(value):
                        if word in vocabulary:
                            expected[row, vocabulary.index(word)] = 1.0
                        elif other:
                            expected[row, -1] += 1.0
                got = features._word_columns(values, vocabulary, other)
                assert got.dtype == torch.float64 and torch.equal(got, expected)
