"""An attempt's own numbers: the counted diff equals the line-by-line one, and the
numbers the reader keeps are the ones worked out afresh."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data.file_records import change_shape, own_numbers, pack
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import write_pool

_LINE = st.text(alphabet="+-@ a\r\x0b\n\x85\u2028", max_size=8)


def _by_lines(diff: str) -> tuple[float, float]:
    """The count as the encoder first wrote it: a loop over str.splitlines."""
    added = removed = hunks = 0
    for line in diff.splitlines():
        if line.startswith("@@"):
            hunks += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return (added / (added + removed) if added + removed else 0.5), float(hunks)


@given(st.lists(_LINE, max_size=12).map("\n".join))
def test_the_counted_diff_shape_equals_the_line_by_line_one(diff: str) -> None:
    """Any mix of +, -, @@, +++, --- and the other line breaks splitlines knows."""
    assert change_shape(diff) == _by_lines(diff)


def test_the_reader_keeps_each_attempts_own_numbers_and_replace_drops_them(
    tmp_path: Path,
) -> None:
    """Every read attempt carries its packed own numbers, equal to a fresh computation;
    an attempt made from it by dataclasses.replace carries none (so none go stale)."""
    data = read_trajectories(write_pool(tmp_path, 200, seed=2))
    for example in data.examples:
        assert example.attempt.own == pack(own_numbers(example.attempt))
    edited = replace(data.examples[0].attempt, code_changes="+ x")
    assert edited.own == b""
