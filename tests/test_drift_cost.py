"""benchmarks/drift_cost.py runs at a small size: a served model trained by the product,
the drift report and the forward pass timed on the same pool (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "drift_cost.py"


def test_it_reports_drift_and_one_forward_pass_on_the_same_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """600 records, a fifth new: one JSON line with both timings, their ratio and the
    report's new records, and the same line in the results folder."""
    script = load_script(SCRIPT)
    args = ["--records", "600", "--new", "0.2", "--repeats", "2", "--steps", "2"]
    assert script.main([*args, "--out", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["records"] == 600 and 100 < row["new_records"] <= 120  # the labelled ones
    assert row["drift_seconds"] > 0 and row["forward_seconds"] > 0
    assert len(row["drift_times"]) == len(row["forward_times"]) == 2
    assert row["drift_over_forward"] == pytest.approx(
        row["drift_seconds"] / row["forward_seconds"], rel=1e-2
    )
    (written,) = tmp_path.glob("drift_cost_*.json")
    assert json.loads(written.read_text()) == row
