"""benchmarks/judging_kept_ab.py runs on a small pool: the kept way sorts no reference, names
the new ids alone, and gives what the way from nothing gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

from genesis_fp16_infrastructure import kept_in_memory

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judging_kept_ab.py"


def test_the_kept_way_sorts_nothing_and_reports_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One repeat at 800 records, 100 new: each way gives the same report and ids, the
    kept one with no reference sorted and the new records' ids alone named."""
    monkeypatch.setattr(kept_in_memory, "_PROCESS", [])  # its store, not another test's
    script = load_script(SCRIPT)
    out = tmp_path / "ab.md"
    script.main(["--pools", "800", "--new", "100", "--repeats", "1", "--out", str(out)])
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 800 ")]
    assert len(rows) == 4 and all(row.endswith("| same |") for row in rows)
    assert "| kept |" in rows[1] and "0 reference(s) sorted" in rows[1]
    assert "1 reference(s) sorted" in rows[0]
    named = [int(row.split(" ids named")[0].split("| ")[-1].split(" of ")[0]) for row in rows[2:]]
    assert 0 < named[1] < named[0]  # kept: the new records' ids alone
