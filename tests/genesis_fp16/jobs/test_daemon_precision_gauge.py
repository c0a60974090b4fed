"""The precision gauge shows what trains: a reload during a run does not show the next run's.

In-process, without the scheduler: the CI failure this guards against was a race in the
daemon subprocess test (a reload set fp32 while the fp16 run's progress set fp16 again).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from genesis_fp16.config.plugins import LoadedPlugin
from genesis_fp16.config.settings import SettingsError, load_settings
from genesis_fp16.jobs.run_request import check_configured_options
from genesis_fp16.plugin_api import AgentPlugin
from genesis_fp16.service.daemon import Daemon
from genesis_fp16_infrastructure.api import Capabilities, capabilities_of
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory

AGENT = "agent_a"


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Daemon:
    for key in list(os.environ):
        if key.startswith("GENESIS_FP16_") or key in ("ENABLE_FP16_TRAINING", "NOTIFY_SOCKET"):
            monkeypatch.delenv(key)
    env_file = tmp_path / ".env"
    env_file.write_text(f"ENABLE_FP16_TRAINING=false\nGENESIS_FP16_STATE_DIR={tmp_path}\n")
    settings = load_settings(env_file)
    daemon = Daemon(settings, env_file, registry=CollectorRegistry())
    daemon.agents.plugins = {AGENT: LoadedPlugin(AgentPlugin.__new__(AgentPlugin), Capabilities())}
    return daemon


def _gauge(daemon: Daemon, precision: str) -> float | None:
    return daemon.registry.get_sample_value(
        "genesis_fp16_precision", {"agent": AGENT, "precision": precision}
    )


def test_running_agent_keeps_the_precision_of_its_run(daemon: Daemon) -> None:
    """ENABLE_FP16_TRAINING=false while an fp16 run trains: the gauge stays fp16 until it ends."""
    daemon.metrics.set_precision(AGENT, "fp16")
    daemon.context.running[AGENT] = ("cpu",)
    daemon._show_precisions()
    assert (_gauge(daemon, "fp16"), _gauge(daemon, "fp32")) == (1, 0)

    daemon.context.running.pop(AGENT)
    daemon._show_precisions()
    assert (_gauge(daemon, "fp16"), _gauge(daemon, "fp32")) == (0, 1)


def test_a_reload_that_switches_a_running_agent_shows_the_rerun_precision(daemon: Daemon) -> None:
    """A running fp16 agent whose precision the reload changed: the gauge shows fp32 at once."""
    daemon.metrics.set_precision(AGENT, "fp16")
    daemon.context.running[AGENT] = ("cpu",)
    daemon._show_precisions(frozenset({AGENT}))
    assert (_gauge(daemon, "fp16"), _gauge(daemon, "fp32")) == (0, 1)


def test_idle_agent_shows_the_guard_memory_before_its_first_run(
    daemon: Daemon, tmp_path: Path
) -> None:
    """A remembered fp16 -> bf16 demotion is what the gauge shows at start, not the fp16 asked."""
    daemon.env_file.write_text(f"ENABLE_FP16_TRAINING=true\nGENESIS_FP16_STATE_DIR={tmp_path}\n")
    daemon.context.settings = load_settings(daemon.env_file)
    memory = PrecisionMemory("fp16", "bf16", "overflow_rate", 15, 10, "2026-11-21T00:00:00Z")
    AgentFolder(tmp_path, AGENT).save_precision_memory(memory)
    daemon._show_precisions()
    assert (_gauge(daemon, "bf16"), _gauge(daemon, "fp16")) == (1, 0)


def test_reload_with_a_bad_agent_option_is_a_counted_failure(daemon: Daemon) -> None:
    """A .env option the agent does not declare: reload fails, counted, settings kept."""
    from genesis_fp16_agents.rlhf_ppo import plugin

    # What the scan thread records when it loads a plugin: the main thread checks these.
    daemon.agents.plugins = {"rlhf_ppo": LoadedPlugin(plugin, capabilities_of(plugin))}
    kept = daemon.settings
    text = daemon.env_file.read_text()
    daemon.env_file.write_text(text + "GENESIS_FP16_AGENTS__RLHF_PPO__OPTIONS__PRESETT=bf16_pure\n")
    assert daemon.reload() is False
    assert daemon.settings is kept
    failures = daemon.registry.get_sample_value(
        "genesis_fp16_config_reloads_total", {"outcome": "failure"}
    )
    assert failures == 1
    assert daemon.registry.get_sample_value("genesis_fp16_config_last_reload_successful") == 0


def test_settings_for_an_agent_that_is_not_installed_fail_the_reload(daemon: Daemon) -> None:
    """GENESIS_FP16_AGENTS__SE_DARVIN__STEPS (a typo): a failed reload, 'did you mean'."""
    kept = daemon.settings
    text = daemon.env_file.read_text()
    daemon.env_file.write_text(text + "GENESIS_FP16_AGENTS__SE_DARVIN__STEPS=5\n")
    with pytest.raises(SettingsError, match="no agent 'se_darvin' is installed; did you mean se_"):
        check_configured_options(load_settings(daemon.env_file), {}, ["se_darwin", "rlhf_ppo"])
    assert daemon.reload() is False
    assert daemon.settings is kept
    failures = daemon.registry.get_sample_value(
        "genesis_fp16_config_reloads_total", {"outcome": "failure"}
    )
    assert failures == 1


def test_a_reload_keeps_the_restart_only_settings_in_force(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new GENESIS_FP16_STATE_DIR in .env: the reload succeeds, the rollback switch it
    also carries takes effect, and the runs keep the state folder the daemon locked (a run
    planned after it wrote into a folder no daemon held)."""
    elsewhere = tmp_path / "elsewhere"
    daemon.env_file.write_text(f"ENABLE_FP16_TRAINING=true\nGENESIS_FP16_STATE_DIR={elsewhere}\n")
    synced: list[Path] = []  # the scheduler, not started here: what it was handed
    scheduler = SimpleNamespace(sync=lambda new, plugins: synced.append(new.state_dir))
    monkeypatch.setattr(daemon, "scheduler", scheduler, raising=False)
    assert daemon.reload() is True
    assert daemon.context.settings.state_dir == tmp_path and synced == [tmp_path]
    assert daemon.context.settings.enable_fp16_training is True
