"""The precision probe's gauges, ``genesis_fp16_probe_*``; genesis_fp16/jobs/probe_gate.py runs
the probe and exports its record here.

>>> COLOUR_VALUES["amber"]
1
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16_infrastructure.api import LOW_PRECISIONS

# A verdict's colour as a gauge holds it; a variant with no verdict ("n/a") sets none.
COLOUR_VALUES = {"green": 0, "amber": 1, "red": 2}


class ProbeMetrics:
    """The ``genesis_fp16_probe_*`` gauges, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        gauge = Families(registry).gauge
        self.verdict = gauge(
            "probe_verdict",
            "Precision probe verdict per variant: 0 green, 1 amber, 2 red.",
            ("agent", "variant"),
        )
        self.recommended = gauge(
            "probe_recommended",
            "1 for the variant the precision probe recommends, 0 for the others.",
            ("agent", "variant"),
        )
        self.precision_verdict = gauge(
            "probe_precision_verdict",
            "Probe verdict of autocast in this precision (bf16_autocast, fp16_autocast).",
            ("agent", "precision"),
        )
        self.timestamp = gauge(
            "probe_timestamp_seconds",
            "Unix time at which the precision probe of the agent ran.",
        )

    def export(self, agent: str, verdict: Mapping[str, str], recommended: str, at: float) -> None:
        """Set the gauges from a successful probe's verdict per variant, its pick and time."""
        for variant, colour in verdict.items():
            value = COLOUR_VALUES.get(colour)
            if value is not None:
                self.verdict.labels(agent=agent, variant=variant).set(value)
            is_recommended = 1 if variant == recommended else 0
            self.recommended.labels(agent=agent, variant=variant).set(is_recommended)
        for precision in LOW_PRECISIONS:
            value = COLOUR_VALUES.get(verdict.get(f"{precision}_autocast", "n/a"))
            if value is not None:
                self.precision_verdict.labels(agent=agent, precision=precision).set(value)
        self.timestamp.labels(agent=agent).set(at)
