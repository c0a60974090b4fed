"""The column-at-a-time formulas of a batch's block (``data.batch_block``, issue 90) give
what their record-at-a-time originals give, value for value and bit for bit, on
generated and hostile values: the labels (``schema.derive_label``), the codes
(``setdefault`` in first-seen order), ``math.log1p`` of counts, the diffs' line counts
and the files' kinds."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import genesis_fp16_infrastructure.data.batch_block as batch_block
from genesis_fp16_infrastructure.data.file_records import _kind
from genesis_fp16_infrastructure.data.schema import OUTCOMES, derive_label, derive_outcomes

_WORDS = st.sampled_from(
    ["pending", "executing", "success", "partial_success", "failure", "pruned", "partial",
     "unknown"]
) | st.text(max_size=4)  # fmt: skip
_SCORE = st.none() | st.floats(0.0, 1.0) | st.sampled_from([0.0, -0.0, 0.3, 0.7, 1.0])
_THRESHOLD = st.floats(0.0, 1.0) | st.sampled_from([0.3, 0.7])


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(_WORDS, _SCORE), max_size=20),
    success=_THRESHOLD,
    failure=_THRESHOLD,
)
def test_outcomes_at_once_are_derive_labels(
    rows: list[tuple[str, float | None]], success: float, failure: float
) -> None:
    """Every word with every score, at and around any thresholds (a failure threshold
    above the success one too): derive_label's outcome, or -1 where it gives no label."""
    words = [word for word, _ in rows]
    scores = np.array([score for _, score in rows], "<f8").reshape(len(rows))
    got = derive_outcomes(words, scores, success, failure).tolist()
    labels = [derive_label(word, score, success, failure) for word, score in rows]
    assert got == [-1 if label is None else OUTCOMES.index(label.outcome) for label in labels]


_VALUES = st.lists(
    st.sampled_from(["a", "b", ""]) | st.text(max_size=3), max_size=30
) | st.lists(st.tuples(st.sampled_from(["x", "y"])) | st.just(()), max_size=30)  # fmt: skip


@given(_VALUES)
def test_codes_are_setdefaults_in_first_seen_order(values: list[object]) -> None:
    """A coded column's codes and distinct values are BlockWriter's setdefault ones."""
    index: dict[object, int] = {}
    expected = [index.setdefault(value, len(index)) for value in values]
    codes, distinct = batch_block._coded(values)
    assert codes.tolist() == expected and distinct == list(index)


@given(st.lists(st.integers(0, 10**9) | st.integers(0, 40), max_size=40))
def test_log1p_of_counts_is_math_log1p_bit_for_bit(counts: list[int]) -> None:
    """math.log1p once a distinct count, spread back: the very floats, record by record."""
    got = batch_block._log1p_of(np.array(counts, np.int64).reshape(len(counts)))
    expected = np.array([math.log1p(count) for count in counts], np.float64)
    assert got.tobytes() == expected.tobytes()


_PIECES = ["\n", "+", "-", "@@", "+++", "a", "\r", "\x0b", "é", "\u2028", ""]
_DIFF = st.lists(st.sampled_from(_PIECES), max_size=10).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_DIFF, min_size=1, max_size=6))
def test_a_batch_of_diffs_counts_each_diffs_newlines(diffs: list[str]) -> None:
    """The joined diffs' line starts (or, with other line breaks, diff by diff) give
    each diff's count of "\\n", as str.count does."""
    _, _, breaks = batch_block._change_counts(diffs)
    assert breaks.tolist() == [diff.count("\n") for diff in diffs]


_NAME = st.sampled_from(["a.py", "tests/test_a.py", "c.yaml", "R.md", "conftest.py", ""]) | st.text(
    max_size=6
)


@given(st.lists(st.lists(_NAME, max_size=4).map(tuple), max_size=12))
def test_file_kinds_at_once_are_each_records_kinds(files: list[tuple[str, ...]]) -> None:
    """Whether a record's files touch tests, configuration, docs, code: the kinds of its
    own names, and nothing of the next record's (a record with no file touches none)."""
    got = np.array(batch_block._file_kinds(files)).reshape(4, len(files)).T.tolist()
    kinds = [{_kind(name) for name in names} for names in files]
    expected = [[float(kind in found) for kind in ("test", "config", "docs", "code")]
                for found in kinds]  # fmt: skip
    assert got == expected
