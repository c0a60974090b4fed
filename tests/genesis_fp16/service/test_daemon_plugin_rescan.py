"""Plugins installed and uninstalled while a real daemon runs reach it: on SIGHUP, and at
its ticks, with no restart.

A plugin is "installed" the way pip leaves one: its module on the daemon's path (a
PYTHONPATH folder, empty when the daemon starts) and a ``.dist-info`` folder naming its
entry point, which appears whole (renamed into place, as pip's RECORD comes last).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

from daemon_harness import FIXTURE_PLUGINS, DaemonFactory, DaemonProcess

from genesis_fp16.service.state_lock import LOCK_NAME, read_holder

GOOD = "fixture_good"
HOT = "fixture_hot"


def _install(folder: Path, name: str, module: str, source: str) -> Path:
    """Put plugin ``name`` (module ``module`` with ``source``) on ``folder``; its dist-info."""
    (folder / f"{module}.py").write_text(source)
    staging = folder.parent / f"staging-{name}"
    info = staging / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {module}:plugin\n")
    return info.rename(folder / info.name)


def _env(hot: Path, heartbeat: str) -> dict[str, str]:
    return {
        "PYTHONPATH": f"{hot}:{FIXTURE_PLUGINS}",
        "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{GOOD},{HOT},broken_hot",
        "GENESIS_FP16_HEARTBEAT_SECONDS": heartbeat,
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_STEPS_PER_RUN": "12",
        "GENESIS_FP16_SAMPLE_COUNT": "64",
        "GENESIS_FP16_LOG_INTERVAL": "1",
    }


def _ready(daemon: DaemonProcess) -> str:
    status, body = daemon.get("/readyz")
    assert status == 200, body
    return body.strip()


def _runs(daemon: DaemonProcess, agent: str, outcome: str = "success") -> float:
    return daemon.sample("genesis_fp16_training_runs_total", agent=agent, outcome=outcome) or 0.0


HOT_SOURCE = f"from fixture_agents.good import FixtureAgent\n\nplugin = FixtureAgent({HOT!r})\n"
# A run of 12 one-second steps: uninstalled after its first step, it is still training when
# the signal is handled, however loaded the machine.
SLOW_HOT_SOURCE = HOT_SOURCE.replace(f"({HOT!r})", f"({HOT!r}, step_seconds=1.0)")


def _progress(daemon: DaemonProcess, agent: str) -> list[dict[str, object]]:
    """The agent's progress lines ("step 1/12, 8%, ETA 11 s")."""
    return [r for r in daemon.logs() if r.get("progress") and r.get("agent") == agent]


def test_sighup_loads_a_new_plugin_and_an_uninstalled_one_stops_after_its_run(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """Installed while the daemon runs, then SIGHUP: the agent is listed in /readyz, gets
    its schedule and trains; uninstalled mid-run, then SIGHUP: its run finishes, it leaves
    /readyz and the schedule, and the lock file no longer names it. Ticks never rescan in
    this daemon (an hour apart), so the signal did it."""
    hot = tmp_path / "hot"
    hot.mkdir()
    daemon = daemon_factory(_env(hot, "3600"), fixtures=False)
    assert _ready(daemon) == f"ready: agents {GOOD}"
    lock = daemon.state_dir / LOCK_NAME
    assert read_holder(lock).agents == (GOOD,)

    info = _install(hot, HOT, "hot_agent", SLOW_HOT_SOURCE)
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: _ready(daemon) == f"ready: agents {GOOD}, {HOT}", "/readyz names it")
    assert read_holder(lock).agents == (GOOD, HOT)
    # Its run is under way (RUN_AT_START): uninstall it while it trains.
    daemon.wait_for(lambda: _progress(daemon, HOT), "the new agent's first step", timeout=120)
    shutil.rmtree(info)
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: _ready(daemon) == f"ready: agents {GOOD}", "/readyz without it")
    (removed,) = daemon.events("agent removed: plugin uninstalled; a run in progress finishes")
    assert removed["agent"] == HOT
    assert read_holder(lock).agents == (GOOD,)
    # The run under way finishes in full; nothing of the agent is scheduled any more.
    daemon.wait_for(lambda: _runs(daemon, HOT) == 1, "its run to finish", timeout=120)
    (finished,) = [r for r in daemon.events("training run finished") if r.get("agent") == HOT]
    assert finished["steps"] == 12 and finished["outcome"] == "success"
    # Removed mid-run: steps were still taken after it (one clock, the daemon's log).
    assert removed["timestamp"] < _progress(daemon, HOT)[-1]["timestamp"]

    def hot_row() -> dict[str, Any]:
        status = json.loads(daemon.get("/status.json")[1])
        (row,) = [a for a in status["agents"] if a["name"] == HOT]  # its folder outlives it
        return row

    # The run is counted before its job lets go of the agent ("running now" until then).
    note = "has not loaded this agent"
    daemon.wait_for(lambda: note in (hot_row()["next_run"]["note"] or ""), "the job's end")
    row = hot_row()
    assert row["installed"] is False and row["next_run"]["at"] is None, row
    assert _runs(daemon, GOOD) == 1  # the other agent was left alone


def test_a_tick_loads_a_new_plugin_and_tries_a_broken_one_once(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """With no signal, the next tick loads a new plugin, which trains; a broken one is
    logged once, naming its file and line, however many ticks pass after it."""
    hot = tmp_path / "hot"
    hot.mkdir()
    daemon = daemon_factory(
        {**_env(hot, "0.5"), "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{HOT},broken_hot"},
        fixtures=False,
    )
    assert _ready(daemon) == "ready: agents none"
    _install(hot, "broken_hot", "broken_module", '"""Broken."""\n\nimport not_installed_anywhere\n')
    _install(hot, HOT, "hot_agent", HOT_SOURCE)
    daemon.wait_for(lambda: _runs(daemon, HOT) == 1, "the new agent's first run", timeout=60)
    assert _ready(daemon) == f"ready: agents {HOT}"
    failed = [r for r in daemon.events("plugin failed to load") if r.get("plugin") == "broken_hot"]
    assert len(failed) == 1, failed
    assert failed[0]["location"] == f"{hot / 'broken_module.py'}:3"
    assert "not_installed_anywhere" in failed[0]["error"]
