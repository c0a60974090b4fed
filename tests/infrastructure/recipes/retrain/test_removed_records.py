"""A data file removed from se_darwin's pool (issue 93): ``train se_darwin`` trains a
judged candidate without its records and reports the removal as a change, never as
``unchanged``; the run after it is up to date, with nothing removed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from se_darwin_runs import train_cli

from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def test_a_removed_file_trains_a_judged_candidate_without_its_records(tmp_path: Path) -> None:
    """Two pool files, a model on both; one file deleted: the next run trains (not
    up_to_date) on the other file's records alone, judged by the gate, its data report
    ``changed`` with the deleted file's records ``removed``; the run after it takes no
    step and removes nothing."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "pool.json").write_text(json.dumps(generate_pool(400, seed=2)))
    gone = data / "more.json"
    gone.write_text(json.dumps(generate_pool(120, seed=9)))
    for file in data.iterdir():  # written a minute ago: past the manifest's racy window
        past = file.stat().st_mtime_ns - 60 * 10**9
        os.utime(file, ns=(past, past))
    removed = len(read_trajectories(gone).columns.labelled)
    first = train_cli(tmp_path, data)
    assert first["outcome"] == "success" and first["data"]["change"] == "first"
    gone.unlink()
    second = train_cli(tmp_path, data)
    assert second["outcome"] in ("success", "rejected", "inconclusive"), second
    assert second["steps"] > 0 and second["gate"] is not None
    assert second["data"]["change"] == "changed"
    assert (second["data"]["new"], second["data"]["removed"]) == (0, removed)
    assert second["data"]["records"] == first["data"]["records"] - removed
    assert second["extra"]["examples"] == second["data"]["records"]  # the file's records gone
    third = train_cli(tmp_path, data)
    assert third["outcome"] == "up_to_date" and third["steps"] == 0
    assert third["data"]["change"] == "unchanged" and third["data"]["removed"] == 0
