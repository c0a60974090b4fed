"""The real daemon with things in the way of the agent folder's files (SE-Darwin, child runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_harness import DaemonFactory
from se_darwin_daemon import AGENT, runs, se_darwin_env, write_pool

from genesis_fp16_infrastructure.agent_folder.files import asides, newest_aside
from genesis_fp16_infrastructure.data.synthetic import generate_pool
from genesis_fp16_infrastructure.folder import AgentFolder

SKIPPED = "genesis_fp16_state_files_skipped_total"


@pytest.mark.slow
def test_things_in_the_way_cost_no_failed_run_even_where_the_old_aside_names_are_taken(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Folders at run_request.json (the daemon writes it for its child) and at
    precision_state.json (read by the plan, the child and the recording), and a file
    where the quarantine folder goes, with ``run_request.json.unusable`` taken by a full
    folder and ``precision_state.json.unusable`` by a file: each is set aside under a name
    of its own with its contents, every earlier aside kept, counted once however often
    read (the child's relayed to the daemon), and the runs succeed. Before, the taken
    names failed every run with IsADirectoryError and counted the precision state 3 times
    a run."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "se_darwin.json", generate_pool(300, seed=4))
    (pool / "bad.jsonl").write_text("not a record\n")
    paths = AgentFolder(tmp_path / "state", AGENT)
    run_file, memory = paths.root / "run_request.json", paths.precision_state_path
    for path, taken in (
        (run_file, run_file.with_name("run_request.json.unusable")),
        (memory, None),
    ):
        (path / "inside").parent.mkdir(parents=True)
        (path / "inside").write_text(f"kept {path.name}")
        if taken is not None:
            (taken / "inside").parent.mkdir()
            (taken / "inside").write_text("earlier")
    memory.with_name(memory.name + ".unusable").write_text("earlier")
    paths.quarantine_dir.write_text("a file where the folder goes")
    daemon = daemon_factory(se_darwin_env(pool), fixtures=False)
    daemon.wait_for(lambda: runs(daemon, "success") >= 1, "a successful run", 180)
    daemon.wait_for(lambda: runs(daemon, "up_to_date") >= 1, "a second run", 120)
    assert runs(daemon, "failed") == 0
    for file in ("run_request", "precision_state", "quarantine"):
        assert daemon.sample(SKIPPED, agent=AGENT, file=file) == 1, file
    for path in (run_file, memory):
        assert (newest_aside(path) / "inside").read_text() == f"kept {path.name}"  # type: ignore[operator]
        assert len(asides(path.parent, path.name)) == 2  # the earlier one kept beside it
    assert newest_aside(paths.quarantine_dir).read_text() == "a file where the folder goes"  # type: ignore[union-attr]
    written = list(paths.quarantine_dir.glob("*.jsonl"))
    assert len(written) == 1 and "not a record" in written[0].read_text()
