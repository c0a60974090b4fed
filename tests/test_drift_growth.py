"""benchmarks/drift_growth.py runs at a small size: the tree's drift report timed beside
a commit's on the same pool, with both reports compared (no timing asserted). The commit
is HEAD (a clone of any depth holds it); the reports of earlier code are pinned by
tests/infrastructure/recipes/retrain/test_drift_cost_of_new.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "drift_growth.py"


def test_it_times_the_tree_beside_a_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1,000-record pool with 100 new, beside HEAD's drift.py: one JSON line with each
    version's seconds (numbers given and built), the same report, and the same line in
    the ``--out`` file."""
    script = load_script(SCRIPT)
    out = tmp_path / "growth.jsonl"
    args = ["--sizes", "1000:100", "--repeats", "1", "--before", "HEAD"]
    assert script.main([*args, "--out", str(out)]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["records"] == 1000 and 90 <= row["new_records"] <= 100
    for key in ("tree_given", "tree_built", "HEAD_given", "HEAD_built"):
        assert row[f"{key}_seconds"] > 0
    assert row["same_report_as_HEAD"] is True
    assert json.loads(out.read_text()) == row


def test_a_size_that_is_not_records_and_new_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """``--sizes 1000`` (no NEW) and ``100:100`` (all new) stop with the size named."""
    script = load_script(SCRIPT)
    for size in ("1000", "100:100"):
        with pytest.raises(SystemExit):
            script.main(["--sizes", size])
        assert repr(size) in capsys.readouterr().err
