"""The real daemon with things in the way of the agent folder's files (SE-Darwin, child runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_harness import DaemonFactory
from se_darwin_daemon import AGENT, runs, se_darwin_env, write_pool

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16_infrastructure.data.synthetic import generate_pool

SKIPPED = "genesis_fp16_state_files_skipped_total"


@pytest.mark.slow
def test_a_folder_at_the_run_file_and_a_file_at_the_quarantine_folder_cost_no_failed_run(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A folder at run_request.json (the daemon writes it for its child) and a file where
    the quarantine folder goes (the child writes a bad record there) are set aside as
    .unusable with their contents, counted once each (the child's relayed to the
    daemon), and the runs succeed: before, every run failed with IsADirectoryError."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "se_darwin.json", generate_pool(300, seed=4))
    (pool / "bad.jsonl").write_text("not a record\n")
    paths = AgentPaths.for_agent(tmp_path / "state", AGENT)
    run_file = paths.root / "run_request.json"
    (run_file / "inside").parent.mkdir(parents=True)
    (run_file / "inside").write_text("kept")
    paths.quarantine_dir.write_text("a file where the folder goes")
    daemon = daemon_factory(se_darwin_env(pool), fixtures=False)
    daemon.wait_for(lambda: runs(daemon, "success") >= 1, "a successful run", 180)
    daemon.wait_for(lambda: runs(daemon, "up_to_date") >= 1, "a second run", 120)
    assert runs(daemon, "failed") == 0
    assert daemon.sample(SKIPPED, agent=AGENT, file="run_request") == 1
    assert daemon.sample(SKIPPED, agent=AGENT, file="quarantine") == 1
    assert (paths.root / "run_request.json.unusable" / "inside").read_text() == "kept"
    aside = paths.root / "quarantine.unusable"
    assert aside.read_text() == "a file where the folder goes"
    written = list(paths.quarantine_dir.glob("*.jsonl"))
    assert len(written) == 1 and "not a record" in written[0].read_text()
