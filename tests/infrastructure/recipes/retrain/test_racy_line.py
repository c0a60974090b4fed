"""``up to date`` says why a file was hashed again (issue 92): a file nobody touched,
written moments before the last scan (the racy-mtime rule), is said to be so, not
"touched or rewritten"; a touched one is."""

from __future__ import annotations

import json
import os
from pathlib import Path

from se_darwin_runs import train_cli

from genesis_fp16_infrastructure.agent_folder.layout import DATA_MANIFEST
from genesis_fp16_infrastructure.agent_folder.pointer import served_checkpoint
from genesis_fp16_infrastructure.data.synthetic import generate_pool


def test_an_untouched_file_hashed_by_the_racy_rule_is_not_called_touched(
    tmp_path: Path,
) -> None:
    """The served model's run scanned its file 1 s after it was written (as a run started
    at once does): the next ``train`` hashes it again and says it is untouched and why;
    touched after that, the next says touched or rewritten."""
    data = tmp_path / "pool.json"
    data.write_text(json.dumps(generate_pool(300, seed=4)))
    first = train_cli(tmp_path, data)
    assert first["outcome"] == "success"
    served = served_checkpoint(tmp_path / "ck")
    assert served is not None
    record_path = DATA_MANIFEST.at(served.parent)
    record = json.loads(record_path.read_text())  # the scan time only: a loaded CPU may
    record["manifest"]["scanned_ns"] = data.stat().st_mtime_ns + 10**9  # take over 2 s
    record_path.write_text(json.dumps(record))
    racy = train_cli(tmp_path, data)
    assert racy["outcome"] == "up_to_date" and racy["data"]["files_hashed"] == 1
    why = racy["up_to_date_against"]
    assert "touched or rewritten" not in why, why
    assert why.endswith(
        "(1 hashed again: 1 untouched, written within 2 s before the last scan, "
        "too soon to trust its mtime)"
    ), why
    os.utime(data)  # touched now: the same bytes, a new mtime
    touched = train_cli(tmp_path, data)
    assert touched["outcome"] == "up_to_date"
    assert touched["up_to_date_against"].endswith("(1 hashed again: 1 touched or rewritten)")
