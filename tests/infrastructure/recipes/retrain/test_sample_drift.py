"""The sample generator's pools pass the drift check against each other (issue 92): a
pool made with ``data generate`` dropped beside the sample ``train`` generated is not
flagged as drifted, as a user who tries the data folder first sees it."""

from __future__ import annotations

from pathlib import Path

from cli_fork import run_cli
from se_darwin_runs import cli_env, train_cli


def test_a_generated_pool_dropped_beside_the_sample_is_not_drift(tmp_path: Path) -> None:
    """``train se_darwin`` on the sample it generates (2,000 records, seed 0), then
    ``data generate se_darwin --seed 7 --count 600`` into the data folder: the next run
    trains on the 600 new records and flags no feature and no label shift (before, 14
    features, log_generation 0.696); the run after it is up to date and reports none."""
    first = train_cli(tmp_path, None, "--steps", "20")
    assert first["outcome"] == "success" and first["data"]["records"] > 1900
    data = tmp_path / "state" / "agents" / "se_darwin" / "data"
    assert data.is_dir()
    made = run_cli(
        [
            "data",
            "generate",
            "se_darwin",
            "--out",
            str(data / "mine"),
            "--seed",
            "7",
            "--count",
            "600",
        ],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    grown = train_cli(tmp_path, None, "--steps", "20")
    drift = grown["drift"]
    assert grown["steps"] > 0 and drift["new_records"] > 500, drift
    assert drift["flagged"] == [] and not drift["label_shift_flagged"], drift
    again = train_cli(tmp_path, None, "--steps", "20")
    assert again["outcome"] == "up_to_date" and again["drift"] is None
