"""The real daemon says when nobody is watching its served model: no new labelled
record for GENESIS_FP16_LIVE_WATCH_IDLE_SECONDS (made small here) is "not watched" in
the metric, on the page and in `model list`, never a passing watch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env
from se_darwin_daemon import AGENT, runs, se_darwin_env, write_pool

from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    list_candidates,
    newest_checkpoint,
)
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.data.synthetic import generate_pool

POOL = generate_pool(900, seed=3)
IDS = list(POOL["trajectories"])
NOT_WATCHING = "genesis_fp16_live_watch_not_watching"


def _batch(keys: list[str]) -> dict[str, object]:
    return {**POOL, "trajectories": {k: POOL["trajectories"][k] for k in keys}}


def _model_list(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 model list` with the daemon's idle limit (the operator's settings)."""
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "model", "list", AGENT, *args],
        cwd=daemon.workdir,
        env=daemon_env({"GENESIS_FP16_LIVE_WATCH_IDLE_SECONDS": "5"}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_served_model_without_new_labels_is_reported_as_not_watched(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Two se_darwin models (the second served over the first: a pair to watch), then
    no record arrives that neither trained on: with the idle limit at 5 s, the daemon's
    gauge reads 1, the page says NOT WATCHED with the reason, and `model list --json`
    says not_watching since the model was served."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_pool(pool / "b0.json", _batch(IDS[:500]))
    env = se_darwin_env(pool)
    daemon = daemon_factory(env, fixtures=False)
    daemon.wait_for(lambda: runs(daemon, "success") >= 1, "the first model", 180)
    folder = daemon.state_dir / "agents" / AGENT / "checkpoints"
    write_pool(pool / "b1.json", _batch(IDS[500:]))
    done = lambda: runs(daemon, "success") + runs(daemon, "rejected")  # noqa: E731
    daemon.wait_for(lambda: done() >= 2, "a second candidate", 240)
    daemon.stop()
    pointer = read_pointer(folder)
    assert pointer is not None
    if not pointer.history:  # the gate rejected it: serve it by hand, a pair either way
        second = list_candidates(folder)[-1]
        checkpoint = newest_checkpoint(second)
        assert checkpoint is not None
        serve(folder, candidate_entry(folder, second, checkpoint), "manual")
        pointer = read_pointer(folder)
    assert pointer is not None and pointer.history  # a pair, with nothing new to score

    idle_env = {**env, "GENESIS_FP16_LIVE_WATCH_IDLE_SECONDS": "5"}
    again = daemon_factory(idle_env, fixtures=False)
    again.wait_for(lambda: again.sample(NOT_WATCHING, agent=AGENT) == 1.0, "not watched", 240)
    status, page = again.get("/")
    assert status == 200 and "NOT WATCHED: no new labelled record for" in page
    listed = _model_list(again, "--json")
    assert listed.returncode == 0, listed.stderr
    watch = json.loads(listed.stdout)["watch"]
    assert watch["state"] == "not_watching" and watch["limit"] == 5.0
    assert "no new labelled record" in watch["reason"]
    text = _model_list(again)
    assert f"{AGENT}: the served model is NOT WATCHED: no new labelled record" in text.stdout
    served = read_pointer(folder)
    assert served is not None and served.served.live is None  # nothing scored: silence
