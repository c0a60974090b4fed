"""The promotion gate's counter: promotions counted from the served-model journal."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.served_metrics import JournalCursor, PromotionMetrics
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import JournalEntry


def test_the_gates_promotions_are_counted_once_each_and_nothing_else() -> None:
    """The gate's serves (first and gate) count once each however often the journal is
    read; the operator's serve, a rollback and an unpin do not."""
    registry = CollectorRegistry()
    metrics, cursor = PromotionMetrics(registry), JournalCursor()
    cursor.baseline("a", [])
    journal = [
        JournalEntry(seq=1, kind="first"),
        JournalEntry(seq=2, kind="gate"),
        JournalEntry(seq=3, kind="manual"),
        JournalEntry(seq=4, kind="rollback", reason="operator"),
        JournalEntry(seq=5, kind="unpin"),
    ]
    assert metrics.count_promotions("a", cursor.new("a", journal)) == 2
    assert metrics.count_promotions("a", cursor.new("a", journal)) == 0
    assert metrics.count_promotions("a", cursor.new("a", [JournalEntry(seq=6, kind="gate")])) == 1
    assert registry.get_sample_value("genesis_fp16_promotions_total", {"agent": "a"}) == 3.0
