"""A run the daemon's SIGTERM stopped mid-run is continued by the next daemon's run, from
its own checkpoint to its own budget, and its candidate is judged once (issue 93)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, child_wait, daemon_env
from judged_daemon import AGENT, install_scaffold, judged_env, write_records

# Per agent: a budget long enough to be stopped mid-run under load (GENESIS_FP16_STEPS_PER_RUN),
# and the step after which SIGTERM comes.
# The scaffold's agent (`new-agent`, judged_daemon.AGENT) steps fast: a long budget.
BUDGETS = {"se_darwin": (1500, 30), "rlhf_ppo": (200, 8), AGENT: (20000, 50)}


_INSTALLED: dict[Path, Path] = {}  # a test's folder: its scaffold package's path entry


def _settings(agent: str, workdir: Path) -> dict[str, str]:
    settings = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": agent,
        "ENABLE_FP16_TRAINING": "false",
        "GENESIS_FP16_STEPS_PER_RUN": str(BUDGETS[agent][0]),
        "GENESIS_FP16_CHECKPOINT_STEPS": "10",
        "GENESIS_FP16_LOG_INTERVAL": "1",
        "GENESIS_FP16_SAMPLE_COUNT": "300",
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_RUN_AT_START": "false",
    }
    if agent != AGENT:
        return settings
    data = workdir / "records.jsonl"
    if workdir not in _INSTALLED:
        _INSTALLED[workdir] = install_scaffold(workdir / "plugin")
        write_records(data, 200, seed=0)
    scaffold = judged_env(_INSTALLED[workdir], data)
    scaffold["PYTHONPATH"] = os.pathsep.join(
        [scaffold["PYTHONPATH"], *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    del scaffold["GENESIS_FP16_AGENTS__MY_JUDGED__STEPS"], scaffold["GENESIS_FP16_SCHEDULE"]
    return {**settings, "GENESIS_FP16_CHECKPOINT_STEPS": "100", **scaffold}


FINISHED = "training run finished"
RUN_DEADLINE = 300.0  # a run's child on a loaded 2-core machine: a deadline


def run_command(workdir: Path, agent: str) -> None:
    """`genesis-fp16 run AGENT` in the daemon's folder, with its settings."""
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", agent],
        cwd=workdir,
        env=daemon_env(_settings(agent, workdir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def runs(daemon: DaemonProcess, agent: str) -> list[dict[str, Any]]:
    return [r for r in daemon.events(FINISHED) if r.get("agent") == agent]


def _reached(daemon: DaemonProcess, agent: str) -> int:
    """The last step the daemon's progress lines reported of the agent's run."""
    found = [r for r in daemon.logs() if r.get("progress") and r.get("agent") == agent]
    return int(found[-1]["step"]) if found else 0


def _candidates(state: Path, agent: str) -> list[Path]:
    root = state / "agents" / agent / "checkpoints" / "candidates"
    return sorted(p for p in root.glob("*") if p.is_dir())


def _steps(candidate: Path) -> list[int]:
    return sorted(int(p.name[5:15]) for p in candidate.glob("ckpt-*.pt"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("agent", sorted(BUDGETS))
def test_a_run_stopped_by_sigterm_is_continued_to_its_budget_and_judged_once(
    daemon_factory: DaemonFactory, tmp_path: Path, agent: str
) -> None:
    """SIGTERM to the daemon once its run has reported a few steps: the run stops with a
    checkpoint and no verdict; the next daemon's run continues that candidate (no new
    one) from its newest checkpoint, ends at its budget (not a budget past the checkpoint)
    and promotes it (the first model), judged once. At 2c6d7b6d the stopped candidate
    stayed ``undecided`` and the next run trained a new one from the start."""
    steps, stop_after = BUDGETS[agent]
    first = daemon_factory(_settings(agent, tmp_path))
    run_command(tmp_path, agent)
    first.wait_for(
        lambda: _reached(first, agent) >= stop_after, "a few steps", child_wait(RUN_DEADLINE)
    )
    first.signal(signal.SIGTERM)
    assert first.wait_exit(child_wait(120)) == 0
    (stopped,) = runs(first, agent)
    assert stopped["outcome"] == "stopped", stopped
    state = first.state_dir
    (candidate,) = _candidates(state, agent)
    assert not (candidate / "verdict.json").exists()
    cut = max(_steps(candidate))
    assert stop_after <= cut < steps

    second = daemon_factory(_settings(agent, tmp_path))
    run_command(tmp_path, agent)
    (done,) = second.wait_for(lambda: runs(second, agent), "the next run", child_wait(RUN_DEADLINE))
    assert done["outcome"] == "success", done
    assert _candidates(state, agent) == [candidate]  # continued, no new candidate
    assert max(_steps(candidate)) == steps  # to its own budget, not past its checkpoint
    # From its own checkpoint: the first step it reports is the one after it (not step 1).
    steps_seen = [r["step"] for r in second.logs() if r.get("progress") and r["agent"] == agent]
    assert steps_seen[0] == cut + 1, steps_seen[:3]
    verdict = json.loads((candidate / "verdict.json").read_text())
    assert verdict["outcome"] == "promoted"


def _rollback(env_file: Path, value: str) -> None:
    """The rollback switch in the daemon's .env, with an mtime of its own (the watcher
    compares mtimes)."""
    env_file.write_text(f"ENABLE_FP16_TRAINING={value}\n")
    stamp = env_file.stat().st_mtime_ns + 2 * 10**9
    os.utime(env_file, ns=(stamp, stamp))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("agent", ["rlhf_ppo", "se_darwin", AGENT])
def test_a_run_stopped_by_the_fp32_rollback_is_continued_in_fp32_and_judged_once(
    daemon_factory: DaemonFactory, tmp_path: Path, agent: str
) -> None:
    """The agent (se_darwin, rlhf_ppo, the scaffold's) trains in fp16
    (ENABLE_FP16_TRAINING=true in .env); the switch turned to false mid-run stops it with a
    checkpoint, and the rerun the reload starts continues the same candidate from that
    checkpoint, in fp32 (its start's note says the rollback), to its own budget, and
    promotes it once."""
    steps, stop_after = BUDGETS[agent]
    settings = _settings(agent, tmp_path)
    del settings["ENABLE_FP16_TRAINING"]  # the .env's, edited below
    # The scaffold's settings pin it to fp32 (judged_env): here the .env decides.
    settings.pop(f"GENESIS_FP16_AGENTS__{AGENT.upper()}__PRECISION", None)
    env_file = tmp_path / ".env"
    _rollback(env_file, "true")
    daemon = daemon_factory(settings)
    run_command(tmp_path, agent)
    daemon.wait_for(
        lambda: _reached(daemon, agent) >= stop_after, "a few steps", child_wait(RUN_DEADLINE)
    )
    _rollback(env_file, "false")
    stopped, done = daemon.wait_for(
        lambda: runs(daemon, agent)[1:] and runs(daemon, agent),
        "the stopped run and its rerun",
        child_wait(2 * RUN_DEADLINE),
    )
    assert stopped["outcome"] == "stopped" and stopped["precision_used"] == "fp16", stopped
    assert done["outcome"] == "success" and done["precision_used"] == "fp32", done
    (candidate,) = _candidates(daemon.state_dir, agent)  # continued, no new candidate
    assert Path(stopped["checkpoint"]).parent.name == candidate.name
    cut = int(Path(stopped["checkpoint"]).name[5:15])
    assert stop_after <= cut < steps and max(_steps(candidate)) == steps
    # From the stopped run's checkpoint: the rerun's first step is the one after it.
    rerun = [
        r["step"] for r in daemon.logs() if r.get("progress") and r.get("run_id") == done["run_id"]
    ]
    assert rerun[0] == cut + 1, rerun[:3]
    started = [r for r in daemon.events("training run started") if r.get("agent") == agent]
    assert [r["precision"] for r in started] == ["fp16", "fp32"], started
    assert "ENABLE_FP16_TRAINING=false (rollback" in started[1]["reason"], started[1]
    verdict = json.loads((candidate / "verdict.json").read_text())
    assert verdict["outcome"] == "promoted"
