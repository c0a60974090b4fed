"""The agent named on a command line and its state folder, for the commands that read or
rewrite one agent's state (`precision`, `model`). Every command's AGENT argument is parsed
by ``genesis_fp16.config.agent_names.agent_argument``: its name is checked where it enters."""

from __future__ import annotations

from genesis_fp16.cli import UsageError
from genesis_fp16.config.plugins import known_agent_names
from genesis_fp16.config.settings import Settings
from genesis_fp16_infrastructure.api import AgentFolder


def agent_folder(agent: str, settings: Settings) -> AgentFolder:
    """``agent``'s folder (a name its command's ``agent_argument`` checked) under the
    state folder of ``settings`` (the command's: commands/reading.py); a name that is
    neither an installed agent nor a folder there (a typo) is one line (exit 2)."""
    folder = AgentFolder(settings.state_dir, agent)
    known = known_agent_names()
    if agent not in known and not folder.root.exists():  # a typo, not an agent without state
        raise UsageError(f"unknown agent {agent!r}; known agents: {', '.join(known) or 'none'}")
    return folder
