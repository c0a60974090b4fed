"""The live watch's series: the served model against its predecessor on new records.

``observe`` reads a finished run's ``live`` (a
:class:`~genesis_fp16_infrastructure.contract.reports.LiveReport`, from
genesis_fp16_infrastructure.recipes.retrain.live_watch) and its gate verdict; it is called
for every se_darwin-style run, so that the rollback counter exists at 0 before its first
rollback (an ``increase()`` over it then sees the first one).

Rollbacks are counted from the served-model pointer's journal, not from the run's report:
a child killed after its rollback reached the pointer sends no report, and its rollback
still happened. ``observe_journal`` counts each journal entry once, by its sequence
number, from the first number it saw (``baseline``, at the agent's first run in this
daemon: what came before was counted by an earlier daemon, or never)::

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> registry = CollectorRegistry()
>>> metrics = LiveMetrics(registry)
>>> metrics.baseline("se_darwin", [])
>>> metrics.observe_journal("se_darwin", [{"seq": 1, "kind": "gate"},
...     {"seq": 2, "kind": "rollback", "reason": "live_regression"}])
1
>>> metrics.observe_journal("se_darwin", [{"seq": 2, "kind": "rollback",
...     "reason": "live_regression"}])  # seen: not counted twice
0
>>> live = LiveReport("m2", "m1", records=300, new_records=300, served_auc=0.6,
...     previous_auc=0.7, served_log_loss=0.9, previous_log_loss=0.3, difference=0.6,
...     lower=0.4, upper=0.8, margin=0.02, alpha=0.05, regression=True, rolled_back=True)
>>> metrics.observe("se_darwin", live, None)  # the report's rollback: counted by the journal
>>> b'genesis_fp16_live_rollbacks_total{agent="se_darwin"} 1.0' in generate_latest(registry)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from genesis_fp16_infrastructure.contract import GateReport, LiveReport

LIVE_REGRESSION = "live_regression"  # the watch's rollback reason (judge_sets.LIVE_REGRESSION)
BOUNDS = ("estimate", "lower", "upper")


class LiveMetrics:
    """The ``genesis_fp16_live_*`` series."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, labels: tuple[str, ...]) -> Gauge:
            return Gauge(f"genesis_fp16_live_{name}", doc, labels, registry=registry)

        self.records = gauge(
            "records",
            "Labelled records scored by the live watch since the served model was served "
            "(records neither it nor its predecessor trained on).",
            ("agent",),
        )
        self.quality = gauge(
            "quality",
            "The watched model's (model=served) and its predecessor's (model=previous) "
            "AUC and log-loss (a judged plugin's: its mean loss, score=loss) on those "
            "records, at the last run that scored new ones.",
            ("agent", "model", "score"),
        )
        self.difference = gauge(
            "log_loss_difference",
            "Mean per-record log-loss (a judged plugin's: its own loss) of the watched "
            "model minus its predecessor's on the same new records (bound=estimate), and "
            "its anytime-valid 95% bounds (bound=lower, upper); a lower bound above the "
            "margin is a live regression.",
            ("agent", "bound"),
        )
        self.margin = gauge(
            "margin",
            "The log-loss (a judged plugin's: loss) margin of the live watch: worse by more "
            "than this is a regression.",
            ("agent",),
        )
        self.regression = gauge(
            "regression",
            "1 when the last run's live watch found the served model worse than its "
            "predecessor beyond the margin (rolled back, or held by a pin); 0 when it did "
            "not, or a later candidate was promoted.",
            ("agent",),
        )
        self.rollbacks = Counter(
            "genesis_fp16_live_rollbacks",
            "Served models rolled back by the live watch (reason live_regression).",
            ("agent",),
            registry=registry,
        )
        self.cursor = JournalCursor()  # the daemon's one reader of each agent's journal

    def baseline(self, agent: str, journal: Sequence[Mapping[str, Any]]) -> None:
        """Where counting starts for ``agent`` (:meth:`JournalCursor.baseline`)."""
        self.cursor.baseline(agent, journal)

    def observe_journal(self, agent: str, journal: Sequence[Mapping[str, Any]]) -> int:
        """Count the live-regression rollbacks of the journal not counted yet (each once,
        whoever ran it and whether or not its run reported); returns how many."""
        return self.count_rollbacks(agent, self.cursor.new(agent, journal))

    def count_rollbacks(self, agent: str, new: Sequence[Mapping[str, Any]]) -> int:
        """Count the live-regression rollbacks among ``new`` journal entries."""
        counted = sum(
            1 for e in new if e.get("kind") == "rollback" and e.get("reason") == LIVE_REGRESSION
        )
        if counted:
            self.rollbacks.labels(agent=agent).inc(counted)
        return counted

    def observe(self, agent: str, live: LiveReport | None, gate: GateReport | None) -> None:
        """One run's live report (None: nothing scored) and its gate verdict."""
        self.rollbacks.labels(agent=agent)  # exists at 0 from the agent's first run
        promoted = gate is not None and gate.outcome == "promoted"
        if promoted:
            self.regression.labels(agent=agent).set(0)  # a new model: a new watch
        if live is None:
            return
        self.records.labels(agent=agent).set(live.records)
        scores = {
            ("served", "auc"): live.served_auc,
            ("served", "log_loss"): live.served_log_loss,
            ("previous", "auc"): live.previous_auc,
            ("previous", "log_loss"): live.previous_log_loss,
            ("served", "loss"): live.served_loss,  # a judged plugin's (contract.judging)
            ("previous", "loss"): live.previous_loss,
        }
        for (side, score), value in scores.items():
            # an AUC the records could not give; a judged plugin's absent log-loss (NaN)
            if value is not None and math.isfinite(value):
                self.quality.labels(agent=agent, model=side, score=score).set(value)
        for bound, value in zip(BOUNDS, (live.difference, live.lower, live.upper), strict=True):
            self.difference.labels(agent=agent, bound=bound).set(value)
        self.margin.labels(agent=agent).set(live.margin)
        self.regression.labels(agent=agent).set(float(live.regression and not promoted))
        # A reported rollback is counted from the journal (observe_journal), once.


class JournalCursor:
    """How far the daemon has read each agent's served-model journal (in memory): each
    entry is handed out once, by its sequence number."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}  # agent -> the last number handed out

    def baseline(self, agent: str, journal: Sequence[Mapping[str, Any]]) -> None:
        """Where reading starts for ``agent``: after its journal as it stands before the
        agent's first run in this daemon (an earlier daemon counted what came before, or
        nobody did); later calls change nothing."""
        self._seen.setdefault(agent, max((_seq(e) for e in journal), default=0))

    def new(self, agent: str, journal: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The entries of ``journal`` not handed out before, oldest first."""
        # Never baselined (no run started here): what the journal holds came before.
        self.baseline(agent, journal)
        seen = self._seen[agent]
        new = sorted((e for e in journal if _seq(e) > seen), key=_seq)
        self._seen[agent] = max([seen, *(_seq(e) for e in new)])
        return new


def _seq(entry: Mapping[str, Any]) -> int:
    seq = entry.get("seq")
    return seq if isinstance(seq, int) else 0
