"""The one run request: the same defaults for the daemon and `train`, flags on top."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from genesis_fp16.config.plugins import load_entry_point
from genesis_fp16.config.settings import AgentSettings, Settings
from genesis_fp16.jobs import run_request
from genesis_fp16.jobs.run_request import (
    RequestOverrides,
    expected_precision,
    plan_request,
)
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_agents.rlhf_ppo import plugin
from genesis_fp16_infrastructure.api import capabilities_of, run_plugin
from genesis_fp16_infrastructure.contract.plugin_api import ignored_request_fields
from genesis_fp16_infrastructure.folder import (
    AgentFolder,
)
from genesis_fp16_infrastructure.training.precision.precision_memory import remember_demotions
from genesis_fp16_infrastructure.training.reports import Demotion

AGENT = "rlhf_ppo"
DECLARED = capabilities_of(plugin)  # what the loader reads of it, once


pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py


def _settings(tmp_path: Path, **agent: object) -> Settings:
    spec = AgentSettings(**agent)  # type: ignore[arg-type]
    return Settings(state_dir=tmp_path, sample_count=8, agents={AGENT: spec})  # type: ignore[call-arg]


def test_budget_flags_then_the_agent_then_steps_per_run(tmp_path: Path) -> None:
    """Flags win; then the agent's STEPS or EPOCHS; then STEPS_PER_RUN; else the agent's own."""
    assert Settings().agent(AGENT).steps is None
    assert Settings(steps_per_run=9).agent(AGENT).steps == 9
    epochs = _settings(tmp_path, epochs=2).model_copy(update={"steps_per_run": 9})
    request = plan_request(epochs, AGENT, plugin, DECLARED, "cpu")
    assert (request.steps, request.epochs) == (None, 2)
    flagged = plan_request(epochs, AGENT, plugin, DECLARED, "cpu", RequestOverrides(steps=5))
    assert (flagged.steps, flagged.epochs) == (5, None)


def test_daemon_and_train_build_the_same_request(tmp_path: Path) -> None:
    """No flags: train's request is the daemon's (guard, options, data, budget, reason)."""
    settings = _settings(tmp_path, steps=4, options={"preset": "bf16_pure"})
    daemon = plan_request(settings, AGENT, plugin, DECLARED, "cpu")
    cli = plan_request(settings, AGENT, plugin, DECLARED, "cpu", RequestOverrides())
    # Each run quarantines to a new file of its own, in the agent's folder.
    assert daemon.quarantine_path != cli.quarantine_path
    assert daemon.quarantine_path.parent == cli.quarantine_path.parent  # type: ignore[union-attr]
    assert daemon == replace(cli, quarantine_path=daemon.quarantine_path)
    assert daemon.resume and not daemon.forced
    assert daemon.guard is not None and daemon.options == {"preset": "bf16_pure"}
    assert daemon.steps == 4 and daemon.data_path is not None and daemon.data_path.exists()
    flagged = plan_request(
        settings,
        AGENT,
        plugin,
        DECLARED,
        "cpu",
        RequestOverrides(steps=2, options={"preset": "fp16_all"}),
    )
    assert (flagged.steps, flagged.options["preset"]) == (2, "fp16_all")


def test_the_request_carries_the_run_memory_limit(tmp_path: Path) -> None:
    """The run's memory limit reaches the plugin (se_darwin sizes its largest pool by it)."""
    limited = Settings(state_dir=tmp_path, run_memory_limit_bytes=2**30)  # type: ignore[call-arg]
    assert plan_request(limited, AGENT, plugin, DECLARED, "cpu").memory_limit_bytes == 2**30
    off = Settings(state_dir=tmp_path, run_memory_limit_bytes=0)  # type: ignore[call-arg]
    assert plan_request(off, AGENT, plugin, DECLARED, "cpu").memory_limit_bytes is None


def test_compile_comes_from_the_agent_then_the_daemon_and_a_flag_wins(tmp_path: Path) -> None:
    """The request's compile: off by default, the agent's COMPILE, and --compile on top."""
    assert plan_request(_settings(tmp_path), AGENT, plugin, DECLARED, "cpu").compile == "off"
    settings = _settings(tmp_path, compile="on")
    assert plan_request(settings, AGENT, plugin, DECLARED, "cpu").compile == "on"
    flagged = plan_request(
        settings, AGENT, plugin, DECLARED, "cpu", RequestOverrides(compile="off")
    )
    assert flagged.compile == "off"


def test_guard_memory_lowers_the_settings_request_but_not_an_explicit_flag(
    tmp_path: Path,
) -> None:
    """A remembered fp16->bf16 demotion: fp16 from the settings runs bf16; --precision fp16 not."""
    settings = Settings(state_dir=tmp_path, ENABLE_FP16_TRAINING=True)  # type: ignore[call-arg]
    demotion = Demotion("fp16", "bf16", "overflow_rate", 5, 0)
    AgentFolder(tmp_path, AGENT).save_precision_memory(remember_demotions(None, [demotion]))
    request = plan_request(settings, AGENT, plugin, DECLARED, "cpu")
    assert (request.precision.requested, request.precision.floor) == ("fp16", "bf16")
    assert "precision guard memory" in request.precision.floor_reason
    assert expected_precision(request.precision, "cpu") == "bf16"
    flagged = plan_request(
        settings, AGENT, plugin, DECLARED, "cpu", RequestOverrides(precision="fp16")
    )
    assert (flagged.precision.requested, flagged.precision.floor) == ("fp16", None)
    assert flagged.precision_reason == "--precision fp16 on the command line"


def _ignored_warnings(logs: list[dict[str, object]]) -> dict[object, object]:
    return {r["field"]: r["set_by"] for r in logs if r["event"] == "agent ignores a request field"}


def test_an_agent_says_which_set_fields_it_ignores(tmp_path: Path) -> None:
    """A plugin that checkpoints only at the end: a set checkpoint cadence is a warning
    naming the setting or flag; defaults warn of nothing, and neither do se_darwin and
    rlhf_ppo, which honour every field (rlhf_ppo through fit())."""
    from types import MappingProxyType

    from genesis_fp16_agents.rlhf_ppo.plugin import RlhfPpoPlugin
    from genesis_fp16_agents.se_darwin import plugin as se_darwin

    class EndOnly(RlhfPpoPlugin):
        ignored_request_fields = MappingProxyType(
            {
                "checkpoint_steps": "it checkpoints once, when the run ends",
                "checkpoint_seconds": "it checkpoints once, when the run ends",
            }
        )

    cadence = Settings(state_dir=tmp_path, sample_count=8, checkpoint_steps=50)  # type: ignore[call-arg]
    flags = RequestOverrides(checkpoint_seconds=5.0)
    end_only = EndOnly()
    with capture_logs() as logs:
        plan_request(cadence, AGENT, end_only, capabilities_of(end_only), "cpu", flags)
    assert _ignored_warnings(logs) == {
        "checkpoint_steps": "GENESIS_FP16_CHECKPOINT_STEPS",
        "checkpoint_seconds": "--checkpoint-seconds",
    }
    assert all("rlhf_ppo: it checkpoints once" in str(r.get("instead")) for r in logs)
    with capture_logs() as logs:
        plan_request(_settings(tmp_path), AGENT, end_only, capabilities_of(end_only), "cpu")
        plan_request(cadence, AGENT, plugin, DECLARED, "cpu", flags)
        plan_request(cadence, "se_darwin", se_darwin, capabilities_of(se_darwin), "cpu", flags)
    assert _ignored_warnings(logs) == {}


def test_a_plugin_cannot_declare_a_field_the_request_lacks() -> None:
    """A misspelt ignored_request_fields entry is the plugin's bug, named at once."""

    misspelt = SimpleNamespace(name="misspelt", ignored_request_fields={"checkpoint_step": "x"})
    with pytest.raises(TypeError, match=r"misspelt: .* field: \['checkpoint_step'\]"):
        ignored_request_fields(misspelt)


def test_a_scheduled_budget_on_an_unchanged_pool_is_up_to_date(tmp_path: Path) -> None:
    """GENESIS_FP16_AGENTS__SE_DARWIN__STEPS=6: the daemon's first run trains 6 steps, the
    next on the same pool takes none (answered by the manifest), a grown pool trains 6."""
    from genesis_fp16_agents.se_darwin import plugin as se_darwin
    from genesis_fp16_infrastructure.data.synthetic import generate_pool

    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "a.json").write_text(json.dumps(generate_pool(200, seed=1)))
    spec = AgentSettings(steps=6, data_path=pool)  # type: ignore[call-arg]
    settings = Settings(state_dir=tmp_path / "state", agents={"se_darwin": spec})  # type: ignore[call-arg]
    runs = []
    for grow in (False, False, True):
        if grow:
            (pool / "b.json").write_text(json.dumps(generate_pool(60, seed=2, agent="new")))
        request = plan_request(settings, "se_darwin", se_darwin, capabilities_of(se_darwin), "cpu")
        check = request.snapshot.data if request.snapshot is not None else None
        if check is not None and check.up_to_date is not None:  # the daemon's: no child
            runs.append(TrainResult.from_json(check.up_to_date))
        else:
            runs.append(run_plugin(se_darwin, replace(request, precision="fp32")))
    assert [r.steps for r in runs] == [6, 0, 6]
    assert runs[1].up_to_date and runs[1].data is not None
    assert runs[1].data.checked_by == "manifest"


class _Counted:
    """A plugin that counts each read of its declarations (options, data_folder)."""

    api_version, name, description = 3, AGENT, "counts its declarations' reads"

    def __init__(self) -> None:
        self.reads = 0

    @property
    def options(self) -> tuple[object, ...]:
        self.reads += 1
        return ()

    @property
    def data_folder(self) -> bool:
        self.reads += 1
        return False

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        return out / "sample.json"

    def train(self, request: object) -> object: ...

    def probe_setup(self, data_path: Path | None, seed: int) -> object: ...


def test_each_plan_takes_the_capabilities_the_loader_read(tmp_path: Path) -> None:
    """The loaded plugin's record carries its capabilities; two plans given them read
    none of the plugin's declarations again (options, the default data path's folder)."""
    plugin = _Counted()
    entry = SimpleNamespace(
        name=AGENT, value="x:plugin", module="x", dist=None, load=lambda: plugin
    )
    record = load_entry_point(entry)  # type: ignore[arg-type]
    assert record.state == "loaded" and record.capabilities.data_folder is False
    at_load = plugin.reads
    for _ in range(2):
        plan = plan_request(_settings(tmp_path), AGENT, plugin, record.capabilities, "cpu")  # type: ignore[arg-type]
        assert str(plan.data_path).endswith("sample.json")
    assert at_load > 0 and plugin.reads == at_load


def test_a_run_planned_with_its_config_asks_the_settings_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's config carries the operator's precision, resolved with it: a plan given
    the run's config reads neither ``Settings.agent`` nor ``requested_precision`` again."""
    settings = _settings(tmp_path, precision="bf16")
    config = settings.agent(AGENT)

    def asked(*args: object, **kwargs: object) -> None:
        raise AssertionError("the plan read the settings again")

    monkeypatch.setattr(Settings, "agent", asked)
    monkeypatch.setattr(run_request, "requested_precision", asked)
    request = plan_request(settings, AGENT, plugin, DECLARED, "cpu", config=config)
    assert (request.precision.requested, request.precision_reason) == (
        "bf16",
        "GENESIS_FP16_AGENTS__RLHF_PPO__PRECISION=bf16",
    )
    monkeypatch.undo()  # a flag is the operator's, asked of requested_precision
    flagged = plan_request(
        settings, AGENT, plugin, DECLARED, "cpu", RequestOverrides(precision="fp32"), config
    )
    assert flagged.precision.requested == "fp32"  # a flag still wins over the config
