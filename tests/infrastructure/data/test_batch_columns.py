"""The column-at-a-time formulas of a batch's block (``data.batch_block``, issue 90) give
what their record-at-a-time originals give, value for value and bit for bit, on
generated and hostile values: the labels (``schema.derive_label``), the codes
(``setdefault`` in first-seen order), ``math.log1p`` of counts, the diffs' line counts
and the files' kinds; and a .jsonl's lines decoded together read as lines one at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import genesis_fp16_infrastructure.data.batch_block as batch_block
import genesis_fp16_infrastructure.data.file_blocks as file_blocks
import genesis_fp16_infrastructure.data.readers as readers
from genesis_fp16_infrastructure.data.file_records import RecordBlock, _kind
from genesis_fp16_infrastructure.data.quarantine import QuarantineSink
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


@settings(deadline=None)  # a loaded host's first example is slow
@given(_VALUES)
def test_codes_are_setdefaults_in_first_seen_order(values: list[object]) -> None:
    """A coded column's codes and distinct values are BlockWriter's setdefault ones."""
    index: dict[object, int] = {}
    expected = [index.setdefault(value, len(index)) for value in values]
    codes, distinct = batch_block._coded(values)
    assert codes.tolist() == expected and distinct == list(index)


@settings(deadline=None)  # a loaded host's first example is slow
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


@settings(deadline=None)  # a loaded host's first example is slow
@given(st.lists(st.lists(_NAME, max_size=4).map(tuple), max_size=12))
def test_file_kinds_at_once_are_each_records_kinds(files: list[tuple[str, ...]]) -> None:
    """Whether a record's files touch tests, configuration, docs, code: the kinds of its
    own names, and nothing of the next record's (a record with no file touches none)."""
    got = np.array(batch_block._file_kinds(files)).reshape(4, len(files)).T.tolist()
    kinds = [{_kind(name) for name in names} for names in files]
    expected = [[float(kind in found) for kind in ("test", "config", "docs", "code")]
                for found in kinds]  # fmt: skip
    assert got == expected


_GOOD = '{"trajectory_id": "g%d", "status": "success", "success_score": 0.9}'
# Runs of lines: records across a line break that join, together, into as many records
# as lines (a list across the break; an object across it, then two records on a line),
# whitespace JSON has and has not, bytes that are not UTF-8, and lines that are records.
_LINES = st.sampled_from(
    [
        ['{"trajectory_id": "a", "tools_used": ["x"', '"y"]}, {"trajectory_id": "b"}'],
        ['{"trajectory_id": "e",', '"status": "failure"}', '{"trajectory_id": "c"}, {}'],
        ["  \t" + _GOOD % 7 + " \r"], ["\x0c" + _GOOD % 8], ["[1,", "2]"], [""],
        ['{"trajectory_id": "f", "generation": 3.0}'], ['{"status": "success"}'],
        ['{"trajectory_id": "h", "agent_name": "\xff"}'],
    ]
) | st.integers(0, 5).map(lambda n: [_GOOD % n])  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(runs=st.lists(_LINES, min_size=1, max_size=6), keep_text=st.booleans())
def test_lines_read_together_read_as_lines_read_one_at_a_time(
    tmp_path_factory: pytest.TempPathFactory, runs: list[list[str]], keep_text: bool
) -> None:
    """A .jsonl's lines decoded together give the block and the quarantined entries
    (place, reason, text) that a line at a time gives, whatever joins across lines."""
    folder = tmp_path_factory.mktemp("lines")
    file = folder / "pool.jsonl"
    lines = [line for run in runs for line in run]
    file.write_bytes(
        "\n".join(lines).encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff") + b"\n"
    )

    def read(together: bool) -> tuple[RecordBlock, list[str]]:
        sink = QuarantineSink(folder / f"q{together}.jsonl")
        with pytest.MonkeyPatch.context() as patch:
            if not together:
                patch.setattr(file_blocks, "_decoded_together", lambda *_, **__: None)
            block = readers._file_records(file, sink, None, keep_text)
        sink.close()
        kept = folder / f"q{together}.jsonl"
        return block, kept.read_text().splitlines() if kept.exists() else []

    (block, quarantined), (alone, alone_quarantined) = read(True), read(False)
    differ = [f for f in RecordBlock.__struct_fields__ if getattr(block, f) != getattr(alone, f)]
    assert not differ and quarantined == alone_quarantined
