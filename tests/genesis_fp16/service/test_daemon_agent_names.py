"""A real daemon beside hostile entry points: names that are paths are refused, and nothing
is written outside the state folder; a name registered twice is said once, not per tick.

Every plugin is allowed (no allowlist, as an operator who trusts the installed packages
runs it), so only the name check stands between ``../../t6_escape`` and the file system.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from daemon_harness import FIXTURE_PLUGINS, DaemonFactory, DaemonProcess, daemon_env

GOOD = "fixture_good"
HOSTILE = ("../../t6_escape", "t6_dir/sub")
HEARTBEAT = 0.2
TICKS = 100


def _hostile_distribution(folder: Path) -> None:
    """A distribution registering two path names and, a second time, fixture_good (its
    module exits the process if anything imports it)."""
    info = folder / "hostile_agents-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-agents\nVersion: 1.0\n")
    lines = [f"{name} = fixture_agents.good:plugin" for name in HOSTILE]
    lines.append(f"{GOOD} = shadowing_module:plugin")
    (info / "entry_points.txt").write_text("[genesis_fp16.agents]\n" + "\n".join(lines) + "\n")
    (folder / "shadowing_module.py").write_text("raise SystemExit('the shadowing plugin ran')\n")


def _tree(root: Path, skip: Path) -> set[str]:
    """Every path under ``root`` but those under ``skip`` (the state folder)."""
    return {
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path != skip and skip not in path.parents
    }


def _when(record: dict[str, object]) -> float:
    return datetime.fromisoformat(str(record["timestamp"])).timestamp()


def _ticked(daemon: DaemonProcess, ready: float) -> bool:
    """The scheduler's heartbeat is ``TICKS`` heartbeats past the daemon's start."""
    beat = daemon.sample("genesis_fp16_scheduler_heartbeat_timestamp_seconds") or 0.0
    return beat - ready >= TICKS * HEARTBEAT


def _said(daemon: DaemonProcess, text: str) -> list[str]:
    return [str(r["event"]) for r in daemon.logs() if text in str(r.get("event"))]


def test_path_names_are_refused_nothing_escapes_and_a_shadow_is_said_once(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Entry points named ../../t6_escape and t6_dir/sub: refused once each in the log,
    counted, listed by `agents`; after a run of the good agent and 100 heartbeats the tree
    around the state folder holds nothing new, and the status lists neither. fixture_good,
    registered twice, is said once in those 100 heartbeats and `agents` names both."""
    hot = tmp_path / "hot"
    _hostile_distribution(hot)
    state = tmp_path / "a" / "b" / "state"  # ../../ from its agents/ lands in tmp_path/a/b
    state.parent.mkdir(parents=True)
    env = {
        # The fixtures first: their fixture_good is the one used.
        "PYTHONPATH": f"{FIXTURE_PLUGINS}:{hot}",
        "GENESIS_FP16_STATE_DIR": str(state),
        "GENESIS_FP16_HEARTBEAT_SECONDS": str(HEARTBEAT),
        # Every loaded agent runs each second but the heavy built-ins, turned off: a
        # hostile name that got through would run and write where its path leads.
        "GENESIS_FP16_SCHEDULE": "1",
        "GENESIS_FP16_AGENTS__SE_DARWIN__ENABLED": "false",
        "GENESIS_FP16_AGENTS__RLHF_PPO__ENABLED": "false",
        "GENESIS_FP16_AGENTS__FIXTURE_RAISING__ENABLED": "false",
        "GENESIS_FP16_STEPS_PER_RUN": "2",
        "GENESIS_FP16_SAMPLE_COUNT": "64",
    }
    before = _tree(tmp_path, state)
    daemon = daemon_factory(env, fixtures=False)
    (ready,) = daemon.events("daemon ready")
    assert GOOD in ready["agents"] and not set(HOSTILE) & set(ready["agents"])
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_training_runs_total", agent=GOOD, outcome="success"),
        "a run of the good agent",
        120,
    )
    daemon.wait_for(lambda: _ticked(daemon, _when(ready)), f"{TICKS} heartbeats", 120)

    for name in HOSTILE:
        (line,) = _said(daemon, f"agent name {name!r} is not valid")
        assert line.startswith("entry point refused:"), line
    assert daemon.sample("genesis_fp16_plugin_names_refused_total") == len(HOSTILE)
    (shadow,) = _said(daemon, "is registered by")
    assert "hostile-agents (shadowing_module:plugin)" in shadow
    status = json.loads(daemon.get("/status.json")[1])
    names = {agent["name"] for agent in status["agents"]}
    assert GOOD in names and not {n for n in names if n.startswith("t6")}, names
    (good,) = [agent for agent in status["agents"] if agent["name"] == GOOD]
    assert any("hostile-agents" in problem for problem in good["problems"]), good  # the page
    assert _tree(tmp_path, state) - before <= {"daemon.log"}

    listing = subprocess.run(
        [str(Path(sys.executable).parent / "genesis-fp16"), "agents", "--json"],
        cwd=tmp_path,
        env={**daemon_env(env, fixtures=False), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 1, listing.stderr
    records = {record["name"]: record for record in json.loads(listing.stdout)}
    assert all(records[name]["state"] == "refused" for name in HOSTILE)
    assert "hostile-agents" in records[GOOD]["shadowed"] and records[GOOD]["state"] == "loaded"
    assert _tree(tmp_path, state) - before <= {"daemon.log"}
