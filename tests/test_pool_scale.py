"""benchmarks/pool_scale.py --pool-read: a warm read from the pool entry, and its checks."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pool_scale.py"


def test_the_pool_read_rows_run_at_a_small_size(tmp_path: Path) -> None:
    """200 records: the pool is served from its entry (else the script raises) and every
    figure of the row is measured (the checksums' cost among them)."""
    row = load_script(SCRIPT).measure_pool_read(200, tmp_path, repeat=1)
    assert row["pool"] == 200 and row["entry_mb"] > 0
    timings = ("warm_read", "entry_read", "checksums", "score")
    assert all(row[name] > 0 for name in timings)
