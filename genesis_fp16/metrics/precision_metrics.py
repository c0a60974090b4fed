"""How an agent trains: its precision, its loss scale, and how its steps execute (eager
or captured, and why a captured step fell back to eager).

>>> from prometheus_client import CollectorRegistry
>>> precision = PrecisionMetrics(Families(CollectorRegistry()))
>>> precision.set_precision("se_darwin", "bf16")
>>> precision.precision.labels(agent="se_darwin", precision="fp16")._value.get()
0.0
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import PRECISION_LABELS, Families
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import EXECUTION_MODES, PrecisionName


class PrecisionMetrics:
    """The precision, loss-scale and execution series, each labelled by ``agent``."""

    def __init__(self, families: Families) -> None:
        gauge, counter = families.gauge, families.counter
        self.loss_scale = gauge(
            "loss_scale",
            "Dynamic loss scale (1 outside fp16): the running run's; between runs and from "
            "start-up, the one the next run starts with (fp16: its newest checkpoint's, else "
            "the initial 65536); NaN while an auto agent's precision is undecided (no "
            "checkpoint yet).",
        )
        self.precision = gauge(
            "precision",
            "1 for the precision the agent trains in, 0 for the others: the running run's; "
            "between runs and from start-up, the one the next run asks for (auto: the one "
            "its newest checkpoint was trained in); all 0 while an auto agent has none.",
            ("agent", "precision"),
        )
        self.execution = gauge(
            "execution",
            "1 for how the agent's last run executed its steps (eager, cuda_graph or "
            "cuda_graph_compiled), 0 else.",
            ("agent", "mode"),
        )
        self.execution_fallbacks = counter(
            "execution_fallbacks",
            "Runs that resolved a captured step (cuda_graph, cuda_graph_compiled) but ran "
            "eagerly, by reason: verification_mismatch (its first captured steps differed "
            "from eager steps from the same state, or its cached verdict says so), "
            "capture_failed (a capture raised; the run went on eagerly from the step "
            "before it).",
            ("agent", "reason"),
        )

    def set_precision(self, agent: str, precision: PrecisionName | None) -> None:
        """Mark ``precision`` as the agent's active precision (1) and the others 0; None
        (an ``auto`` not decided yet) sets every precision 0.

        The others are zeroed first, so a scrape in between never sees two active precisions.
        """
        for name in PRECISION_LABELS:
            if name != precision:
                self.precision.labels(agent=agent, precision=name).set(0)
        if precision in PRECISION_LABELS:
            self.precision.labels(agent=agent, precision=precision).set(1)

    def set_execution(self, agent: str, mode: str) -> None:
        """Mark ``mode`` (one of ``EXECUTION_MODES``) as how the agent's last run stepped;
        the others 0."""
        for name in EXECUTION_MODES:
            self.execution.labels(agent=agent, mode=name).set(1 if name == mode else 0)

    def export_execution(
        self, agent: str, result: TrainResult, precision: PrecisionName | None
    ) -> None:
        """A finished run: how its steps executed (a fallback to eager counted by reason),
        and ``precision`` on the gauge when the job says which (None: leave the gauge)."""
        if precision is not None:
            self.set_precision(agent, precision)
        self.set_execution(agent, result.execution)
        if result.execution_fallback is not None:
            self.execution_fallbacks.labels(agent=agent, reason=result.execution_fallback).inc()
