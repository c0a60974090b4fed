"""The quarantine sink's log: one line per data file, whatever its count of bad records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool

LOGGER = "genesis_fp16_infrastructure.data.quarantine"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_each_bad_file_is_one_log_line_naming_it_with_its_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file of 50 bad lines is one warning (its count, its first reason, where every
    reason is kept), a truncated file one more; every record is still counted and kept."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "pool.json").write_text(json.dumps(generate_pool(40, seed=1)))
    (data / "bad.jsonl").write_text(
        "".join(f'{{"trajectory_id": "b{i}", "x": \n' for i in range(50))
    )
    (data / "cut.json").write_text('{"trajectories": {"t1": ')
    kept = tmp_path / "q.jsonl"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = read_trajectories(data, quarantine=kept)
    assert result.quarantined == 51
    assert len(kept.read_text().splitlines()) == 51
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    bad = f"quarantined 50 record(s) of {data / 'bad.jsonl'}, the first at line 1: "
    assert lines[0].startswith(bad) and lines[0].endswith(
        f"; kept with each one's reason in {kept}"
    )
    assert lines[1].startswith(f"quarantined data file {data / 'cut.json'}: truncated")


def test_a_read_that_quarantines_nothing_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean pool: no quarantine line, no quarantine file."""
    (tmp_path / "pool.json").write_text(json.dumps(generate_pool(40, seed=1)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result = read_trajectories(tmp_path / "pool.json", quarantine=tmp_path / "q.jsonl")
    assert result.quarantined == 0 and _lines(caplog) == []
    assert not (tmp_path / "q.jsonl").exists()
