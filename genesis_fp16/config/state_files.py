"""Who hears of an unusable state file set aside: one registry for every reader.

A reader that finds one of the daemon's small state files unusable (torn, oversize, not
UTF-8, a folder, a FIFO or a link at its name) sets it aside, logs one line and calls
:func:`report_state_file_skipped`; the daemon listens and counts it in
``genesis_fp16_state_files_skipped_total{agent, file}``. Lives on the config floor so
that every reader above it can report (the launcher, relaying a run's child; train's output).
"""

from __future__ import annotations

from collections.abc import Callable

from genesis_fp16_infrastructure.api import SetAside, on_set_aside

_listeners: list[Callable[[str, str], None]] = []


def on_state_file_skipped(listener: Callable[[str, str], None]) -> None:
    """Call ``listener(agent, file)`` whenever an unusable state file is set aside (by
    the agent folder's owner in this process, or reported by a run's child)."""
    _listeners.append(listener)


# Every set-aside of this process, whoever reads, for the agent whose folder held it.
on_set_aside(lambda event: report_state_file_skipped(event.agent, event.label))


def relayed_set_aside(event: SetAside) -> dict[str, dict[str, str]]:
    """A run's child's line for the daemon: a file it set aside (``report_relayed``)."""
    return {"set_aside": {"agent": event.agent, "file": event.label}}


def report_relayed(line: object) -> None:
    """Count a file a run's child set aside, from its :func:`relayed_set_aside` line."""
    if isinstance(line, dict) and {"agent", "file"} <= set(line):
        report_state_file_skipped(str(line["agent"]), str(line["file"]))


def report_state_file_skipped(agent: str, file: str) -> None:
    """Tell every listener that ``agent``'s state file ``file`` was set aside."""
    for listener in _listeners:
        listener(agent, file)
