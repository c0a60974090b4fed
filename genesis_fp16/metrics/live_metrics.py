"""The live watch's series: the served model against its predecessor on new records.

``observe`` reads a finished run's ``extra["live"]``
(genesis_fp16_infrastructure.recipes.retrain.live_watch) and its gate verdict; it is called for
every se_darwin-style run, so that the rollback counter exists at 0 before its first
rollback (an ``increase()`` over it then sees the first one).

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> registry = CollectorRegistry()
>>> metrics = LiveMetrics(registry)
>>> metrics.observe("se_darwin", {"records": 300, "difference": 0.6, "lower": 0.4,
...     "upper": 0.8, "regression": True, "rolled_back": True}, None)
>>> b'genesis_fp16_live_rollbacks_total{agent="se_darwin"} 1.0' in generate_latest(registry)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from genesis_fp16_infrastructure.contract.reports import GateReport

SIDES = ("served", "previous")
SCORES = ("auc", "log_loss", "loss")  # loss: a judged plugin's (contract.judging)
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

    def observe(self, agent: str, live: Mapping[str, Any] | None, gate: GateReport | None) -> None:
        """One run's live report (None: nothing scored) and its gate verdict."""
        self.rollbacks.labels(agent=agent)  # exists at 0 from the agent's first run
        if gate is not None and gate.outcome == "promoted":
            self.regression.labels(agent=agent).set(0)  # a new model: a new watch
        if live is None:
            return
        self.records.labels(agent=agent).set(float(live.get("records") or 0))
        for side in SIDES:
            for score in SCORES:
                value = live.get(f"{side}_{score}")
                if value is not None:
                    self.quality.labels(agent=agent, model=side, score=score).set(float(value))
        for bound, key in zip(BOUNDS, ("difference", "lower", "upper"), strict=True):
            if live.get(key) is not None:
                self.difference.labels(agent=agent, bound=bound).set(float(live[key]))
        if live.get("margin") is not None:
            self.margin.labels(agent=agent).set(float(live["margin"]))
        promoted = gate is not None and gate.outcome == "promoted"
        self.regression.labels(agent=agent).set(
            float(bool(live.get("regression")) and not promoted)
        )
        if live.get("rolled_back"):
            self.rollbacks.labels(agent=agent).inc()
