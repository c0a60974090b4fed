"""A plain ``.jsonl`` read a block of whole lines at a time (``sources._jsonl_lines``,
``file_blocks._decoded_lines``: one ``decode_lines`` where each line is one value) reads as
the same file's lines numbered and read as before (every line on its own, decoded
together only where each alone is one value): the same records and columns, the same
quarantined lines with the same numbers and reasons, blocks cut anywhere (a line longer
than a block too), whatever lies on the lines."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genesis_fp16_infrastructure.data import file_blocks, readers, sources
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool

_RECORDS = [json.dumps(r) for r in list(generate_pool(12, seed=4)["trajectories"].values())]
_ODD = [
    "", "   ", "{not json", '{"trajectory_id": "x1", "status": "success", "success_score": 3}',
    '{"trajectory_id": "a", "parent_trajectories": [', '], "status": "failure"}',
    '{"trajectory_id": "b", "status": "failure"} {"trajectory_id": "c", "status": "failure"}',
    ' {"trajectory_id": "d", "status": "failure"}', '{"trajectory_id": "e", "status": "failure"}\r',
    '[1, 2]', '"text"', '{"status": "success"}', "\xff\xfe",
]  # fmt: skip


def _read(path: Path, tmp_path: Path) -> tuple[readers.ReadResult | None, list[str]]:
    quarantine = tmp_path / f"q{len(list(tmp_path.iterdir()))}.jsonl"
    try:
        data = read_trajectories(path, quarantine, keep_text=True)
    except readers.DataError:
        data = None
    lines = quarantine.read_text().splitlines() if quarantine.exists() else []
    return data, lines


_SPAN = [_ODD[4], _ODD[5]]  # one value over two lines
_CASES = [
    [_RECORDS[0], *_SPAN, _RECORDS[1]],
    [_ODD[6], *_SPAN],  # two values on a line, and one over two: as many values as lines
    [_RECORDS[2], _ODD[7], _ODD[8], "", _RECORDS[3]],  # a space before, a CR after
]


@pytest.mark.parametrize("lines", _CASES)
def test_lines_that_are_not_one_value_each_are_never_read_as_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]
) -> None:
    """The lines a block decode would read as other values than the lines are: read as
    before, each alone (quarantined where it is not a record alone)."""
    _read_as_before(tmp_path, monkeypatch, lines, 1 << 20, True)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.sampled_from(_RECORDS) | st.sampled_from(_ODD), min_size=1, max_size=30),
    block=st.integers(1, 4000),
    last_newline=st.booleans(),
)
def test_a_jsonl_read_in_blocks_reads_as_its_lines_one_at_a_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lines: list[str],
    block: int,
    last_newline: bool,
) -> None:
    """Any mix of records, blank lines, spaces, CRLF, two values on a line, a value over
    two lines, bytes that are not UTF-8: read in blocks, as read line by line."""
    _read_as_before(tmp_path, monkeypatch, lines, block, last_newline)


def _read_as_before(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lines: list[str],
    block: int,
    last_newline: bool,
) -> None:
    monkeypatch.setattr(sources, "BLOCK_BYTES", block)
    raw = (
        "\n".join(lines)
        .encode("utf-8", "surrogateescape")
        .replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe")
    )
    raw += b"\n" if last_newline else b""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "p.jsonl"
    path.write_bytes(raw)
    got, got_q = _read(path, folder)
    with monkeypatch.context() as before:  # every block read as numbered lines, as before
        before.setattr(file_blocks, "_decoded_lines", lambda block, ends: None)
        before.setattr(sources, "BLOCK_BYTES", 2**30)
        want, want_q = _read(path, folder)
    assert got_q == want_q
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got.examples == want.examples and got.quarantined == want.quarantined
        assert np.array_equal(got.columns.key, want.columns.key)
