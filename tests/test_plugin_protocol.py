"""One plugin protocol (issue 70, item 4): a plugin's members are read only where the
contract checks them. A ``getattr``/``hasattr`` of a plugin member, or of anything named
a plugin, anywhere else in the product fails here; the optional capabilities are the
Protocols of ``contract/plugin_api.py``, read once by ``capabilities_of``."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script

from genesis_fp16.config.plugins import load_entry_point
from genesis_fp16.plugin_api import AgentPlugin, JudgedPlugin
from genesis_fp16.testing import check_agent
from genesis_fp16_infrastructure.contract import judging, plugin_api

REPO = Path(__file__).resolve().parents[1]


def _design_syntax() -> ModuleType:
    """benchmarks/design_syntax.py: the product files and each node's function."""
    return load_script(REPO / "benchmarks" / "design_syntax.py")


SYNTAX = _design_syntax()

PROTOCOLS: tuple[type, ...] = (
    AgentPlugin,
    JudgedPlugin,
    judging.DeclaresMargin,
    judging.DeclaresMarginFloor,
    judging.DeclaresRecords,
    judging.ListsRecords,
    plugin_api.TakesOptions,
    plugin_api.IgnoresRequestFields,
    plugin_api.ReadsDataFolder,
    plugin_api.ChecksData,
    plugin_api.ReplaysSteps,
    plugin_api.NamesBatchTypes,
)


def _members(protocol: type) -> set[str]:
    own = {name for name, value in vars(protocol).items() if callable(value)}
    return {n for n in {*protocol.__annotations__, *own} if not n.startswith("_")}


MEMBERS = set().union(*(_members(p) for p in PROTOCOLS))

# The contract's own checks, where a plugin's members are read to be checked: the
# loader (the factory test and api_version), the judged capability's check, and
# check-agent's contract rule and report name. (file, function) -> why.
CHECKERS = {
    ("genesis_fp16/config/plugins.py", "load_entry_point"): "the loader",
    ("infrastructure/genesis_fp16_infrastructure/contract/judging.py", "judging_of"): "judged",
    ("genesis_fp16/testing/check_agent.py", "_contract"): "check-agent's contract rule",
    ("genesis_fp16/testing/check_agent.py", "check_agent"): "the report names the plugin",
    # Not an agent plugin: Lightning Fabric's precision plugin, in bench's Fabric runner.
    ("genesis_fp16/bench/runners.py", "FabricRunner.prepare"): "Lightning's plugin",
}


def probes(tree: ast.AST, rel: str) -> list[tuple[str, str, str]]:
    """(file, function, call) for each getattr/hasattr that reads a plugin member (a
    constant naming a member of the protocol) or reads from something named a plugin."""
    found = []
    for scope, call in SYNTAX.scoped_nodes(tree):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            continue
        if call.func.id not in ("getattr", "hasattr") or len(call.args) < 2:
            continue
        target, key = call.args[0], call.args[1]
        named = ast.unparse(target).split(".")[-1].lower()
        member = isinstance(key, ast.Constant) and key.value in MEMBERS
        if member or "plugin" in named or named in ("agent", "judged"):
            found.append((rel, scope, ast.unparse(call)))
    return found


def _repo_probes() -> list[tuple[str, str, str]]:
    return [p for f in SYNTAX.product_files(REPO) for p in probes(f.module, f.rel)]


def test_no_plugin_member_is_probed_outside_the_contracts_checks() -> None:
    """Every getattr/hasattr of a plugin member in the product is in one of the
    contract's checks."""
    stray = [p for p in _repo_probes() if (p[0], p[1]) not in CHECKERS]
    assert stray == [], "declare it in plugin_api's protocol and read it by capabilities_of"


def test_no_check_is_stale() -> None:
    """Each allowed place still probes: a list that only shrinks, never a blanket pass."""
    used = {(rel, scope) for rel, scope, _ in _repo_probes()}
    assert set(CHECKERS) <= used, set(CHECKERS) - used


def test_the_scan_finds_a_new_probe() -> None:
    """The scan flags a getattr of a declared member, a hasattr on a plugin, nested in a
    method, and leaves other getattr calls alone (so the guard above can fail)."""
    code = """
def plan(plugin, options, name):
    check = getattr(plugin, "check_data", None)
    other = getattr(options, name)
    return check, other

class Runs:
    def go(self, record):
        if hasattr(record.plugin, "whatever"):
            return getattr(record, "replay_task")
        return getattr(self, "_cache", None)
"""
    found = [(scope, call) for _, scope, call in probes(ast.parse(code), "x.py")]
    assert found == [
        ("plan", "getattr(plugin, 'check_data', None)"),
        ("Runs.go", "hasattr(record.plugin, 'whatever')"),
        ("Runs.go", "getattr(record, 'replay_task')"),
    ]


def test_the_protocol_declares_every_optional_member_the_built_in_agents_have() -> None:
    """Every public attribute of se_darwin's and rlhf_ppo's plugins is a declared member:
    nothing a plugin carries is read behind the protocol's back."""
    from genesis_fp16.config.plugins import load_plugin

    for name in ("se_darwin", "rlhf_ppo"):
        plugin = load_plugin(name).plugin
        public = {n for n in dir(type(plugin)) if not n.startswith("_")}
        assert public <= MEMBERS, (name, public - MEMBERS)


class _Agent:
    api_version, name, description = 3, "proto", "a protocol test"

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        return out

    def train(self, request: Any) -> Any: ...

    def probe_setup(self, data_path: Path | None, seed: int) -> Any: ...


class _EntryPoint:
    name, value, module, dist = "proto", "proto:plugin", "proto", None

    def __init__(self, plugin: object) -> None:
        self.plugin = plugin

    def load(self) -> object:
        return self.plugin


@pytest.mark.parametrize(
    ("member", "value", "why"),
    [
        ("replay_task", 3, "replay_task is not a method"),
        ("check_data", "yes", "check_data is not a method"),
        ("batch_types", ("Batch",), "batch_types holds something that is not a class"),
        ("options", ("lr",), r"options\[0\] is not an AgentOption"),
        ("ignored_request_fields", {"no_field": "x"}, "names no TrainRequest field"),
        ("score_records", lambda c, r: None, "judging_version None"),
    ],
)
def test_the_loader_refuses_a_capability_declared_half_or_wrong(
    member: str, value: object, why: str
) -> None:
    """A capability whose members are there but wrong refuses the plugin at load, in one
    line naming it; the same plugin without it loads."""
    plugin = _Agent()
    assert load_entry_point(_EntryPoint(plugin)).state == "loaded"  # type: ignore[arg-type]
    setattr(plugin, member, value)
    record = load_entry_point(_EntryPoint(plugin))  # type: ignore[arg-type]
    assert record.state == "failed" and record.plugin is None
    assert record.error is not None and record.error.startswith("capabilities: TypeError: proto")
    assert re.search(why, record.error), record.error


def test_check_agent_reports_a_line_for_each_capability() -> None:
    """check-agent's report has a HAS line per optional capability declared, and none
    for a plugin that declares none."""
    from genesis_fp16.config.plugins import load_plugin

    report = check_agent(load_plugin("se_darwin").plugin, rules=["contract"])
    assert [line.split(":")[0] for line in report.capability_lines()] == [
        "HAS options",
        "HAS data_folder",
        "HAS check_data",
        "HAS replay_task",
        "HAS batch_types",
        "HAS judged",
    ]
    # se_darwin lists its records unscored (ListsRecords); rlhf_ppo does not.
    assert report.capability_lines()[-1].endswith(", lists its records unscored")
    rlhf = check_agent(load_plugin("rlhf_ppo").plugin, rules=["contract"]).capability_lines()
    assert rlhf[-1].startswith("HAS judged") and "lists its records" not in rlhf[-1]
    assert check_agent(_Agent(), rules=["contract"]).capability_lines() == []
