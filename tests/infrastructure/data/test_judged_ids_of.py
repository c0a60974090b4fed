"""A pool's judged ids named at once (``schema.judged_ids_of``) are the texts
``schema.judged_id`` names one record at a time, for any ids and any 64-bit keys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data.schema import judged_id, judged_ids_of

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(st.tuples(st.text(), INT64), max_size=40))
def test_the_ids_named_at_once_are_those_named_one_at_a_time(
    records: list[tuple[str, int]],
) -> None:
    ids = [tid for tid, _ in records]
    keys = np.array([key for _, key in records], dtype=np.int64)
    assert judged_ids_of(ids, keys) == [judged_id(t, k) for t, k in records]


def test_the_extremes_and_a_strided_view_of_the_keys() -> None:
    """The smallest and largest keys, zero and -1; keys given as a view of a larger
    column (a pool's keys past its first records), not a copy."""
    column = np.array([7, -(2**63), 2**63 - 1, 0, -1, 255], dtype=np.int64)
    keys = column[1:]
    ids = ["a", "b", "c", "d", "é"]
    assert judged_ids_of(ids, keys) == [
        judged_id(t, k) for t, k in zip(ids, keys.tolist(), strict=True)
    ]


def test_ids_and_keys_of_other_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        judged_ids_of(["a", "b"], np.array([1], dtype=np.int64))
