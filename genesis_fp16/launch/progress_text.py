"""A run's progress reports: the daemon's line, ``step 150/240, 62%, ETA 40 s``, and
:func:`fan_out`, one ``on_log`` for the several readers of a report.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genesis_fp16_infrastructure.api import TrainingSummary


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

    def text(self, step: int, seconds: float) -> str:
        """The line for the summary of ``step``, ``seconds`` into the run's steps."""
        done = self.done(step)
        if self.total is None:
            return f"step {done} (the agent sets its own budget), {duration(seconds)} so far"
        percent = min(100, math.floor(100 * done / self.total)) if self.total else 100
        # Seconds left at this run's rate so far (nan, "unknown": no rate yet).
        eta = max(self.total - done, 0) * seconds / done if done > 0 else math.nan
        return f"step {done}/{self.total}, {percent}%, ETA {duration(eta)}"


def duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``: as precise as a glance needs."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def fan_out(
    *calls: Callable[[TrainingSummary], None] | None,
) -> Callable[[TrainingSummary], None] | None:
    """One ``on_log`` calling each of ``calls`` that is set (None: none is)."""
    chosen = [call for call in calls if call is not None]
    if not chosen:
        return None
    if len(chosen) == 1:
        return chosen[0]

    def on_log(summary: TrainingSummary) -> None:
        for call in chosen:
            call(summary)

    return on_log
