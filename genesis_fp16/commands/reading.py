"""The settings of the commands that only read: with a refused ``.env`` file they go on
with its other lines and say so in one line on stderr
(genesis_fp16/config/settings_reading.py), where a command that acts stops.

``SETTINGS_USE`` says, for every command of the parser, which of the two it is, and
``command_settings`` reads each command's settings as it says. The rule:
a command *reads* when it changes nothing the daemon, Genesis or a receiver sees (the
state folder, a served model, the data, a webhook); it *acts* otherwise, and must act on
the settings the operator wrote. A test holds the table to the parser
(tests/genesis_fp16/commands/test_cli_refused_env.py), so a new command must be put in
it, and runs each command on a refused file.

``agent_folder`` is the folder of the agent a command names (`precision`, `model`) under
those settings' state folder, ``command_plugin`` its plugin under their allowlist. Every
command's AGENT argument is parsed by ``genesis_fp16.config.agent_names.agent_argument``:
its name is checked where it enters.
"""

from __future__ import annotations

import sys

from genesis_fp16.cli import UsageError
from genesis_fp16.config.plugins import LoadedPlugin, PluginError, known_agent_names, load_plugin
from genesis_fp16.config.settings import Settings, SettingsError, load_settings
from genesis_fp16.config.settings_reading import load_settings_for_reading
from genesis_fp16_infrastructure.api import AgentFolder

READS = "reads"  # the file's other lines, one line on stderr, then the command as ever
ACTS = "acts"  # refused in one line naming the bad setting, exit 2, nothing done
CHECKS = "checks"  # `config check`: exit 2, every error, then what the readers use
NO_SETTINGS = "no settings"  # reads none: a bad file is not its concern

# Every command (its words, as typed) and how it meets a refused .env file.
SETTINGS_USE: dict[str, str] = {
    "serve": ACTS,
    "status": READS,
    # The daemon runs the agent with its running settings; this only finds the folder.
    "run": READS,
    "train": ACTS,
    # Writes a dataset with the settings' seed and count, where a daemon may train on it.
    "data generate": ACTS,
    "agents": READS,
    "config check": CHECKS,
    # Measures in a temporary copy; its steps, seed and device are flags too.
    "probe": READS,
    "bench": NO_SETTINGS,
    "precision show": READS,
    "precision reset": ACTS,
    "replay": READS,
    "new-agent": NO_SETTINGS,
    # Runs the contract's rules in a temporary folder: only the allowlist is read.
    "check-agent": READS,
    "model list": READS,
    "model promote": ACTS,
    "model rollback": ACTS,
    "model unpin": ACTS,
    "events list": READS,
    # Posts to the receivers the settings name: never to a refused file's guess.
    "events redeliver": ACTS,
}


def commands_that(use: str) -> list[str]:
    """The commands of ``SETTINGS_USE`` with that use, in the parser's order.

    >>> commands_that(CHECKS)
    ['config check']
    """
    return [command for command, found in SETTINGS_USE.items() if found == use]


def command_settings(command: str) -> Settings:
    """The settings ``command`` (its words in ``SETTINGS_USE``) runs with, as the table
    says: one that acts refuses a bad ``.env`` file in one line naming the bad setting
    (exit 2); one that reads goes on with the file's other lines, said in one line on
    stderr. A bad environment is one line, exit 2, for both."""
    try:
        read = None if SETTINGS_USE[command] == ACTS else load_settings_for_reading()
        settings = load_settings() if read is None else read.settings
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    if read is not None and read.note is not None:
        print(f"genesis-fp16: warning: {read.note}", file=sys.stderr, flush=True)
    return settings


def agent_folder(agent: str, settings: Settings) -> AgentFolder:
    """``agent``'s folder (a name its command's ``agent_argument`` checked) under the
    state folder of ``settings`` (:func:`command_settings`); a name that is neither an
    installed agent nor a folder there (a typo) is one line (exit 2)."""
    folder = AgentFolder(settings.state_dir, agent)
    known = known_agent_names()
    if agent not in known and not folder.root.exists():  # a typo, not an agent without state
        raise UsageError(f"unknown agent {agent!r}; known agents: {', '.join(known) or 'none'}")
    return folder


def command_plugin(agent: str, settings: Settings) -> LoadedPlugin:
    """``agent``'s plugin and what it declares, loaded under the allowlist of ``settings``;
    one that is unknown, not allowed or fails to load is one line (exit 2)."""
    try:
        return load_plugin(agent, settings.plugin_allowlist)
    except PluginError as exc:
        raise UsageError(str(exc)) from None
