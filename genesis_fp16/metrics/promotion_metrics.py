"""The promotion gate's series: served and candidate quality, drift, and the agent's disk.

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import JournalEntry, Outcome

PROMOTING = ("gate", "first")  # the journal kinds of the gate's promotions (transitions.serve)


class PromotionMetrics:
    """The ``genesis_fp16_{served,candidate}_model_*`` and drift gauges."""

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
        self.pinned = gauge(
            "served_model_pinned",
            "1 while an operator's `model promote`/`model rollback` pins the served model "
            "(the gate then holds better candidates instead of serving them), else 0; as "
            "of the agent's last scheduled run.",
        )
        self.pointer_unusable = gauge(
            "served_pointer_unusable",
            "1 while the agent's served-model pointer is unusable (unreadable, another "
            "version, or naming a missing checkpoint: set aside, nothing served until "
            "`model promote`/`model rollback` repairs it), else 0.",
        )
        self.state_bytes = gauge(
            "agent_state_bytes",
            "Bytes of the agent's checkpoint folder (served, kept and rejected models).",
        )
        self.pruned = gauge(
            "models_pruned", "Candidate folders removed by the bounded history at the last run."
        )
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
        self.drift = gauge(
            "feature_drift",
            "Per-feature distance of the new records from the served model's training "
            "records at the last changed-data run (Jensen-Shannon numeric, L-inf categorical).",
            ("agent", "feature"),
        )
        self.label_shift = gauge(
            "label_shift",
            "Success base rate of the new records minus that of the served model's "
            "training records, at the last changed-data run.",
        )

        self.label_shift_flagged = gauge(
            "label_shift_flagged",
            "1 when the last changed-data run's label shift passed its threshold "
            "(max(0.05, 3 s.e.)), 0 when it stayed within.",
        )
        self.drift_flagged = gauge(
            "feature_drift_flagged",
            "Features whose drift passed the threshold measured from the run's own noise "
            "at the last changed-data run.",
        )

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

    def count_promotions(self, agent: str, new: Sequence[JournalEntry]) -> int:
        """Count the gate's promotions among ``new`` journal entries (JournalCursor.new)."""
        counted = sum(1 for e in new if e.kind in PROMOTING)
        self.promotions.labels(agent=agent).inc(counted)  # exists at 0 once observed
        return counted

    def export_drift(self, agent: str, result: TrainResult) -> None:
        drift = result.drift
        if drift is None:
            return
        for feature, distance in drift.features.items():
            self.drift.labels(agent=agent, feature=feature).set(distance)
        if math.isfinite(drift.label_shift):
            self.label_shift.labels(agent=agent).set(drift.label_shift)
            flagged = float(drift.label_shift_flagged)
            self.label_shift_flagged.labels(agent=agent).set(flagged)
        self.drift_flagged.labels(agent=agent).set(len(drift.flagged))
