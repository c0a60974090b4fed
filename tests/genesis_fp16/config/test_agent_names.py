"""Agent names are checked once where they enter: the pattern itself, every entry point,
the settings' agent keys and allowlist, and every command's AGENT argument."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import daemon_env

from genesis_fp16.config.plugins import PluginError, discover_plugins, load_plugin
from genesis_fp16.config.plugins import scan_entry_points as scan
from genesis_fp16.config.settings import SettingsError, load_settings
from genesis_fp16_infrastructure.agent_folder.layout import AGENT_NAME_PATTERN
from genesis_fp16_infrastructure.api import check_agent_name
from genesis_fp16_infrastructure.folder import AgentFolder

# What must never be an agent's name: each is a path out of, or a mess in, the state folder.
HOSTILE = ["../x", "a/b", "", "x" * 300, "a\0b", "a\nb", "..", "A", "se-darwin", "x" * 65]
# What an entry_points.txt line can carry (a newline cannot be in a name there).
HOSTILE_ENTRY_POINTS = ["../x", "a/b", "x" * 300, "a\0b", "..", "Se_Darwin"]


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
def test_a_hostile_name_is_refused_in_one_line(name: str) -> None:
    """The one check refuses it in one line that quotes it (newlines escaped), with the
    pattern; AgentFolder builds no path from it."""
    with pytest.raises(ValueError) as caught:
        check_agent_name(name)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and AGENT_NAME_PATTERN in message
    with pytest.raises(ValueError):
        AgentFolder(Path("state"), name)


@pytest.mark.parametrize("name", ["a", "se_darwin", "rlhf_ppo", "a" + "0" * 63])
def test_an_agent_name_passes(name: str) -> None:
    """Lower-case letters, digits and _, a letter first, at most 64 characters."""
    assert check_agent_name(name) == name
    assert AgentFolder(Path("state"), name).root == Path("state", "agents", name)


def test_every_hostile_entry_point_is_refused_and_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution registering every hostile name (and an empty one): each is refused,
    never imported, listed ``refused``; the good name beside them loads."""
    info = tmp_path / "hostile_agents-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-agents\nVersion: 1.0\n")
    lines = [f"{name} = hostile:plugin" for name in HOSTILE_ENTRY_POINTS]
    lines += [" = hostile:plugin", "fine_agent = hostile:plugin"]
    (info / "entry_points.txt").write_text("[genesis_fp16.agents]\n" + "\n".join(lines) + "\n")
    (tmp_path / "hostile.py").write_text(
        "from genesis_fp16_agents.se_darwin import plugin\n"  # the good name's module
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = scan()
    assert set(found.refused) == {*HOSTILE_ENTRY_POINTS, ""}
    assert "fine_agent" in found.found and not set(found.found) & set(found.refused)
    records = {r.name: r for r in discover_plugins()}
    for name in [*HOSTILE_ENTRY_POINTS, ""]:
        assert records[name].state == "refused" and records[name].plugin is None
        assert len(str(records[name].error).splitlines()) == 1
    assert records["fine_agent"].state == "loaded"
    with pytest.raises(PluginError, match="is not valid"):
        load_plugin("../x")


AGENT_KEYS = "GENESIS_FP16_AGENTS__<AGENT>__*"
ALLOWLIST = "GENESIS_FP16_PLUGIN_ALLOWLIST"


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("GENESIS_FP16_AGENTS__../X__STEPS", "3", AGENT_KEYS),
        ("GENESIS_FP16_AGENTS__A/B__STEPS", "3", AGENT_KEYS),
        (ALLOWLIST, "se_darwin,../x", ALLOWLIST),
        (ALLOWLIST, "se_darwin,a/b", ALLOWLIST),
    ],
)
def test_a_hostile_name_in_the_settings_is_a_settings_error(
    variable: str, value: str, named: str, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    """An agent key or an allowlist entry that is not an agent name: one line naming the
    variable, at start-up (the daemon exits 2, a reload is refused)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "is not valid" in message
    assert message.startswith(f"{named}: agent name"), message


# Every command that takes an agent's name, with what else it needs to parse.
COMMANDS = [
    ("train", "{}"),
    ("probe", "{}"),
    ("check-agent", "{}"),
    ("data", "generate", "{}", "--out", "out"),
    ("data", "generate", "--agent", "{}", "--out", "out"),
    ("precision", "show", "{}"),
    ("precision", "reset", "{}"),
    ("model", "list", "{}"),
    ("model", "promote", "{}", "x"),
    ("model", "rollback", "{}"),
    ("model", "unpin", "{}"),
    ("new-agent", "{}"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_refuses_a_path_as_its_agent(tmp_path: Path, command: tuple[str]) -> None:
    """``../x`` as the AGENT of every command: exit 2 with the name refused in one error
    line, and nothing written in the working folder."""
    args = [word.format("../x") for word in command]
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=tmp_path,
        env=daemon_env({}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "agent name '../x' is not valid" in errors[0], done.stderr
    assert list(tmp_path.iterdir()) == []
