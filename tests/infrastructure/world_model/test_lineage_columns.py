"""Lineage features in arrays equal the record-at-a-time walk's (tests/lineage_walk.py), bit
for bit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lineage_walk import lineage_row

from genesis_fp16_infrastructure.data.lineage import Pool, PoolEntry
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.schema import OPERATORS, AttemptInput
from genesis_fp16_infrastructure.data.synthetic import write_pool
from genesis_fp16_infrastructure.world_model import lineage_columns as columns_module
from genesis_fp16_infrastructure.world_model.features import (
    LINEAGE_FEATURES,
    NUMERIC_FEATURES,
    numeric_columns,
)
from genesis_fp16_infrastructure.world_model.lineage_columns import lineage_columns, pool_index

_LINEAGE_AT = [NUMERIC_FEATURES.index(name) for name in LINEAGE_FEATURES]


def _rows(attempts: list[AttemptInput], pool: Pool) -> np.ndarray:
    return np.array(
        [lineage_row(a, pool) for a in attempts],
        dtype=np.float64,
    ).reshape(len(attempts), -1)


def _same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.shape == expected.shape and np.array_equal(
        got.view(np.int64), expected.view(np.int64)
    )


@st.composite
def _pools(draw: st.DrawFn) -> tuple[dict[str, PoolEntry], list[AttemptInput]]:
    """Pools whose parent links may loop (a record names earlier ids, itself, the next
    one, or ids outside the pool), with repeated parents, a parent and its own ancestor named
    together, unknown scores and times, equal times, operators outside OPERATORS; and
    attempts from the pool and outside it."""
    n = draw(st.integers(1, 40))
    ids = [f"r{i}" for i in range(n)]
    scores = st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.3, 0.7, 0.69999, 0.95, 1.0]))
    times = st.one_of(st.none(), st.integers(0, 6).map(float))
    operators = st.sampled_from([*OPERATORS, "", "mystery"])
    entries = {}
    for i, key in enumerate(ids):
        earlier = st.sampled_from([*ids[: i + 2], "ghost", "ghost2"])
        parents = (
            draw(st.lists(earlier, max_size=4))
            if i
            else draw(st.lists(st.just("ghost"), max_size=1))
        )
        entries[key] = PoolEntry(draw(scores), tuple(parents), draw(operators), draw(times))
    attempts = [
        AttemptInput(trajectory_id=key, parent_ids=entry.parents, created=entry.created)
        for key, entry in entries.items()
    ]
    outside = st.builds(
        lambda parents, created: AttemptInput(
            trajectory_id="candidate", parent_ids=tuple(parents), created=created
        ),
        st.lists(st.sampled_from([*ids, "ghost", "nowhere"]), max_size=4),
        times,
    )
    attempts += draw(st.lists(outside, max_size=3))
    order = draw(st.permutations(range(len(attempts))))
    return entries, [attempts[i] for i in order]


@settings(max_examples=300, deadline=None)
@given(_pools())
def test_arrays_equal_the_walk(
    drawn: tuple[dict[str, PoolEntry], list[AttemptInput]],
) -> None:
    """Every attempt, in any order, gets the walk's bits, loops of parents included."""
    entries, attempts = drawn
    got = lineage_columns(attempts, Pool(entries))
    assert _same_bits(got, _rows(attempts, Pool(entries)))


def test_a_loop_of_parents_counts_its_records_as_roots() -> None:
    """A record that is its own grandparent: a and b, on the loop, and c, below it, are 1
    deep (their parents on or below the loop count as roots), whichever is asked first."""
    entries = {
        "a": PoolEntry(0.1, ("b",), "revision", 1.0),
        "b": PoolEntry(0.2, ("a",), "revision", 2.0),
        "c": PoolEntry(0.9, ("a",), "revision", 3.0),
    }
    pool = Pool(entries)
    attempts = [
        AttemptInput(trajectory_id=k, parent_ids=e.parents, created=e.created)
        for k, e in entries.items()
    ]
    assert pool_index(pool).depth.tolist() == [1, 1, 1]
    lineage = numeric_columns(attempts, pool)[:, _LINEAGE_AT].numpy()
    assert _same_bits(lineage, _rows(attempts, Pool(entries)))
    backwards = lineage_columns(attempts[::-1], Pool(entries))
    assert _same_bits(backwards, lineage[::-1].copy())


def test_too_many_siblings_go_a_part_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the sibling bound the attempts are taken a part at a time (one alone when it
    alone is over), and the numbers are the same."""
    entries = {"p": PoolEntry(0.5, (), "baseline", 0.0)}
    entries |= {f"c{i}": PoolEntry(i / 10, ("p",), "revision", float(i)) for i in range(10)}
    pool = Pool(entries)
    attempts = [
        AttemptInput(trajectory_id=k, parent_ids=e.parents, created=e.created)
        for k, e in entries.items()
    ]
    expected = numeric_columns(attempts, pool)
    for bound in (25, 5, 1):
        monkeypatch.setattr(columns_module, "MAX_SIBLING_PAIRS", bound)
        assert torch.equal(
            numeric_columns(attempts, pool).view(torch.int64), expected.view(torch.int64)
        )
    assert _same_bits(expected[:, _LINEAGE_AT].numpy(), _rows(attempts, pool))


def test_a_generated_pool_takes_the_arrays_and_gets_the_walks_bits(tmp_path: Path) -> None:
    """A generated pool (crossovers of two parents, siblings, 13 generations): arrays, and
    the same bits as the walk, whichever records the walk is asked first."""
    data = read_trajectories(write_pool(tmp_path, 3000, seed=11))
    attempts = [e.attempt for e in data.examples]
    got = lineage_columns(attempts, data.pool)
    assert _same_bits(got, _rows(attempts, data.pool))
    backwards = attempts[::-1]
    fresh = read_trajectories(tmp_path).pool  # its depths not yet walked
    assert _same_bits(_rows(backwards, fresh), got[::-1].copy())


def test_depth_is_the_longest_chain_whatever_is_asked_first() -> None:
    """d names both b and b's grandparent a: its depth is 1 + b's (4), also when d is the
    first record walked (the walk once took a, waiting on its stack, for a loop: m came
    out 1 instead of 2 and d 3 instead of 4)."""
    entries = {
        "r": PoolEntry(0.5, (), "baseline", 0.0),
        "a": PoolEntry(0.5, ("r",), "revision", 1.0),
        "m": PoolEntry(0.5, ("a",), "revision", 2.0),
        "b": PoolEntry(0.5, ("m",), "revision", 3.0),
        "d": PoolEntry(0.5, ("a", "b"), "recombination", 4.0),
    }
    x = AttemptInput(trajectory_id="x", parent_ids=("d",), created=None)
    depth = lineage_columns([x], Pool(entries))[0, LINEAGE_FEATURES.index("log_depth")]
    assert depth == math.log1p(5)
    assert pool_index(Pool(entries)).depth.tolist() == [0, 1, 2, 3, 4]


def test_a_few_candidates_get_the_bits_of_the_whole_pools_records(tmp_path: Path) -> None:
    """Scoring 3 candidates against a 2,000-record pool, then the whole pool's records
    (the index kept between): the three get the same bits either way."""
    data = read_trajectories(write_pool(tmp_path, 2000, seed=5))
    attempts = [e.attempt for e in data.examples]
    few = numeric_columns(attempts[:3], data.pool)
    every = numeric_columns(attempts, data.pool)
    assert torch.equal(few.view(torch.int64), every[:3].view(torch.int64))


def test_unknown_depths_walk_their_own_links_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 records of known depth and a chain of 5 new ones below one of them (a later
    run's): the depths worked out are the chain's, 1 to 5, as the whole pool's walk
    gives them, and Kahn's order visits the chain's records alone, not every record."""
    n = 10_000
    parent_of = {k: k - 1 for k in range(n - 5, n)}  # 9995 <- 9994, ..., 9999 <- 9998
    counts = np.array([1 if k in parent_of else 0 for k in range(n)])
    start = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    parents = np.array([parent_of[k] for k in range(n) if k in parent_of], np.int64)
    depth = np.zeros(n, np.int64)
    depth[n - 5 :] = -1
    visited: list[int] = []
    real = columns_module.ranges

    def counted(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        visited.append(len(first))
        return real(first, lengths)

    monkeypatch.setattr(columns_module, "ranges", counted)
    known = columns_module._known_depths(start, parents, depth)
    whole, looped = columns_module._depths(n, np.repeat(np.arange(n), counts), parents)
    assert known is not None and not looped
    assert known[n - 6 :].tolist() == [0, 1, 2, 3, 4, 5] and np.array_equal(known, whole)
    visited.clear()
    columns_module._known_depths(start, parents, depth)
    assert 0 < sum(visited) < 20, visited
