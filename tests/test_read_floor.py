"""benchmarks/read_floor.py runs at a small size: the product's read and msgspec's decode
of the same bytes agree on the records, and their ratio is reported (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "read_floor.py"


def test_it_times_the_read_and_the_floor_on_the_same_file(tmp_path: Path) -> None:
    """200 records, both layouts: every figure positive, the ratios the seconds' ratio."""
    script = load_script(SCRIPT)
    paths = script.write_files(tmp_path / "files", 200)
    for layout in ("json", "jsonl"):
        row = script.measure(paths[layout], layout, 1, tmp_path)
        assert row["records"] == 200
        assert min(row["floor"], row["read"], row["read_cache"]) > 0
        assert row["ratio_read"] == row["floor"] / row["read"]


def test_it_times_a_read_shared_with_helpers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers``: the read shares the file with a helper, and still agrees with the
    floor on every record (the floor and the read disagreeing raises)."""
    from genesis_fp16_infrastructure.data import read_workers

    monkeypatch.setattr(read_workers, "MIN_UNIT_RECORDS", 40)
    script = load_script(SCRIPT)
    paths = script.write_files(tmp_path / "files", 200)
    read_workers.UNITS.clear()
    try:
        row = script.measure(paths["json"], "json", 1, tmp_path, workers=1)
    finally:
        read_workers.close()
    assert row["records"] == 200
    assert read_workers.UNITS["helper"] > 0
