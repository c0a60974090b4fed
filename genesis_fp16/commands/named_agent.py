"""The agent named on a command line and its state folder, for the commands that read or
rewrite one agent's state (`precision`, `model`). Every command's AGENT argument is parsed
by ``genesis_fp16.config.agent_names.agent_argument``: its name is checked where it enters."""

from __future__ import annotations

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import settings_for_reading
from genesis_fp16.config.settings import SettingsError, load_settings
from genesis_fp16_infrastructure.api import AgentFolder, check_agent_name


def agent_folder(agent: str, read_only: bool = False) -> AgentFolder:
    """``agent``'s folder under the configured state folder; a name that is not an agent
    name, or settings that do not load, are one line (exit 2). ``read_only`` (``model
    list``, ``precision show``): a refused ``.env`` file's other lines do, said on stderr
    (commands/reading.py)."""
    try:
        check_agent_name(agent)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if read_only:
        return AgentFolder(settings_for_reading().state_dir, agent)
    try:
        settings = load_settings()
    except SettingsError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    return AgentFolder(settings.state_dir, agent)
