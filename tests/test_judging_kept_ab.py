"""benchmarks/judging_kept_ab.py runs on a small pool: the kept way sorts no reference and
reports what the way from nothing reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

from genesis_fp16_infrastructure import kept_in_memory

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judging_kept_ab.py"


def test_the_kept_way_sorts_nothing_and_reports_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One repeat at 800 records, 100 new: both rows say the same report, the kept one
    with no reference sorted."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])  # its store, not another test's
    script = load_script(SCRIPT)
    out = tmp_path / "ab.md"
    script.main(["--pools", "800", "--new", "100", "--repeats", "1", "--out", str(out)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 800 ")]
    assert len(rows) == 2 and all(row.endswith("| same |") for row in rows)
    assert "| kept |" in rows[1] and "0 reference(s) sorted" in rows[1]
    assert "1 reference(s) sorted" in rows[0]
