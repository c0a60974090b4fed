"""Each agent's last success time, kept in the state folder so that a restart keeps it.

``genesis_fp16_last_success_timestamp_seconds`` says when an agent's model was last
current. Held only in memory it would start at 0 after every restart, and an agent that
had not succeeded for a day would look as if it never had. So the daemon writes the time
to ``<state_dir>/agents/<agent>/last_success.json`` (atomically: the old file or the new
one, never half of one) after each ``success`` or ``up_to_date`` run, and reads it back at
start-up::

    store = LastSuccessStore(Path("state"))
    store.save("se_darwin", 1_763_900_000.0)
    store.load("se_darwin")  # 1763900000.0; None when the agent never succeeded

A file that is not one (torn by hand, another format, a FIFO, a time that is not a
positive finite number) raises :class:`LastSuccessUnreadable`: the daemon logs it, counts
it in ``genesis_fp16_state_files_skipped_total{file="last_success"}`` and starts the
agent at 0, never refusing to start for it. The next success writes a good file over it.
"""

from __future__ import annotations

import math
from pathlib import Path

import structlog

from genesis_fp16.config.paths import AgentPaths
from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import LAST_SUCCESS

log = structlog.get_logger("genesis_fp16.last_success")

VERSION = 1
FIELD = "last_success_timestamp_seconds"
# A real file is under 100 bytes; anything far larger is not one, and is not read whole.
MAX_BYTES = LAST_SUCCESS.limit


class LastSuccessUnreadable(ValueError):
    """The agent's last-success file exists but holds no usable time; one line naming it."""


class LastSuccessStore:
    """The last success time of each agent under ``state_dir`` (see the module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)

    def path(self, agent: str) -> Path:
        return AgentPaths.for_agent(self.state_dir, agent).last_success_path

    def load(self, agent: str) -> float | None:
        """The stored Unix time, or None when there is no file (the agent never succeeded).

        Raises :class:`LastSuccessUnreadable` for a file that cannot be used.
        """
        path = self.path(agent)
        try:
            data = files.read_json(path, LAST_SUCCESS)
        except files.UnusableStateFile as exc:
            raise LastSuccessUnreadable(str(exc)) from None
        if data is None:
            return None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            found = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise LastSuccessUnreadable(f"{path}: version {found!r}, expected {VERSION}")
        when = data.get(FIELD)
        if isinstance(when, bool) or not isinstance(when, int | float):
            raise LastSuccessUnreadable(f"{path}: {FIELD}={when!r} is not a number")
        if not (math.isfinite(when) and when > 0):
            raise LastSuccessUnreadable(f"{path}: {FIELD}={when!r} is not a positive time")
        return float(when)

    def stored(self, agent: str) -> float:
        """The stored time, 0 when the agent never succeeded or its file is unusable: set
        aside as ``last_success.json.unusable-*`` and counted by the agent folder's owner,
        logged in one line; the daemon starts all the same."""
        try:
            return self.load(agent) or 0.0
        except LastSuccessUnreadable as exc:
            files.set_aside(self.path(agent), LAST_SUCCESS, str(exc))
            log.warning(
                "skipping the last-success file: the agent starts at 0", agent=agent, error=str(exc)
            )
            return 0.0

    def save(self, agent: str, when: float) -> None:
        """Write ``when`` for ``agent``; a failure is logged, never raised (the run that
        succeeded stays a success, and its gauge is set; only a restart would lose it)."""
        path = self.path(agent)
        try:
            files.write_json(path, LAST_SUCCESS, {"version": VERSION, "agent": agent, FIELD: when})
        except OSError as exc:
            log.error(
                "cannot keep the last success time: a restart will not show it",
                agent=agent,
                path=str(path),
                error=exc.strerror or str(exc),
            )
