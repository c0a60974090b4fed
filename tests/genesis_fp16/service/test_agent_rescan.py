"""The daemon's plugin rescan, in-process: an editable install's new ``.pth`` file, a new
plugin's configured options, and a failed plugin tried again only when reinstalled."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS, clear_daemon_env
from prometheus_client import CollectorRegistry

from genesis_fp16.config.settings import Settings, load_settings
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.service import agent_rescan
from genesis_fp16.service.agent_rescan import AgentRescan
from genesis_fp16.service.daemon import Daemon
from genesis_fp16.service.scheduler import AgentScheduler
from genesis_fp16.service.state_lock import LOCK_NAME, acquire_state_folder, read_holder


def _dist(folder: Path, name: str, module: str, record: str | None = None) -> None:
    info = folder / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {module}:plugin\n")
    if record is not None:
        (info / "RECORD").write_text(record)


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A site-packages folder of our own on sys.path, with the fixture plugins importable."""
    clear_daemon_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(agent_rescan.site, "getsitepackages", lambda: [str(site)])
    monkeypatch.setattr(agent_rescan.site, "ENABLE_USER_SITE", False)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(FIXTURE_PLUGINS))
    before = set(sys.modules)
    yield site
    for name in set(sys.modules) - before:
        if name.startswith(("fixture_agents", "edit_agent", "flaky_agent", "slow_agent")):
            del sys.modules[name]


def _parts(tmp_path: Path) -> tuple[Settings, AgentRescan, AgentScheduler, int]:
    settings = load_settings()
    metrics = DaemonMetrics(CollectorRegistry(), "test")
    rescan = AgentRescan(settings.plugin_allowlist, metrics)
    rescan.load(settings)
    fd = acquire_state_folder(tmp_path, "serve")
    scheduler = AgentScheduler(settings, lambda agent, plugin: None, lambda: None, owner_fd=fd)
    scheduler.start(settings, rescan.plugins)
    return settings, rescan, scheduler, fd


def _failures(rescan: AgentRescan, plugin: str) -> float | None:
    registry = rescan.metrics.registry
    return registry.get_sample_value("genesis_fp16_plugin_load_failures_total", {"plugin": plugin})


def test_an_editable_install_is_loaded_through_its_new_pth_file(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip install -e leaves a dist-info and a .pth naming the source folder, which site.py
    reads only at start-up: the rescan reads it, so the plugin imports and is scheduled."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "edit_agent")
    settings, rescan, scheduler, fd = _parts(tmp_path)
    try:
        assert rescan.plugins == {}
        source = tmp_path / "src"
        source.mkdir()
        (source / "edit_agent.py").write_text(
            "from fixture_agents.good import FixtureAgent\nplugin = FixtureAgent('edit_agent')\n"
        )
        _dist(site_dir, "edit_agent", "edit_agent")
        (site_dir / "__editable__.edit_agent-0.1.pth").write_text(f"{source}\n")
        assert rescan.rescan(settings, scheduler)
        assert list(rescan.plugins) == ["edit_agent"] and str(source) in sys.path
        assert scheduler.scheduled_agents() == ["edit_agent"]
        assert read_holder(tmp_path / LOCK_NAME).agents == ("edit_agent",)
        assert not rescan.rescan(settings, scheduler)  # nothing new: no change
    finally:
        scheduler.shutdown()
        os.close(fd)
        sys.path[:] = [p for p in sys.path if p != str(tmp_path / "src")]


def test_a_failed_plugin_is_tried_again_on_reinstall_or_sighup_not_at_each_tick(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin whose module is not there yet (pip still copying) fails once; ticks leave
    it alone; a changed RECORD (pip done) or a SIGHUP's retry loads it."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "flaky_agent")
    settings, rescan, scheduler, fd = _parts(tmp_path)
    try:
        _dist(site_dir, "flaky_agent", "flaky_agent", record="")
        assert not rescan.rescan(settings, scheduler)
        assert not rescan.rescan(settings, scheduler)
        assert _failures(rescan, "flaky_agent") == 1  # tried once, not at every tick
        (site_dir / "flaky_agent.py").write_text(
            "from fixture_agents.good import FixtureAgent\nplugin = FixtureAgent('flaky_agent')\n"
        )
        info = site_dir / "flaky_agent-0.1.dist-info" / "RECORD"
        info.write_text("flaky_agent.py,,\n")  # pip's last file
        assert rescan.rescan(settings, scheduler)
        assert list(rescan.plugins) == ["flaky_agent"]
    finally:
        scheduler.shutdown()
        os.close(fd)


def test_a_new_plugin_with_a_bad_configured_option_stays_out(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An option the new agent does not declare: logged as a failed load and counted; the
    daemon goes on with the agents it had, and a fixed setting plus SIGHUP loads it."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "fixture_good,flaky_agent")
    settings, rescan, scheduler, fd = _parts(tmp_path)
    try:
        assert list(rescan.plugins) == ["fixture_good"]
        (site_dir / "flaky_agent.py").write_text(
            "from fixture_agents.good import FixtureAgent\nplugin = FixtureAgent('flaky_agent')\n"
        )
        _dist(site_dir, "flaky_agent", "flaky_agent")
        monkeypatch.setenv("GENESIS_FP16_AGENTS__FLAKY_AGENT__OPTIONS__DEPTH", "3")
        bad = load_settings()
        assert not rescan.rescan(bad, scheduler)
        assert _failures(rescan, "flaky_agent") == 1
        monkeypatch.delenv("GENESIS_FP16_AGENTS__FLAKY_AGENT__OPTIONS__DEPTH")
        assert not rescan.rescan(settings, scheduler)  # a tick: not tried again
        assert rescan.rescan(settings, scheduler, retry_failed=True)  # SIGHUP
        assert sorted(rescan.plugins) == ["fixture_good", "flaky_agent"]
    finally:
        scheduler.shutdown()
        os.close(fd)


def _stuck(rescan: AgentRescan, plugin: str) -> float | None:
    registry = rescan.metrics.registry
    return registry.get_sample_value("genesis_fp16_plugin_load_stuck", {"plugin": plugin})


def test_an_import_past_its_deadline_is_stuck_then_taken_when_it_returns(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin whose import waits for a file: the rescan returns after the deadline with it
    stuck (the gauge 1, the other agent kept); once the import returns, the next rescan
    loads and schedules it and the gauge is 0."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "fixture_good,slow_agent")
    settings, rescan, scheduler, fd = _parts(tmp_path)
    rescan.deadline = 0.5
    release = tmp_path / "release"
    (site_dir / "slow_agent.py").write_text(
        "import pathlib, time\n"
        f"while not pathlib.Path({str(release)!r}).exists():\n    time.sleep(0.05)\n"
        "from fixture_agents.good import FixtureAgent\nplugin = FixtureAgent('slow_agent')\n"
    )
    try:
        _dist(site_dir, "slow_agent", "slow_agent")
        assert not rescan.rescan(settings, scheduler)
        assert list(rescan.stuck) == ["slow_agent"] and _stuck(rescan, "slow_agent") == 1
        assert not rescan.rescan(settings, scheduler)  # still importing: still stuck
        assert list(rescan.plugins) == ["fixture_good"]
        release.touch()
        deadline = time.monotonic() + 60
        while not rescan.rescan(settings, scheduler) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(rescan.plugins) == ["fixture_good", "slow_agent"]
        assert rescan.stuck == {} and _stuck(rescan, "slow_agent") == 0
        assert read_holder(tmp_path / LOCK_NAME).agents == ("fixture_good", "slow_agent")
    finally:
        release.touch()
        scheduler.shutdown()
        os.close(fd)


def test_the_daemon_waits_for_an_import_only_its_configured_deadline(
    site_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS=0.5: the daemon's start-up load gives up on
    an import that returns 10 s later and lists it stuck (the default 30 s would load it)."""
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_ALLOWLIST", "late_agent")
    monkeypatch.setenv("GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS", "0.5")
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path / "state"))
    release = tmp_path / "release"
    (site_dir / "late_agent.py").write_text(
        "import pathlib, time\n"
        f"while not pathlib.Path({str(release)!r}).exists():\n    time.sleep(0.05)\n"
        "from fixture_agents.good import FixtureAgent\nplugin = FixtureAgent('late_agent')\n"
    )
    _dist(site_dir, "late_agent", "late_agent")
    settings = load_settings()
    daemon = Daemon(settings, tmp_path / ".env", CollectorRegistry(), notifier=None)
    timer = threading.Timer(10.0, release.touch)
    timer.start()
    try:
        daemon.agents.load(settings)
        assert daemon.agents.plugins == {} and list(daemon.agents.stuck) == ["late_agent"]
        assert _stuck(daemon.agents, "late_agent") == 1
    finally:
        timer.cancel()
        release.touch()
        for thread in threading.enumerate():
            if thread.name == "plugin-import-late_agent":
                thread.join(timeout=60)
        sys.modules.pop("late_agent", None)
