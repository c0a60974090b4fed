"""The agent named on a command line and its state folder, for the commands that read or
rewrite one agent's state (`precision`, `model`): one check of the name and the settings."""

from __future__ import annotations

import re

from genesis_fp16.cli import UsageError
from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.config.settings import SettingsError, load_settings

# An agent's folder name: no separator, never "." or ".." (a path out of the state folder).
_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def agent_paths(agent: str) -> AgentPaths:
    """``agent``'s folders under the configured state folder; a name that could leave the
    state folder, or settings that do not load, are one line (exit 2)."""
    if not _AGENT_NAME.match(agent) or agent in (".", ".."):
        raise UsageError(f"agent name {agent!r} is not valid: use letters, digits, '_', '-', '.'")
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    return AgentPaths.for_agent(settings.state_dir, agent)
