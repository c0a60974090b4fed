"""The live watch's series: the served model against its predecessor on new records.

``observe`` reads a finished run's ``live`` (a
:class:`~genesis_fp16_infrastructure.contract.reports.LiveReport`, from
genesis_fp16_infrastructure.recipes.retrain.live_watch) and its gate verdict; it is called
for every se_darwin-style run, so that the rollback counter exists at 0 before its first
rollback (an ``increase()`` over it then sees the first one).

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> registry = CollectorRegistry()
>>> metrics = LiveMetrics(registry)
>>> live = LiveReport("m2", "m1", records=300, new_records=300, served_auc=0.6,
...     previous_auc=0.7, served_log_loss=0.9, previous_log_loss=0.3, difference=0.6,
...     lower=0.4, upper=0.8, margin=0.02, alpha=0.05, regression=True, rolled_back=True)
>>> metrics.observe("se_darwin", live, None)
>>> b'genesis_fp16_live_rollbacks_total{agent="se_darwin"} 1.0' in generate_latest(registry)
True
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from genesis_fp16_infrastructure.contract import GateReport, LiveReport

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
            "AUC and log-loss on those records, at the last run that scored new ones.",
            ("agent", "model", "score"),
        )
        self.difference = gauge(
            "log_loss_difference",
            "Mean per-record log-loss of the watched model minus its predecessor's on "
            "the same new records (bound=estimate), and its anytime-valid 95% bounds "
            "(bound=lower, upper); a lower bound above the margin is a live regression.",
            ("agent", "bound"),
        )
        self.margin = gauge(
            "margin",
            "The log-loss margin of the live watch: worse by more than this is a regression.",
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
        }
        for (side, score), value in scores.items():
            if value is not None:  # an AUC the records could not give
                self.quality.labels(agent=agent, model=side, score=score).set(value)
        for bound, value in zip(BOUNDS, (live.difference, live.lower, live.upper), strict=True):
            self.difference.labels(agent=agent, bound=bound).set(value)
        self.margin.labels(agent=agent).set(live.margin)
        self.regression.labels(agent=agent).set(float(live.regression and not promoted))
        if live.rolled_back:
            self.rollbacks.labels(agent=agent).inc()
