"""The agent named on a command line: its name checked where it enters (every command's
AGENT argument is parsed by :func:`agent_argument`), and its state folder, for the commands
that read or rewrite one agent's state (`precision`, `model`)."""

from __future__ import annotations

import argparse

from genesis_fp16.cli import UsageError
from genesis_fp16.config.agent_names import check_agent_name
from genesis_fp16.config.paths import AgentPaths
from genesis_fp16.config.settings import SettingsError, load_settings


def agent_argument(text: str) -> str:
    """argparse's ``type`` of an AGENT argument: a name that is not an agent name
    (``../x``, ``a/b``) is a usage error in one line (exit 2), before anything runs.

    >>> agent_argument("se_darwin")
    'se_darwin'
    """
    try:
        return check_agent_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def agent_paths(agent: str) -> AgentPaths:
    """``agent``'s folders under the configured state folder; a name that is not an agent
    name, or settings that do not load, are one line (exit 2)."""
    try:
        check_agent_name(agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    return AgentPaths.for_agent(settings.state_dir, agent)
