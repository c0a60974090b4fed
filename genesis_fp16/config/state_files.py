"""Who hears of an unusable state file set aside: one registry for every reader.

A reader that finds one of the daemon's small state files unusable (torn, oversize, not
UTF-8, a folder, a FIFO or a link at its name) sets it aside, logs one line and calls
:func:`report_state_file_skipped`; the daemon listens and counts it in
``genesis_fp16_state_files_skipped_total{agent, file}``. Lives on the config floor so
that every reader above it (paths, the guard's memory, the probe gate) can report.
"""

from __future__ import annotations

from collections.abc import Callable

# Every file name reported here (the metric's ``file`` label, created at 0 per agent).
STATE_FILES = ("last_success", "precision_state", "sample_data_marker", "probe_result")

_listeners: list[Callable[[str, str], None]] = []


def on_state_file_skipped(listener: Callable[[str, str], None]) -> None:
    """Call ``listener(agent, file)`` whenever an unusable state file is set aside."""
    _listeners.append(listener)


def report_state_file_skipped(agent: str, file: str) -> None:
    """Tell every listener that ``agent``'s state file ``file`` was set aside."""
    for listener in _listeners:
        listener(agent, file)
