"""benchmarks/watch_asked_cost.py: the watch's old and new ways of asking for the new
records give the same records, and it says both times."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "watch_asked_cost.py"


def test_both_ways_ask_for_the_same_records(capsys: pytest.CaptureFixture[str]) -> None:
    """A small pool: the old way's rows and segments are the new way's (the script checks
    them), and the line names the pool, the records scored and both times."""
    load_script(SCRIPT).main(["--pool", "3000", "--new", "200", "--repeat", "1"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("pool 3,000, ") and "200 new:" in line
    assert "ms before," in line and "ms now" in line
