"""The daemon's progress line: ``step 150/240, 62%, ETA 40 s``.

A run's summaries come every log interval; each becomes one log line that an operator
reads as it stands. Steps are this run's (:meth:`Progress.done`: a resumed run counts from
its checkpoint; `train`'s bar and the Kubeflow status count them here too), the rate is
this run's so far.

>>> progress = Progress(total=240, log_interval=10)
>>> progress.text(step=10, seconds=4.5)
'step 10/240, 4%, ETA 104 s'
>>> progress.text(step=150, seconds=60.0)
'step 150/240, 62%, ETA 36 s'
>>> Progress(total=None, log_interval=10).text(step=10, seconds=4.0)
'step 10 (the agent sets its own budget), 4 s so far'
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Progress:
    """One run's progress: its step budget (None: the agent's own, unknown here) and
    the log interval its summaries come at."""

    total: int | None
    log_interval: int
    first_step: int | None = None

    def done(self, step: int) -> int:
        """Steps of this run at the summary of ``step`` (a resumed run's first summary
        comes one interval past its checkpoint)."""
        if self.first_step is None:
            self.first_step = step - min(step, self.log_interval)
        return step - self.first_step

    def eta_seconds(self, done: int, seconds: float) -> float | None:
        """Seconds left at this run's rate so far; None without a total or a rate."""
        if self.total is None or done <= 0 or not math.isfinite(seconds):
            return None
        return max(self.total - done, 0) * seconds / done

    def text(self, step: int, seconds: float) -> str:
        """The line for the summary of ``step``, ``seconds`` into the run's steps."""
        done = self.done(step)
        if self.total is None:
            return f"step {done} (the agent sets its own budget), {duration(seconds)} so far"
        percent = min(100, math.floor(100 * done / self.total)) if self.total else 100
        eta = self.eta_seconds(done, seconds)
        return f"step {done}/{self.total}, {percent}%, ETA " + (
            "unknown" if eta is None else duration(eta)
        )


def duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``: as precise as a glance needs."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
