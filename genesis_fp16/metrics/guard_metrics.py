"""What the precision guard did (genesis_fp16/jobs/guard_state.py): its demotions, and
the fault bundles the flight recorder wrote.

>>> from prometheus_client import CollectorRegistry
>>> guard = GuardMetrics(Families(CollectorRegistry()))
>>> guard.fault_bundles.labels(agent="se_darwin", reason="demotion").inc()
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.plugin_api import TrainResult


class GuardMetrics:
    """The precision guard's counters."""

    def __init__(self, families: Families) -> None:
        self.precision_demotions = families.counter(
            "precision_demotions",
            "Precision demotions by the precision guard.",
            ("agent", "from", "to", "reason"),
        )
        self.fault_bundles = families.counter(
            "fault_bundles",
            "Fault bundles the flight recorder wrote, by reason: first_nonfinite (the run's "
            "first step whose loss or gradients were not finite, start-up loss-scale "
            "calibration excepted) or demotion (the step that brought a demotion).",
            ("agent", "reason"),
        )

    def count_guarded(self, agent: str, result: TrainResult) -> None:
        """Count the run's demotions and the fault bundles it wrote (announced first, in
        the agent's outbox: genesis_fp16/jobs/guard_state.py:record_run)."""
        for d in result.demotions:
            labels = {"agent": agent, "from": d.from_, "to": d.to, "reason": d.reason}
            self.precision_demotions.labels(**labels).inc()
        for bundle in result.fault_bundles:
            self.fault_bundles.labels(agent=agent, reason=bundle.reason).inc()
