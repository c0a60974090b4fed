"""An agent's last run and its last success, kept in its folder so that a later command
or a restart reads them (``genesis-fp16 status``, the status page, the daemon's gauges).

``last_run.json`` says what the last run did: its outcome, precision, when and why, one
record written atomically (the old record or the new one, never half of one).
``last_success.json`` says when the agent's model was last current, after each
``success`` or ``up_to_date`` run; the daemon reads it back at start-up so that an agent
that has not succeeded for a day does not look as if it never had::

    save_last_run(root, LastRun("success", "fp32", "fp32", 1_763_900_000.0, 4.2,
                                "promoted: the first model", "daemon", 120))
    load_last_run(root)            # LastRun(outcome='success', ...); None: none recorded
    save_last_success(root, "my_agent", 1_763_900_000.0)
    load_last_success(root)        # 1763900000.0; None when the agent never succeeded

``root`` is the agent's folder (``AgentFolder`` names it and calls these). Writing
never fails a run: an error is logged and the run's outcome stands. A file that is not
a record raises :class:`LastRunUnreadable` or :class:`LastSuccessUnreadable` in one
line naming it (a FIFO or a huge file is never read whole): both are the folder's
``UnusableStateFile``. The record's type,
:class:`~genesis_fp16_infrastructure.agent_folder.run_history.LastRun`, is the run
history's too.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict
from pathlib import Path

import msgspec

from genesis_fp16_infrastructure.agent_folder import files
from genesis_fp16_infrastructure.agent_folder.layout import LAST_RUN, LAST_SUCCESS
from genesis_fp16_infrastructure.agent_folder.run_history import LastRun

logger = logging.getLogger(__name__)

VERSION = 1
SUCCESS_FIELD = "last_success_timestamp_seconds"


class LastRunUnreadable(files.UnusableStateFile):
    """The agent's last-run file exists but is not a record: one line naming it."""


class LastSuccessUnreadable(files.UnusableStateFile):
    """The agent's last-success file exists but holds no usable time; one line naming it."""


def save_last_run(root: Path, record: LastRun) -> None:
    """Write ``record`` as the agent's last run; a failure is logged, never raised."""
    path = LAST_RUN.at(root)
    try:
        files.write_json(path, LAST_RUN, {"version": VERSION, **asdict(record)})
    except OSError as exc:
        logger.error(
            "cannot keep the last run's record: `status` will show an older one: %s (%s)",
            path,
            exc.strerror or exc,
        )


def load_last_run(root: Path) -> LastRun | None:
    """The agent's last run, or None when none was recorded; :class:`LastRunUnreadable`
    for a file that is not a record."""
    path = LAST_RUN.at(root)
    try:
        data = files.read_json(path, LAST_RUN)
    except files.UnusableStateFile as exc:
        raise LastRunUnreadable(str(exc)) from None
    if data is None:
        return None
    try:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} record")
        data.pop("version")
        return msgspec.convert(data, LastRun)
    except (ValueError, msgspec.ValidationError) as exc:
        raise LastRunUnreadable(f"{path}: {exc}") from None


def load_last_success(root: Path) -> float | None:
    """The stored Unix time, or None when there is no file (the agent never succeeded).

    Raises :class:`LastSuccessUnreadable` for a file that cannot be used (torn by hand,
    another format, a FIFO, a time that is not a positive finite number).
    """
    path = LAST_SUCCESS.at(root)
    try:
        data = files.read_json(path, LAST_SUCCESS)
    except files.UnusableStateFile as exc:
        raise LastSuccessUnreadable(str(exc)) from None
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        found = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise LastSuccessUnreadable(f"{path}: version {found!r}, expected {VERSION}")
    when = data.get(SUCCESS_FIELD)
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise LastSuccessUnreadable(f"{path}: {SUCCESS_FIELD}={when!r} is not a number")
    if not (math.isfinite(when) and when > 0):
        raise LastSuccessUnreadable(f"{path}: {SUCCESS_FIELD}={when!r} is not a positive time")
    return float(when)


def stored_last_success(root: Path, unusable: files.Listener | None = None) -> float:
    """The stored time, 0 when the agent never succeeded or its file is unusable: then
    set aside as ``last_success.json.unusable-*``, reported, and told to ``unusable``."""
    try:
        return load_last_success(root) or 0.0
    except LastSuccessUnreadable as exc:
        event = files.set_aside(LAST_SUCCESS.at(root), LAST_SUCCESS, str(exc))
        if unusable is not None:
            unusable(event)
        return 0.0


def save_last_success(root: Path, agent: str, when: float) -> None:
    """Write ``when`` for ``agent``; a failure is logged, never raised (the run that
    succeeded stays a success; only a restart would lose its time)."""
    path = LAST_SUCCESS.at(root)
    try:
        files.write_json(
            path, LAST_SUCCESS, {"version": VERSION, "agent": agent, SUCCESS_FIELD: when}
        )
    except OSError as exc:
        logger.error(
            "cannot keep the last success time: a restart will not show it: %s (%s)",
            path,
            exc.strerror or exc,
        )
