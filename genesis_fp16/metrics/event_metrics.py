"""The event outbox's series (genesis_fp16/events): what waits for a receiver, each
delivery attempt, and the events dropped undelivered past the outbox's bound.

>>> from prometheus_client import CollectorRegistry
>>> metrics = EventMetrics(CollectorRegistry())
>>> metrics.observe_pass("se_darwin", 2, 0)
>>> metrics.undelivered.labels(agent="se_darwin")._value.get()
2.0
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.metric_names import Families


class EventMetrics:
    """``genesis_fp16_events_undelivered{agent}``, ``genesis_fp16_event_deliveries_total
    {agent, outcome}`` and ``genesis_fp16_events_dropped{agent}``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        f = Families(registry)
        self.undelivered = f.gauge(
            "events_undelivered",
            "Events in the agent's outbox not yet delivered to every configured webhook "
            "(GENESIS_FP16_EVENTS_URLS): new, or waiting for a retry.",
        )
        self.deliveries = f.counter(
            "event_deliveries",
            "Webhook delivery attempts, by outcome: delivered (HTTP 2xx) or failed (refused, "
            "timed out, another status).",
            ("agent", "outcome"),
        )
        self.dropped = f.gauge(
            "events_dropped",
            "Events the agent's outbox dropped undelivered past its bound (10 x "
            "GENESIS_FP16_EVENTS_KEEP events), since the outbox was made.",
        )

    def observe_attempt(self, agent: str, delivered: bool) -> None:
        self.deliveries.labels(agent=agent, outcome="delivered" if delivered else "failed").inc()

    def observe_pass(self, agent: str, undelivered: int, dropped: int) -> None:
        self.undelivered.labels(agent=agent).set(undelivered)
        self.dropped.labels(agent=agent).set(dropped)
