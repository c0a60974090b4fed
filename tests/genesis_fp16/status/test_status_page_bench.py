"""benchmarks/status_page.py builds its state folder with the product's own writers and
records: it must keep up with their shapes (it stopped running once, unnoticed, when the
gate and watch records became maps)."""

from __future__ import annotations

import math
from pathlib import Path

from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "status_page.py"


def test_the_status_page_benchmark_seeds_and_measures_one_agent() -> None:
    bench = load_script(SCRIPT)
    figures = bench.measure(1, 1)
    assert {"page", "page_cpu"} <= set(figures)
    assert all(math.isfinite(v) and v > 0 for pair in figures.values() for v in pair), figures
