"""The real daemon on a pool that changes between scheduled runs (SE-Darwin, child runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from daemon_harness import DaemonFactory, DaemonProcess
from se_darwin_daemon import AGENT
from se_darwin_daemon import runs as _runs
from se_darwin_daemon import write_pool as _write

from genesis_fp16_infrastructure.data.synthetic import generate_pool

QA_RECORDS = 600  # the new agent's pool


def _finished(daemon: DaemonProcess, count: int) -> dict[str, Any]:
    """The run-finished event of the ``count``-th successful (training) run (waited for
    itself, not for the counter)."""

    def found() -> dict[str, Any] | None:
        done = [e for e in daemon.events("training run finished") if e["outcome"] == "success"]
        return done[count - 1] if len(done) >= count else None

    return daemon.wait_for(found, f"success #{count}", 180)


def _trained_after(daemon: DaemonProcess, seen: int) -> dict[str, Any]:
    """The first run after the first ``seen`` run-finished events that took steps (an
    inconclusive candidate judged again takes none)."""

    def found() -> dict[str, Any] | None:
        later = daemon.events("training run finished")[seen:]
        return next((e for e in later if e["outcome"] == "success" and e["steps"] > 0), None)

    return daemon.wait_for(found, f"a training run after event {seen}", 180)


@pytest.mark.slow
def test_a_pool_that_changes_is_learned_and_an_unchanged_one_is_up_to_date(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Unchanged: up_to_date runs (no step, counted under their own outcome, the model's
    records and last success exported); grown by a new agent: learned afresh (steps, the
    new records counted, an encoder that knows the new agent); relabelled: trained again
    (new records, by their judged ids); shrunk: up to date (every record left was learned
    or judged: the judged run's rule, issue 68)."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "se_darwin.json", generate_pool(300, seed=4))
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
            "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(pool),
            "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
            "GENESIS_FP16_LOG_INTERVAL": "5",
            "GENESIS_FP16_SCHEDULE": "1",
        },
        fixtures=False,
    )
    first = _finished(daemon, 1)
    assert first["steps"] > 0 and first["data"]["change"] == "first"
    daemon.wait_for(lambda: _runs(daemon, "up_to_date") >= 2, "two up-to-date runs", 120)
    steps = daemon.sample("genesis_fp16_optimizer_steps_total", agent=AGENT)
    assert steps == first["steps"]  # up-to-date runs took none
    records = first["data"]["records"]
    assert daemon.sample("genesis_fp16_training_records", agent=AGENT) == records
    assert daemon.sample("genesis_fp16_new_records_total", agent=AGENT) == records
    assert (daemon.sample("genesis_fp16_last_success_timestamp_seconds", agent=AGENT) or 0) > 0
    up = [e for e in daemon.events("training run finished") if e["outcome"] == "up_to_date"]
    assert up[0]["steps"] == 0 and up[0]["data"]["change"] == "unchanged"

    # The new agent's records are numerous enough for the gate to bound the candidate's
    # loss on them within its margin (issue 51: it must prove it is no worse; with 300 it
    # was better by 0.010 nats but its bound, 0.011, missed the 0.01 margin: rejected).
    _write(pool / "qa.json", generate_pool(QA_RECORDS, seed=5, agent="qa"))
    grown = _finished(daemon, 2)
    assert grown["steps"] > 0 and grown["data"]["new"] > 250, grown
    assert daemon.sample("genesis_fp16_new_records_total", agent=AGENT) == (
        records + grown["data"]["new"]
    )
    served = torch.load(daemon.workdir / grown["checkpoint"], weights_only=True)
    assert set(served["extra"]["encoder"]["agent_rates"]) == {"se_darwin", "qa"}

    # Relabel and remove se_darwin's records: whichever model the gate kept serving
    # (issue 62 may keep the grown candidate as inconclusive), it learned all of them.
    relabelled = generate_pool(300, seed=4)
    scores = relabelled["trajectories"].values()
    flipped = [r for r in scores if r.get("success_score") not in (None, 0.5)]
    for record in flipped[:20]:
        record["success_score"] = round(1.0 - record["success_score"], 3)
    seen = len(daemon.events("training run finished"))
    _write(pool / "se_darwin.json", relabelled)
    third = _trained_after(daemon, seen)
    assert third["data"]["relabelled"] == 20, json.dumps(third["data"])
    kept = dict(list(relabelled["trajectories"].items())[50:])
    seen = len(daemon.events("training run finished"))
    _write(pool / "se_darwin.json", {**relabelled, "trajectories": kept})
    daemon.wait_for(
        lambda: any(
            e["outcome"] == "up_to_date" for e in daemon.events("training run finished")[seen:]
        ),
        "an up-to-date run on the shrunk pool",
        180,
    )
    assert _runs(daemon, "failed") == 0


@pytest.mark.slow
def test_up_to_date_runs_start_no_child(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    """After the first run the pool is unchanged: each later run is answered by the data
    manifest in the daemon (no run process launched, no step), reporting the model's eval."""
    pool = tmp_path / "pool"
    pool.mkdir()
    _write(pool / "se_darwin.json", generate_pool(300, seed=4))
    daemon = daemon_factory(
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
            "GENESIS_FP16_AGENTS__SE_DARWIN__DATA_PATH": str(pool),
            "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "fp32",
            "GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_EPOCHS": "2",
            "GENESIS_FP16_SCHEDULE": "1",
        },
        fixtures=False,
    )
    first = _finished(daemon, 1)
    daemon.wait_for(lambda: _runs(daemon, "up_to_date") >= 2, "two up-to-date runs", 120)
    # Started by exec, forked by the run worker, or served by its resident run process (the
    # default): each is a launch.
    starts = (
        "launching the run's",
        "the run worker forked the run's",
        "the run worker's resident run process",
    )
    launches = [e for e in daemon.logs() if str(e.get("event", "")).startswith(starts)]
    assert len(launches) == 1, launches  # the first run's child only
    up = [e for e in daemon.events("training run finished") if e["outcome"] == "up_to_date"]
    assert up[0]["steps"] == 0 and up[0]["data"]["checked_by"] == "manifest"
    assert up[0]["eval"] == first["eval"]
    # The phases gauge shows the last run's: check only, the trained run's phases removed.
    assert (daemon.sample("genesis_fp16_run_phase_seconds", agent=AGENT, phase="check") or 0) > 0
    assert daemon.sample("genesis_fp16_run_phase_seconds", agent=AGENT, phase="train") is None
