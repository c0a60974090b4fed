"""The real daemon's live watch: a poisoned served model is rolled back on clean records,
counted, flagged, logged and listed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, daemon_env

from genesis_fp16_infrastructure.agent_folder.candidates import (
    candidate_entry,
    list_candidates,
    newest_checkpoint,
    read_verdict,
)
from genesis_fp16_infrastructure.agent_folder.pointer import candidates_dir, read_pointer
from genesis_fp16_infrastructure.agent_folder.transitions import serve
from genesis_fp16_infrastructure.data.synthetic import generate_pool

AGENT = "se_darwin"
RUNS = "genesis_fp16_training_runs_total"
POOL = generate_pool(1500, seed=1)
IDS = list(POOL["trajectories"])


def _write(path: Path, keys: list[str], poison: bool = False) -> None:
    """One batch as a file of its own, written atomically (a run never reads half)."""
    part = {**POOL, "trajectories": {k: dict(POOL["trajectories"][k]) for k in keys}}
    if poison:  # the poison: all "success", no score
        for record in part["trajectories"].values():
            record.update(status="success", success_score=None)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(part))
    partial.replace(path)


def _runs(daemon: DaemonProcess, *outcomes: str) -> float:
    return sum(daemon.sample(RUNS, agent=AGENT, outcome=o) or 0.0 for o in outcomes)


@pytest.mark.slow
def test_the_daemon_rolls_back_a_poisoned_model_on_clean_records(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A model trained on an all-success batch is served (by the gate, or by hand while
    the daemon is stopped: unpinned either way); clean records then arrive, and the
    daemon's next run serves the model before it again: verdict rolled_back /
    live_regression, counter 1, regression gauge 1, a log line, and `model list` shows
    the figures."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "b0.json", IDS[:600])
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(pool),
        "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
        "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS": "3",
        "GENESIS_FP16_SCHEDULE": "1",
    }
    daemon = daemon_factory(env, fixtures=False)
    daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "the first model", 180)
    folder = daemon.state_dir / "agents" / AGENT / "checkpoints"
    first = read_pointer(folder)
    assert first is not None
    _write(pool / "b1.json", IDS[600:900], poison=True)
    daemon.wait_for(lambda: _runs(daemon, "success", "rejected") >= 2, "a poisoned run", 240)
    daemon.stop()
    bad = list_candidates(folder)[-1]
    checkpoint = newest_checkpoint(bad)
    assert checkpoint is not None and bad.name != first.served.id
    serve(folder, candidate_entry(folder, bad, checkpoint), "manual")  # unpinned

    _write(pool / "b2.json", IDS[900:1200])
    again = daemon_factory(env, fixtures=False)
    rollbacks = "genesis_fp16_live_rollbacks_total"
    again.wait_for(lambda: again.sample(rollbacks, agent=AGENT), "a live rollback", 240)
    # The counter comes from the pointer's journal, read before the run's report is
    # logged: the line may follow the counter by a moment.
    said = "served model rolled back: live regression"
    again.wait_for(lambda: again.events(said), "the rollback's log line", 60)
    (event,) = again.events(said)
    assert event["live"]["served"] == bad.name and event["live"]["rolled_back"] is True
    assert event["live"]["now_served"] == first.served.id
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id != bad.name
    verdict = read_verdict(candidates_dir(folder) / bad.name).to_json()
    assert verdict["outcome"] == "rolled_back"
    assert verdict["reason"] == "live_regression"
    # The same run then judged its own candidate: a promotion starts a new watch (flag 0).
    (run,) = [e for e in again.events("training run finished") if e.get("gate")][-1:]
    promoted = run["gate"]["outcome"] == "promoted"
    assert again.sample("genesis_fp16_live_regression", agent=AGENT) == float(not promoted)
    lower = again.sample("genesis_fp16_live_log_loss_difference", agent=AGENT, bound="lower")
    assert lower is not None and lower > 0.01
    listed = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "model", "list", AGENT, "--json"],
        cwd=again.workdir,
        env=daemon_env({}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    rows: dict[str, Any] = {row["id"]: row for row in json.loads(listed.stdout)["models"]}
    assert rows[bad.name]["verdict"] == "rolled_back" and rows[bad.name]["live"]["regression"]
    # The watch per column and segment (the pool's one Genesis agent), the self-test beside.
    assert set(rows[bad.name]["live"]["metrics"]) == {"log_loss", "brier"}
    (segment,) = rows[bad.name]["live"]["metrics"]["log_loss"]["segments"]
    assert segment["name"] == "se_darwin" and segment["records"] == event["live"]["records"]
    assert rows[bad.name]["live"]["self_test"]["replays"] == 200
    assert again.sample("genesis_fp16_live_watch_alpha", agent=AGENT) == 0.05
    assert rows[first.served.id]["served"] is not promoted


def _run_now(daemon: DaemonProcess, env: dict[str, str]) -> int:
    """`genesis-fp16 run AGENT` against the daemon; waits for that run's end and returns
    how many runs had finished."""
    before = len(daemon.events("training run finished"))
    asked = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", AGENT],
        cwd=daemon.workdir,
        env=daemon_env({**env, "GENESIS_FP16_METRICS_PORT": str(daemon.port)}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert asked.returncode == 0, asked.stderr
    done = lambda: len(daemon.events("training run finished")) > before  # noqa: E731
    daemon.wait_for(done, "the run asked for", 300)
    return before + 1


# The attack: 600 clean records, 200 poisoned, 377 clean (1,177 in all).
ATTACK_POOL = generate_pool(1600, seed=1)
ATTACK_IDS = list(ATTACK_POOL["trajectories"])


def _write_attack(path: Path, keys: list[str], poison: bool = False) -> None:
    part = {**ATTACK_POOL, "trajectories": {k: dict(ATTACK_POOL["trajectories"][k]) for k in keys}}
    for record in part["trajectories"].values() if poison else ():
        record.update(status="success", success_score=None)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(part))
    partial.replace(path)


@pytest.mark.slow
def test_a_candidate_on_the_records_the_watch_rolled_back_is_not_served_again(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Issue 92: a model trained on 200 poisoned records is served (unpinned); the oldest
    file leaves the pool (so no record the first model knew is left for the gate's
    ``known`` veto) and 377 clean records arrive; `genesis-fp16 run` rolls the poisoned
    model back (live_regression). The same run trains a candidate on every record, the
    poison included, better than the first model on the pooled held-out records (the
    poison's own reward it): the gate judges it on the records newer than the
    rolled-back model too (set ``newest``), finds it worse there and does not serve it;
    the first model stays served (at 2c6d7b6d the candidate was promoted)."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write_attack(pool / "b0.json", ATTACK_IDS[:600])
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(pool),
        "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
        "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS": "3",
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_RUN_AT_START": "false",
    }
    daemon = daemon_factory(env, fixtures=False)
    _run_now(daemon, env)
    folder = daemon.state_dir / "agents" / AGENT / "checkpoints"
    first = read_pointer(folder)
    assert first is not None
    _write_attack(pool / "b1.json", ATTACK_IDS[600:800], poison=True)
    _run_now(daemon, env)
    daemon.stop()
    bad = list_candidates(folder)[-1]
    checkpoint = newest_checkpoint(bad)
    assert checkpoint is not None and bad.name != first.served.id
    serve(folder, candidate_entry(folder, bad, checkpoint), "manual")  # unpinned

    (pool / "b0.json").unlink()
    _write_attack(pool / "b2.json", ATTACK_IDS[800:1177])
    again = daemon_factory(env, fixtures=False)
    _run_now(again, env)
    (event,) = again.events("served model rolled back: live regression")
    assert event["live"]["served"] == bad.name and event["live"]["now_served"] == first.served.id
    (run,) = [e for e in again.events("training run finished") if e.get("gate")]
    gate = run["gate"]
    assert gate["outcome"] != "promoted", gate
    newest = {c["metric"]: c for c in gate["comparisons"] if c["set"] == "newest"}
    assert newest["log_loss"]["finding"] != "no_worse", newest
    pointer = read_pointer(folder)
    assert pointer is not None and pointer.served.id == first.served.id
