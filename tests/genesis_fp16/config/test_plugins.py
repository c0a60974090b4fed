"""Plugin discovery: allowlist before import, API check, states, unknown-name errors."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS

from genesis_fp16.config import plugins
from genesis_fp16.config.plugins import (
    PluginError,
    discover_plugins,
    installed_entry_points,
    load_plugin,
)


@pytest.fixture(autouse=True)
def fixture_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Install the fixture distribution for this test and forget its modules afterwards."""
    monkeypatch.syspath_prepend(str(FIXTURE_PLUGINS))
    yield
    for name in [m for m in sys.modules if m.startswith("fixture_agents")]:
        del sys.modules[name]


def test_states_of_good_broken_wrong_api_and_factory_plugins() -> None:
    """Each fixture gets its state; errors say what went wrong; a factory is called."""
    allow = ["fixture_good", "fixture_broken", "fixture_wrong_api", "fixture_raising"]
    records = {r.name: r for r in discover_plugins(allow)}
    assert records["fixture_good"].state == "loaded"
    assert records["fixture_good"].distribution == "genesis-fp16-fixture-agents"
    assert records["fixture_raising"].state == "loaded"  # loaded through make_plugin()
    assert records["fixture_raising"].plugin is not None
    assert records["fixture_broken"].state == "failed"
    assert "not_installed_anywhere" in str(records["fixture_broken"].error)
    assert records["fixture_wrong_api"].state == "wrong_api"
    assert "99" in str(records["fixture_wrong_api"].error)


def test_a_plugin_for_api_version_1_is_refused_and_told_what_changed() -> None:
    """Version 2 made request.precision a PrecisionRequest: a version-1 plugin is refused,
    and its error names request.precision.requested, what it must read instead."""
    import fixture_agents.wrong_api as wrong  # the module the entry point loads

    wrong.plugin.api_version = 1
    records = {r.name: r for r in discover_plugins(["fixture_wrong_api"])}
    record = records["fixture_wrong_api"]
    assert record.state == "wrong_api" and record.plugin is None
    assert "api_version 1, this genesis-fp16 supports 2" in str(record.error)
    assert "request.precision.requested" in str(record.error)


def test_allowlist_is_applied_before_import() -> None:
    """Plugins outside the allowlist are listed as not_allowed and never imported."""
    records = {r.name: r for r in discover_plugins(["fixture_good"])}
    assert records["fixture_broken"].state == "not_allowed"
    assert records["fixture_wrong_api"].state == "not_allowed"
    assert "fixture_agents.broken" not in sys.modules
    assert "fixture_agents.wrong_api" not in sys.modules
    assert "fixture_agents.good" in sys.modules


def test_load_plugin_imports_one_and_explains_unknown_names() -> None:
    """load_plugin imports only the named plugin; an unknown name lists the known ones."""
    assert load_plugin("fixture_good").plugin.name == "fixture_good"
    assert "fixture_agents.broken" not in sys.modules
    with pytest.raises(PluginError, match=r"unknown agent 'nope'; known agents: .*fixture_good"):
        load_plugin("nope")
    with pytest.raises(PluginError, match=r"fixture_broken.*failed.*not_installed_anywhere"):
        load_plugin("fixture_broken")
    with pytest.raises(PluginError, match="not in GENESIS_FP16_PLUGIN_ALLOWLIST"):
        load_plugin("fixture_good", allowlist=["se_darwin"])


def test_a_package_earlier_on_the_path_cannot_replace_a_built_in_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another distribution registering se_darwin first on sys.path: the built-in one is kept,
    the other never imported, its record names both, and a warning names both once in the
    process however often the entry points are read."""
    info = tmp_path / "evil_agents-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-agents\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[genesis_fp16.agents]\nse_darwin = evil:plugin\n")
    (tmp_path / "evil.py").write_text("raise SystemExit('the shadowing plugin was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (record,) = [r for r in discover_plugins(["se_darwin"]) if r.name == "se_darwin"]
    assert record.value == "genesis_fp16_agents.se_darwin:plugin" and record.state == "loaded"
    assert "evil-agents (evil:plugin)" in str(record.shadowed)
    assert str(record.shadowed).endswith("using genesis-fp16's")
    monkeypatch.setattr(plugins, "_said", set())  # this process has said nothing yet
    with caplog.at_level(logging.WARNING):
        for _ in range(100):  # a hundred ticks of the daemon's rescan
            assert "se_darwin" in installed_entry_points()
    messages = [r.getMessage() for r in caplog.records if "evil-agents" in r.getMessage()]
    assert len(messages) == 1 and "genesis-fp16" in messages[0], messages


def _dist(root: Path, name: str, value: str) -> None:
    """A distribution on ``root`` registering agent ``name`` as ``value``: its dist-info."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {value}\n")


def test_a_failed_import_names_the_plugins_own_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raise in the module, a missing dependency imported two modules deep and a syntax
    error each name the plugin's file and line, in the error and as its location."""
    _dist(tmp_path, "deep_agent", "deep_agent:plugin")
    _dist(tmp_path, "typo_agent", "typo_agent:plugin")
    package = tmp_path / "deep_agent"
    package.mkdir()
    (package / "__init__.py").write_text('"""Deep."""\nfrom deep_agent import helper\n')
    (package / "helper.py").write_text("import os\n\nimport not_a_dependency_anyone_has\n")
    (tmp_path / "typo_agent.py").write_text("plugin = 1\ndef broken(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    records = {r.name: r for r in discover_plugins(["fixture_broken", "deep_agent", "typo_agent"])}
    broken = records["fixture_broken"]
    assert str(broken.location).endswith("fixture_agents/broken.py:5")
    assert str(broken.error).endswith("broken.py:5)")
    assert "not_installed_anywhere" in str(broken.error)
    assert records["deep_agent"].location == f"{package / 'helper.py'}:3"
    assert "not_a_dependency_anyone_has" in str(records["deep_agent"].error)
    assert records["typo_agent"].location == f"{tmp_path / 'typo_agent.py'}:2"
    assert "helper.py" in str(records["deep_agent"].trace)  # the whole traceback, for DEBUG
    _dist(tmp_path, "gone_agent", "gone_agent.sub:plugin")  # its files removed, say
    (gone,) = [r for r in discover_plugins(["gone_agent"]) if r.name == "gone_agent"]
    assert gone.location is None and str(gone.error).endswith(
        f"No module named 'gone_agent' (the entry point's module is not importable by "
        f"{sys.executable})"
    )
    for name in ("deep_agent", "deep_agent.helper", "typo_agent"):
        sys.modules.pop(name, None)
