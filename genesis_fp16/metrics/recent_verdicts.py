"""Whether an agent is still learning: what the gate made of its last judged runs.

A run that trains a candidate ends with the gate's verdict on it, kept in the run
history's ``gate`` mark: ``promoted``, ``inconclusive``, ``held``, ``rejected`` or
``undecided``. An agent whose last :data:`RECENT_RUNS` verdicts were all ``rejected``
spends each run on a model its own gate throws away; the page and ``status`` say so in
one row, ``genesis_fp16_recent_verdicts`` exports the same counts (served_metrics.py's
:class:`~genesis_fp16.metrics.served_metrics.RecentVerdictMetrics`; this module imports
no Prometheus: ``model`` and ``status`` read it), and the alert
GenesisFp16AgentNotLearning fires on them (docs/operations.md says what to look at).
Runs that judged nothing (up to date, failed, stopped) are not counted: they neither
learned nor were refused.

>>> recent = RecentVerdicts.of(["promoted", "rejected", "rejected"])
>>> recent.line()
'last 3 judged runs: 1 promoted, 2 rejected'
>>> recent.then("rejected").then("rejected").then("rejected").all_rejected
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from genesis_fp16_infrastructure.api import Outcome, RunEntry

RECENT_RUNS = 5  # the window the row, the gauge and the alert read
# The history lines both read (the page's CHART_RUNS): the row and the gauge agree.
HISTORY_LINES = 30
# The gate's verdicts, in the order the row lists them.
VERDICTS = (
    Outcome.PROMOTED,
    Outcome.INCONCLUSIVE,
    Outcome.HELD,
    Outcome.REJECTED,
    Outcome.UNDECIDED,
)


@dataclass(frozen=True)
class RecentVerdicts:
    """The gate's verdicts on the agent's last judged runs, oldest first, at most
    :data:`RECENT_RUNS`; a word the gate does not give (an edited history) is left out."""

    verdicts: tuple[str, ...] = ()

    @classmethod
    def of(cls, verdicts: Iterable[str]) -> RecentVerdicts:
        known = tuple(str(v) for v in verdicts if v in VERDICTS)
        return cls(known[-RECENT_RUNS:])

    @classmethod
    def of_history(cls, entries: Iterable[RunEntry]) -> RecentVerdicts:
        """From run-history entries, oldest first: those whose run judged a candidate."""
        return cls.of(entry.gate.outcome for entry in entries if entry.gate is not None)

    def then(self, verdict: str) -> RecentVerdicts:
        return RecentVerdicts.of((*self.verdicts, verdict))

    def counts(self) -> dict[str, int]:
        """Each verdict's count in the window, every verdict present (0 included)."""
        return {str(v): self.verdicts.count(v) for v in VERDICTS}

    @property
    def all_rejected(self) -> bool:
        """A full window, every run rejected: the agent has stopped learning."""
        return len(self.verdicts) == RECENT_RUNS and set(self.verdicts) == {Outcome.REJECTED}

    def line(self) -> str:
        """``last 5 judged runs: 1 promoted, 4 rejected``; empty when none was judged."""
        if not self.verdicts:
            return ""
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items() if n)
        runs = "run" if len(self.verdicts) == 1 else "runs"
        line = f"last {len(self.verdicts)} judged {runs}: {counts}"
        if self.all_rejected:
            line += " (not learning: every candidate refused by the gate)"
        return line
