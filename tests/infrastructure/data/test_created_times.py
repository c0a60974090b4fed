"""A batch's creation times read a column at a time (``data.created_times``) are
``schema.created_seconds`` of each value, to the bit: the layouts read with numpy, and
every value they refuse (a day that does not exist, a fraction, another separator, an
offset out of range, a number, None) read one at a time."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data.created_times import created_column
from genesis_fp16_infrastructure.data.schema import created_seconds

_SUFFIX = st.sampled_from(["", "Z", "+00:00", "-05:30", "+14:00", "+23:59", "+24:00", "-00:60",
                           "+0100", ".5+00:00", "x"])  # fmt: skip


@st.composite
def _times(draw: st.DrawFn) -> str:
    """Texts of the layouts, the fields anywhere around their ranges, a separator now and
    then wrong."""
    year = draw(st.sampled_from([0, 1, 1600, 1900, 1969, 1970, 2000, 2024, 2025, 2100, 9999]))
    month = draw(st.integers(0, 13))
    day = draw(st.integers(0, 32))
    hour, minute, second = (
        draw(st.integers(0, 25)),
        draw(st.integers(0, 61)),
        draw(st.integers(0, 61)),
    )
    sep = draw(st.sampled_from(["T", "T", "T", " ", "t"]))
    return f"{year:04d}-{month:02d}-{day:02d}{sep}{hour:02d}:{minute:02d}:{second:02d}" + draw(
        _SUFFIX
    )


def _expected(values: list[object]) -> list[float]:
    seconds = [created_seconds(v) for v in values]  # type: ignore[arg-type]
    return [math.nan if s is None else s for s in seconds]


def _same(got: np.ndarray, expected: list[float]) -> bool:
    want = np.array(expected, np.float64).reshape(len(expected))
    return got.tobytes() == want.tobytes()  # nan where None, and every bit of the rest


@settings(max_examples=300, deadline=None)
@given(st.lists(_times(), min_size=1, max_size=40))
def test_texts_of_one_layout_read_at_once_are_created_seconds(values: list[str]) -> None:
    """Texts around every field's range, one layout or many: the same seconds, bit for bit."""
    assert _same(created_column(values), _expected(values))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        _times()
        | st.none()
        | st.floats(-1e12, 1e12)
        | st.integers(-(10**9), 10**9)
        | st.text(max_size=25),
        max_size=30,
    )
)
def test_any_mix_of_values_reads_as_created_seconds(values: list[object]) -> None:
    """Numbers, None, any text among the times: each read as created_seconds reads it."""
    assert _same(created_column(values), _expected(values))  # type: ignore[arg-type]


def test_every_day_of_four_centuries_reads_as_fromisoformat() -> None:
    """Each day from 1900 to 2300 (leap years, their exceptions), at a time of day and an
    offset: the numpy date arithmetic is fromisoformat's."""
    days = np.arange(np.datetime64("1900-01-01"), np.datetime64("2300-01-01"))
    values = [f"{d}T13:07:59-03:30" for d in days.astype(str).tolist()]
    assert _same(created_column(values), _expected(values))
