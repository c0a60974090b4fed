"""The segments of the records a served model knew, read as the gate asks for them
(judging/served.py:KnownSegments, issue 90): the same answers as the set of them all,
with only the records needed read."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.judging.served import KnownSegments

rows = st.lists(st.tuples(st.sampled_from("abcdef"), st.booleans()), max_size=2_000)


@settings(max_examples=200, deadline=None)
@given(rows, st.lists(st.sampled_from("abcdefg"), max_size=10))
def test_it_answers_as_the_set_of_them_all(pairs: list[tuple[str, bool]], asked: list[str]) -> None:
    """Asked about any names in any order, then iterated and counted: what the set of
    the segments of every known record says."""
    segments = tuple(s for s, _ in pairs)
    knew = np.array([k for _, k in pairs], dtype=bool)
    whole = set(itertools.compress(segments, knew.tolist()))
    known = KnownSegments(segments, knew)
    assert [name in known for name in asked] == [name in whole for name in asked]
    assert set(known) == whole and len(known) == len(whole)


def test_a_grown_pool_is_read_only_as_far_as_its_segments() -> None:
    """100,000 records of five agents, the last 1,000 new (not known): each agent found
    known after reading a few hundred records; an agent only the new records have is
    known not to be after reading them all."""
    rng = np.random.default_rng(3)
    segments = tuple(rng.choice([f"agent-{i}" for i in range(5)], 100_000).tolist())
    segments = (*segments[:-1], "agent-new")
    knew = np.ones(100_000, bool)
    knew[-1_000:] = False
    known = KnownSegments(segments, knew)
    assert all(f"agent-{i}" in known for i in range(5))
    assert known.read <= 256
    assert "agent-new" not in known and known.read == 100_000


def test_flags_of_another_length_are_refused() -> None:
    """One flag per segment, or a ValueError naming both counts."""
    with pytest.raises(ValueError, match="2 flags for 3 segments"):
        KnownSegments(("a", "b", "c"), np.array([True, False]))
