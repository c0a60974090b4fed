"""The promotion gate's series: served and candidate quality, drift, and the agent's disk.

``export_gate`` reads a finished run's ``TrainResult.gate``
(genesis_fp16_infrastructure.recipes.retrain.gate) and ``export_drift`` its ``TrainResult.drift``;
``set_state_bytes`` the bytes of the agent's folder after pruning.

>>> from prometheus_client import CollectorRegistry
>>> metrics = PromotionMetrics(CollectorRegistry())
>>> metrics.export_gate("se_darwin", {"outcome": "rejected",
...     "candidate": {"auc": 0.80, "log_loss": 0.4}, "served": {"auc": 0.90, "log_loss": 0.3}})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

SCORES = ("auc", "log_loss")


class PromotionMetrics:
    """The ``genesis_fp16_{served,candidate}_model_*`` and drift gauges."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ("agent", "score")) -> Gauge:
            return Gauge(f"genesis_fp16_{name}", doc, labels, registry=registry)

        self.served = gauge(
            "served_model_quality",
            "The served model's score (auc, log_loss) on the promotion gate's last "
            "comparison set; after a promotion, the promoted candidate's.",
        )
        self.candidate = gauge(
            "candidate_model_quality",
            "The last judged candidate's score (auc, log_loss) on the same records.",
        )
        self.tolerance = gauge(
            "promotion_tolerance",
            "The gate's margin per score at the last comparison: how much worse (95% "
            "upper bound, paired) a candidate may be shown at most.",
        )
        self.rejected = gauge(
            "candidate_rejected",
            "1 when the agent's last judged candidate was rejected (the served model "
            "stays), 0 when it was promoted.",
            ("agent",),
        )
        self.pinned = gauge(
            "served_model_pinned",
            "1 while an operator's `model promote`/`model rollback` pins the served model "
            "(the gate then holds better candidates instead of serving them), else 0; as "
            "of the agent's last scheduled run.",
            ("agent",),
        )
        self.pointer_unusable = gauge(
            "served_pointer_unusable",
            "1 while the agent's served-model pointer is unusable (unreadable, another "
            "version, or naming a missing checkpoint: set aside, nothing served until "
            "`model promote`/`model rollback` repairs it), else 0.",
            ("agent",),
        )
        self.state_bytes = gauge(
            "agent_state_bytes",
            "Bytes of the agent's checkpoint folder (served, kept and rejected models).",
            ("agent",),
        )
        self.pruned = Gauge(
            "genesis_fp16_models_pruned",
            "Candidate folders removed by the bounded history at the last run.",
            ("agent",),
            registry=registry,
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
            ("agent",),
        )

        self.label_shift_flagged = gauge(
            "label_shift_flagged",
            "1 when the last changed-data run's label shift passed its threshold "
            "(max(0.05, 3 s.e.)), 0 when it stayed within.",
            ("agent",),
        )
        self.drift_flagged = gauge(
            "feature_drift_flagged",
            "Features whose drift passed the threshold measured from the run's own noise "
            "at the last changed-data run.",
            ("agent",),
        )

    def export_gate(self, agent: str, gate: Mapping[str, Any]) -> None:
        """The verdict's scores; a promotion makes the candidate's the served quality."""
        candidate, served = gate.get("candidate"), gate.get("served")
        promoted = gate.get("outcome") == "promoted"
        for name in SCORES:
            if isinstance(candidate, Mapping) and candidate.get(name) is not None:
                self.candidate.labels(agent=agent, score=name).set(float(candidate[name]))
                if promoted:
                    self.served.labels(agent=agent, score=name).set(float(candidate[name]))
            if not promoted and isinstance(served, Mapping) and served.get(name) is not None:
                self.served.labels(agent=agent, score=name).set(float(served[name]))
        for comparison in gate.get("comparisons") or ():
            for name, key in (("auc", "delta_auc"), ("log_loss", "delta_log_loss")):
                if comparison.get(key) is not None:
                    self.tolerance.labels(agent=agent, score=name).set(float(comparison[key]))
            break  # the first set's (held_out); the golden one's is in train --json
        if gate.get("outcome") in ("promoted", "rejected"):
            self.rejected.labels(agent=agent).set(float(gate["outcome"] == "rejected"))

    def export_drift(self, agent: str, drift: Mapping[str, Any]) -> None:
        for feature, distance in (drift.get("features") or {}).items():
            self.drift.labels(agent=agent, feature=feature).set(float(distance))
        shift = drift.get("label_shift")
        if shift is not None:
            self.label_shift.labels(agent=agent).set(float(shift))
            flagged = float(bool(drift.get("label_shift_flagged")))
            self.label_shift_flagged.labels(agent=agent).set(flagged)
        self.drift_flagged.labels(agent=agent).set(len(drift.get("flagged") or ()))
