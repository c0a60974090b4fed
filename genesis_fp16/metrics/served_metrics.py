"""The served model's series: the promotion gate's (:class:`PromotionMetrics`) and the
live watch's, the served model against its predecessor on new records (:class:`LiveMetrics`),
both counted from the one reader of the served-model pointer's journal (:class:`JournalCursor`).

The promotion gate's: served and candidate quality, drift, and the agent's disk.
``export_gate`` reads a finished run's ``TrainResult.gate`` (a ``GateReport``, the
promotion gate's verdict) and ``export_drift`` its ``TrainResult.drift`` (a ``DriftReport``,
when it has one); ``state_bytes`` holds the bytes of the agent's folder after pruning.

>>> from dataclasses import replace
>>> from prometheus_client import CollectorRegistry
>>> from genesis_fp16_infrastructure.api import GateReport, ScoresOn
>>> run = TrainResult("se_darwin", "auto", "bf16", "", "cpu", 8, 0, 0, 1, 0.3, {}, 1, 1, None, 0)
>>> metrics = PromotionMetrics(CollectorRegistry())
>>> metrics.export_gate("se_darwin", replace(run, gate=GateReport("rejected", "worse",
...     candidate=ScoresOn("held_out", {"log_loss": 0.4}, reported={"auc": 0.8}),
...     served=ScoresOn("held_out", {"log_loss": 0.3}))))
>>> metrics.candidate.labels(agent="se_darwin", score="log_loss")._value.get()
0.4
>>> gate = GateReport("inconclusive", "too few", records_needed=900)
>>> metrics.export_gate("se_darwin", replace(run, gate=gate))
>>> metrics.verdicts.labels(agent="se_darwin", outcome="inconclusive")._value.get()
1.0
>>> metrics.rejected.labels(agent="se_darwin")._value.get()  # never reported as worse
0.0
>>> metrics.records_needed.labels(agent="se_darwin")._value.get()
900.0

The live watch's ``observe`` reads a finished run's ``live`` (a
:class:`~genesis_fp16_infrastructure.contract.reports.LiveReport`, from
genesis_fp16_infrastructure.judging.watch) and its gate verdict; it is called for every
judged run, so that the rollback counter exists at 0 before its first rollback (an
``increase()`` over it then sees the first one).

Rollbacks and promotions are counted from the changes of the served model, each once
by its journal number, not from the run's gate or live report: a run's own come with
its result (``TrainResult.transitions``: what its transactions committed), and the
pointer's journal is read for those no run reported (a child killed after its rollback
reached the pointer sends no result, and its rollback still happened; an operator's
``model`` command or ``train`` in the state folder is another process). The ``cursor``
hands each out once, from the first number it saw (``baseline``, at the agent's first
run in this daemon: what came before was counted by an earlier daemon, or never), and
``count_rollbacks`` counts the live-regression rollbacks among them::

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> from genesis_fp16_infrastructure.api import JournalEntry
>>> registry = CollectorRegistry()
>>> metrics = LiveMetrics(registry)
>>> metrics.cursor.baseline("se_darwin", [])
>>> rollback = JournalEntry(seq=2, kind="rollback", reason="live_regression")
>>> journal = [JournalEntry(seq=1, kind="gate"), rollback]
>>> reported = [rollback]  # the run that rolled back reported it (its result)
>>> metrics.count_rollbacks("se_darwin", metrics.cursor.new("se_darwin", journal, reported))
1
>>> metrics.cursor.new("se_darwin", [rollback])  # seen: not handed out (or counted) twice
[]
>>> live = LiveReport.from_json({"served": "m2", "against": "m1", "records": 300,
...     "new_records": 300, "difference": 0.6, "lower": 0.4, "upper": 0.8, "margin": 0.02,
...     "alpha": 0.05, "regression": True, "rolled_back": True, "metric": "log_loss"})
>>> metrics.observe("se_darwin", live, False)  # the report's rollback: counted by the journal
>>> b'genesis_fp16_live_rollbacks_total{agent="se_darwin"} 1.0' in generate_latest(registry)
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.drift_metrics import DriftMetrics
from genesis_fp16.metrics.metric_names import PREFIX, Families
from genesis_fp16.metrics.recent_verdicts import HISTORY_LINES, RECENT_RUNS, RecentVerdicts
from genesis_fp16.metrics.served_folder_metrics import ServedFolderMetrics
from genesis_fp16.metrics.watch_state import watch_state
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    LiveReport,
    Outcome,
    ServedPointer,
    UnusableStateFile,
)

LIVE_REGRESSION = "live_regression"  # the watch's rollback reason (judging.watch)
PROMOTING = ("gate", "first")  # the journal kinds of the gate's promotions (transitions.serve)
BOUNDS = ("estimate", "lower", "upper")


class LiveMetrics:
    """The ``genesis_fp16_live_*`` series."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.families = Families(registry, f"{PREFIX}_live")  # genesis_fp16_live_*
        gauge = self.families.gauge
        self.records = gauge(
            "records",
            "Labelled records scored by the live watch since the served model was served "
            "(records neither it nor its predecessor trained on).",
        )
        self.quality = gauge(
            "quality",
            "The watched model's (model=served) and its predecessor's (model=previous) "
            "mean of each watched loss column (score: its name) on those records, at the "
            "last run that scored new ones.",
            ("agent", "model", "score"),
        )
        self.difference = gauge(
            "log_loss_difference",
            "Mean per-record loss (the watched column's; se_darwin's: log-loss) of the watched "
            "model minus its predecessor's on the same new records (bound=estimate), and "
            "its anytime-valid 95% bounds (bound=lower, upper); a lower bound above the "
            "margin is a live regression.",
            ("agent", "bound"),
        )
        self.margin = gauge(
            "margin",
            "The live watch's margin, in the watched loss column's units: worse by more "
            "than this is a regression.",
        )
        self.regression = gauge(
            "regression",
            "1 when the last run's live watch found the served model worse than its "
            "predecessor beyond the margin (rolled back, or held by a pin); 0 when it did "
            "not, or a later candidate was promoted.",
        )
        self.rollbacks = self.families.counter(
            "rollbacks",
            "Served models rolled back by the live watch (reason live_regression).",
        )
        self.cursor = JournalCursor()  # the daemon's one reader of each agent's journal
        self._add_watch_series()

    def _add_watch_series(self) -> None:
        """The watch's own figures (judging.watch): per segment, self-test, idleness."""
        gauge = self.families.gauge
        self.segment_difference = gauge(
            "watch_segment_difference",
            "Per segment (se_darwin: the Genesis agent; segment=all: every record): the "
            "mean per-record loss difference of the watched model minus its predecessor "
            "(bound=estimate) and its anytime-valid bounds at the segment's own level "
            "(bound=lower, upper).",
            ("agent", "segment", "bound"),
        )
        self.evidence = gauge(
            "watch_evidence",
            "The evidence so far that the watched model is worse than its predecessor by "
            "more than the margin (an e-value), per segment (segment=all: every record); "
            "it rolls back at 1/alpha of that test (se_darwin: 40 overall, 640 a segment).",
            ("agent", "segment"),
        )
        self.records_needed = gauge(
            "watch_records_needed",
            "About how many more labelled records the watch needs to decide at the margin "
            "(worse, or shown no worse) if the mean and spread so far hold; NaN: never at "
            "this mean.",
        )
        self.false_rollback_rate = gauge(
            "watch_false_rollback_rate",
            "The A/A self-test's false-rollback rate on the watch's own recent records "
            "(bound=estimate) and its 95% interval (bound=lower, upper): replays under a "
            "null at the margin; a sound watch keeps it at most alpha.",
            ("agent", "bound"),
        )
        self.alpha = gauge(
            "watch_alpha",
            "The live watch's level: a false rollback's probability over one model's "
            "whole watch and all its segments, at most this.",
        )
        self.not_watching = gauge(
            "watch_not_watching",
            "1 when the served model is not watched: no new labelled record reached its "
            "watch for GENESIS_FP16_LIVE_WATCH_IDLE_SECONDS, or it has no predecessor to "
            "watch against; computed at each scrape.",
        )
        self.last_record = gauge(
            "watch_last_record_timestamp_seconds",
            "Unix time the watch last scored new labelled records, or the model was "
            "served if later.",
        )

    def observe_pointer(self, agent: str, pointer: ServedPointer, idle_seconds: float) -> None:
        """The served model's watch state, from the pointer as a run left it (when it was
        served, its live figures, its predecessor): the not-watching gauge then follows the
        clock at each scrape, between runs too."""

        def state() -> dict[str, Any]:  # the watch now: at each scrape, this pointer's
            return watch_state(pointer, idle_seconds, time.time())

        since = state()["since"]
        self.last_record.labels(agent=agent).set(math.nan if since is None else since)
        self.not_watching.labels(agent=agent).set_function(
            lambda: float(state()["state"] != "watching")
        )

    def count_rollbacks(self, agent: str, new: Sequence[Change]) -> int:
        """Count the live-regression rollbacks among ``new`` journal entries (the cursor's:
        each once, whoever ran it and whether or not its run reported); returns how many."""
        counted = sum(1 for e in new if e.kind == "rollback" and e.reason == LIVE_REGRESSION)
        if counted:
            self.rollbacks.labels(agent=agent).inc(counted)
        return counted

    def observe(self, agent: str, live: LiveReport | None, promoted: bool) -> None:
        """One run's live report (None: nothing scored), and whether its gate promoted."""
        self.rollbacks.labels(agent=agent)  # exists at 0 from the agent's first run
        if promoted:
            self.regression.labels(agent=agent).set(0)  # a new model: a new watch
        if live is None:
            return
        self.records.labels(agent=agent).set(live.records)
        for metric, f in live.metrics.items():  # each loss column's means
            for side, value in (("served", f.served_loss), ("previous", f.previous_loss)):
                if value is not None and math.isfinite(value):
                    self.quality.labels(agent=agent, model=side, score=metric).set(value)
        w = live.watched  # the rest: the primary column's
        for bound, value in zip(BOUNDS, (w.difference, w.lower, w.upper), strict=True):
            value = math.nan if value is None else value
            self.difference.labels(agent=agent, bound=bound).set(value)
        self.margin.labels(agent=agent).set(w.margin)
        self.regression.labels(agent=agent).set(float(live.regression and not promoted))
        self._observe_watch(agent, live)
        # A reported rollback is counted from the journal (count_rollbacks), once.

    def _observe_watch(self, agent: str, live: LiveReport) -> None:
        """The per-segment figures, the evidence, the records needed and the self-test."""
        self.alpha.labels(agent=agent).set(live.alpha)
        w = live.watched
        if w.records_needed is not None or w.evidence is not None:
            needed = w.records_needed
            self.records_needed.labels(agent=agent).set(math.nan if needed is None else needed)
        rows: list[tuple[str, float | None, float, float, float | None]]
        rows = [("all", w.difference, w.lower, w.upper, w.evidence)]
        rows += [(s.name, s.difference, s.lower, s.upper, s.evidence) for s in w.segments or ()]
        differences = {  # a segment a new watch does not have: removed
            (name, bound): math.nan if value is None else value
            for name, *bounds, _ in rows
            for bound, value in zip(BOUNDS, bounds, strict=True)
        }
        self.families.replace(self.segment_difference, agent, differences)
        evidence = {(name,): value for name, *_, value in rows if value is not None}
        self.families.replace(self.evidence, agent, evidence)
        test = live.self_test
        if test is not None:
            for bound, value in zip(BOUNDS, (test.rate, test.lower, test.upper), strict=True):
                self.false_rollback_rate.labels(agent=agent, bound=bound).set(value)


class Change(Protocol):
    """One change of the served model as the counters read it: a run's reported
    ``CommittedChange`` (its transactions' ``Committed`` entries) or a pointer's journal entry."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def reason(self) -> str | None: ...


class JournalCursor:
    """Which changes of each agent's served model the daemon has counted (in memory):
    each once, by its journal number. A run's own changes come with its result (what
    its transactions committed); the journal is read only for those no run reported: a
    run killed after its commit, an operator's ``model`` command, another process's
    ``train`` in the state folder."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}  # agent -> the last number handed out

    def baseline(self, agent: str, journal: Sequence[Change]) -> None:
        """Where reading starts for ``agent``: after its journal as it stands before the
        agent's first run in this daemon (an earlier daemon counted what came before, or
        nobody did); later calls change nothing."""
        self._seen.setdefault(agent, max((e.seq for e in journal), default=0))

    def new(
        self, agent: str, journal: Sequence[Change], reported: Sequence[Change] = ()
    ) -> list[Change]:
        """The changes to count, oldest first: every one the run ``reported`` (counted
        whatever the journal says now), and the entries of ``journal`` nobody reported and
        not handed out before. A journal that started again (its newest number below the
        last handed out: a pointer rebuilt by a repair, a folder restored) is read from
        its newest entry on, as a baseline."""
        # Never baselined (no run started here): what the journal holds came before.
        self.baseline(agent, journal)
        seen, mine = self._seen[agent], {c.seq for c in reported}
        newest = max((e.seq for e in journal), default=seen)
        if newest < seen:
            seen = newest
        others = [e for e in journal if e.seq > seen and e.seq not in mine]
        new = sorted([*reported, *others], key=lambda c: c.seq)
        self._seen[agent] = max([seen, *(c.seq for c in new)])
        return new


class PromotionMetrics(ServedFolderMetrics, DriftMetrics):
    """The promotion gate's ``genesis_fp16_{served,candidate}_model_*``, verdict and
    promotion series, declared here; the served folder's and the drift gauges, declared
    in their own classes (the bases)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        f = Families(registry)
        gauge, score = f.gauge, ("agent", "score")
        self.served = gauge(
            "served_model_quality",
            "The served model's score on the gate's last comparison set, by name: each gated "
            "loss column's mean, and what is reported beside them (se_darwin's auc); after a "
            "promotion, the promoted candidate's.",
            score,
        )
        self.candidate = gauge(
            "candidate_model_quality",
            "The last judged candidate's score on the same records, by name (as "
            "served_model_quality).",
            score,
        )
        self.tolerance = gauge(
            "promotion_tolerance",
            "The gate's margin per loss column at the last comparison: how much worse (95% "
            "upper bound, paired) a candidate may be shown at most.",
            score,
        )
        self.rejected = gauge(
            "candidate_rejected",
            "1 when the agent's last judged candidate was rejected (the served model "
            "stays), 0 when it was promoted or is inconclusive (kept, judged again).",
        )
        ServedFolderMetrics.__init__(self, f)  # each base where its series always were
        self.promotions = f.counter(
            "promotions",
            "Candidates the promotion gate served (the first model included), counted "
            "from the served-model pointer's journal: once each, its run reported or not.",
        )
        # Issue 62: every verdict, inconclusive ones apart from rejections (never "worse").
        self.verdicts = f.counter(
            "gate_verdicts",
            "The promotion gate's verdicts by outcome: promoted, rejected, inconclusive (not "
            "shown no worse nor worse: kept and judged again as records arrive), held, "
            "undecided.",
            ("agent", "outcome"),
        )
        self.records_needed = gauge(
            "candidate_records_needed",
            "The records the last inconclusive candidate's undecided sets would need to be "
            "shown no worse at the observed difference (NaN: more records alone would not "
            "show it); 0 once a verdict is reached.",
        )
        DriftMetrics.__init__(self, f)

    def run_ended(self, agent: str, result: TrainResult) -> None:
        """A finished run's gate verdict and its data's drift."""
        self.export_gate(agent, result)
        self.export_drift(agent, result)

    def export_gate(self, agent: str, result: TrainResult) -> None:
        """The run's verdict and scores, if it judged; a promotion serves the candidate's."""
        gate = result.gate
        if gate is None or result.up_to_date:
            return
        promoted = gate.outcome == Outcome.PROMOTED
        for name, candidate in (gate.candidate.figures() if gate.candidate else {}).items():
            self.candidate.labels(agent=agent, score=name).set(candidate)
            if promoted:
                self.served.labels(agent=agent, score=name).set(candidate)
        for name, served in (gate.served.figures() if gate.served else {}).items():
            if not promoted:
                self.served.labels(agent=agent, score=name).set(served)
        if gate.comparisons:  # the first set's (held_out); the golden one's is in train --json
            first = gate.comparisons[0].name
            for c in gate.comparisons:
                if c.name == first and c.segment is None and c.margin is not None:
                    self.tolerance.labels(agent=agent, score=c.metric or "loss").set(c.margin)
        if gate.outcome in (Outcome.PROMOTED, Outcome.REJECTED, Outcome.INCONCLUSIVE):
            self.rejected.labels(agent=agent).set(float(gate.outcome == Outcome.REJECTED))
        self.verdicts.labels(agent=agent, outcome=gate.outcome).inc()
        needed = gate.records_needed if gate.outcome == Outcome.INCONCLUSIVE else 0
        self.records_needed.labels(agent=agent).set(math.nan if needed is None else needed)

    def count_promotions(self, agent: str, new: Sequence[Change]) -> int:
        """Count the gate's promotions among ``new`` journal entries (JournalCursor.new)."""
        counted = sum(1 for e in new if e.kind in PROMOTING)
        self.promotions.labels(agent=agent).inc(counted)  # exists at 0 once observed
        return counted


class RecentVerdictMetrics:
    """``genesis_fp16_recent_verdicts{agent,verdict}``: how many of the agent's last
    judged runs ended in each verdict, every verdict exported (0 included) from the
    agent's loading on, so the alert's series exist before its first run."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.recent = Families(registry).gauge(
            "recent_verdicts",
            f"Of the agent's last {RECENT_RUNS} runs that judged a candidate, how many "
            "ended in each gate verdict (promoted, inconclusive, held, rejected, "
            f"undecided); {RECENT_RUNS} rejected: the agent has stopped learning.",
            ("agent", "verdict"),
        )

    def export(self, agent: str, recent: RecentVerdicts) -> None:
        for verdict, count in recent.counts().items():
            self.recent.labels(agent=agent, verdict=verdict).set(count)

    def export_folder(self, agent: str, folder: AgentFolder) -> None:
        """From the agent's run history; a history that cannot be read exports an empty
        window (the page names the problem; the daemon goes on)."""
        try:
            entries = folder.history(HISTORY_LINES).entries
        except UnusableStateFile:
            entries = ()
        self.export(agent, RecentVerdicts.of_history(entries))
