"""How far a changed-data run's new records moved from the served model's training
records: per-feature drift, the label shift, and which of them passed their thresholds
(``TrainResult.drift``, a ``DriftReport``).

>>> from prometheus_client import CollectorRegistry
>>> drift = DriftMetrics(Families(CollectorRegistry()))
>>> drift.drift.labels(agent="se_darwin", feature="tool").set(0.2)
"""

from __future__ import annotations

import math

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.plugin_api import TrainResult


class DriftMetrics:
    """The drift gauges, each labelled by ``agent``."""

    def __init__(self, families: Families) -> None:
        gauge = families.gauge
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

    def export_drift(self, agent: str, result: TrainResult) -> None:
        drift = result.drift
        if drift is None:
            gate = result.gate
            if gate is not None and gate.served_id is None and not result.up_to_date:
                # A first model: no earlier records to shift or drift from, so nothing is
                # flagged (a known 0, not a missing series); the shift itself stays unset.
                self.label_shift_flagged.labels(agent=agent).set(0)
                self.drift_flagged.labels(agent=agent).set(0)
            return
        for feature, distance in drift.features.items():
            self.drift.labels(agent=agent, feature=feature).set(distance)
        if math.isfinite(drift.label_shift):
            self.label_shift.labels(agent=agent).set(drift.label_shift)
            flagged = float(drift.label_shift_flagged)
            self.label_shift_flagged.labels(agent=agent).set(flagged)
        self.drift_flagged.labels(agent=agent).set(len(drift.flagged))
