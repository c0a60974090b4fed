"""The agent named on a command line and its state folder, for the commands that read or
rewrite one agent's state (`precision`, `model`). Every command's AGENT argument is parsed
by ``genesis_fp16.config.agent_names.agent_argument``: its name is checked where it enters."""

from __future__ import annotations

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import settings_for_reading
from genesis_fp16.config.plugins import known_agent_names
from genesis_fp16.config.settings import SettingsError, load_settings
from genesis_fp16_infrastructure.api import AgentFolder


def agent_folder(agent: str, read_only: bool = False) -> AgentFolder:
    """``agent``'s folder (a name its command's ``agent_argument`` checked) under the
    configured state folder; settings that do not load, or a name that is neither an
    installed agent nor a folder there (a typo), are one line (exit 2). ``read_only``
    (``model list``, ``precision show``): a refused ``.env`` file's other lines do, said on
    stderr (commands/reading.py)."""
    if read_only:
        state_dir = settings_for_reading().state_dir
    else:
        try:
            state_dir = load_settings().state_dir
        except SettingsError as exc:
            raise UsageError(f"invalid configuration: {exc}") from None
    folder = AgentFolder(state_dir, agent)
    known = known_agent_names()
    if agent not in known and not folder.root.exists():  # a typo, not an agent without state
        raise UsageError(f"unknown agent {agent!r}; known agents: {', '.join(known) or 'none'}")
    return folder
