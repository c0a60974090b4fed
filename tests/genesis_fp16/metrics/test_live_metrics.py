"""The live watch's series: figures, the regression flag and the rollback counter."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from genesis_fp16.metrics import served_metrics
from genesis_fp16.metrics.served_metrics import LiveMetrics
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import JournalEntry
from genesis_fp16_infrastructure.api import LiveReport, ServedPointer
from genesis_fp16_infrastructure.contract.reports import LiveFigures, SelfTest, WatchSegment

ROLLED_BACK = LiveReport(
    served="m2",
    against="m1",
    records=295,
    new_records=95,
    alpha=0.05,
    regression=True,
    rolled_back=True,
    now_served="m1",
    primary="log_loss",
    metrics={
        "log_loss": LiveFigures(295, 0.63, 0.43, 0.84, 0.01, 0.025, True, 0.95, 0.32),
        "brier": LiveFigures(295, 0.0, -0.01, 0.01, 0.005, 0.025, False, 0.21, 0.2),
    },
)


def _primary(live: LiveReport, **figures: Any) -> LiveReport:
    """``live`` with its primary column's figures replaced."""
    return replace(live, metrics={**live.metrics, "log_loss": replace(live.watched, **figures)})


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"agent": "se_darwin", **labels})


def test_a_rollback_is_flagged_and_the_flag_cleared_by_a_promotion() -> None:
    """A reported rollback sets the regression flag with the figures (the count comes
    from the journal, not the report); a later promoted candidate clears the flag."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    metrics.observe("se_darwin", None, promoted=True)
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0  # exists before
    metrics.observe("se_darwin", ROLLED_BACK, promoted=False)
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0  # the report's
    assert _value(registry, "genesis_fp16_live_regression") == 1.0
    assert _value(registry, "genesis_fp16_live_records") == 295.0
    assert _value(registry, "genesis_fp16_live_log_loss_difference", bound="lower") == 0.43
    assert _value(registry, "genesis_fp16_live_quality", model="previous", score="log_loss") == 0.32
    metrics.observe("se_darwin", None, promoted=True)
    assert _value(registry, "genesis_fp16_live_regression") == 0.0


ROLLBACK = {"kind": "rollback", "reason": "live_regression"}


def _journal(*entries: dict[str, Any]) -> list[JournalEntry]:
    return [JournalEntry.from_json(e) for e in entries]


def _observe(metrics: LiveMetrics, journal: list[JournalEntry]) -> int:
    """What the daemon does after each run: the journal's new entries, rollbacks counted."""
    return metrics.count_rollbacks("se_darwin", metrics.cursor.new("se_darwin", journal))


def test_journal_rollbacks_are_counted_once_from_the_baseline_on() -> None:
    """Rollbacks before the baseline are not counted; each live-regression rollback after
    it counts once however often the journal is read; an operator's does not count."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    metrics.cursor.baseline("se_darwin", _journal({"seq": 1, **ROLLBACK}))
    journal = _journal({"seq": 1, **ROLLBACK}, {"seq": 2, "kind": "gate"}, {"seq": 3, **ROLLBACK})
    assert _observe(metrics, journal) == 1
    assert _observe(metrics, journal) == 0
    operator = JournalEntry(seq=4, kind="rollback", reason="operator")
    assert _observe(metrics, [*journal, operator]) == 0
    assert _observe(metrics, _journal({"seq": 5, **ROLLBACK})) == 1
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 2.0


def test_a_journal_never_baselined_counts_nothing_it_held_already() -> None:
    """A daemon that reads an agent's journal before any run of it started (a restart):
    what the journal held is an earlier daemon's, not counted again; what follows is."""
    metrics = LiveMetrics(CollectorRegistry())
    assert _observe(metrics, _journal({"seq": 7, **ROLLBACK})) == 0
    assert _observe(metrics, _journal({"seq": 8, **ROLLBACK})) == 1


def test_a_held_regression_is_flagged_but_not_counted() -> None:
    """A regression held by a pin: flag 1, no rollback counted."""
    registry = CollectorRegistry()
    LiveMetrics(registry).observe(
        "se_darwin", replace(ROLLED_BACK, rolled_back=False, held="pinned"), False
    )
    assert _value(registry, "genesis_fp16_live_regression") == 1.0
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0


def test_the_quality_series_is_named_by_the_watched_column_and_a_missing_mean_left_unset() -> None:
    """Each watched column's name labels its quality series (se_darwin: log_loss and
    brier, another plugin: loss); a mean the report does not have is left absent, never
    made up."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    metrics.observe("se_darwin", _primary(ROLLED_BACK, previous_loss=None), False)
    assert _value(registry, "genesis_fp16_live_quality", model="served", score="log_loss") == 0.95
    assert _value(registry, "genesis_fp16_live_quality", model="previous", score="log_loss") is None
    assert _value(registry, "genesis_fp16_live_quality", model="served", score="auc") is None
    assert _value(registry, "genesis_fp16_live_quality", model="previous", score="brier") == 0.2


def test_the_watchs_own_figures_are_exported_per_segment() -> None:
    """A report with segments and a self-test: each segment's bounds and evidence, the
    records needed, the false-rollback rate with its interval; a later watch's report
    without a segment removes that segment's series (no stale agent left behind)."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    segment = WatchSegment("qa", 120, 0.4, 0.1, 0.7, 0.05 / 32, 900.0, 0, True)
    live = replace(
        _primary(ROLLED_BACK, evidence=3.5, records_needed=None, segments=(segment,)),
        self_test=SelfTest(200, 295, 1, 0.005, 0.0009, 0.0277),
    )
    metrics.observe("se_darwin", live, False)
    diff = "genesis_fp16_live_watch_segment_difference"
    assert _value(registry, diff, segment="qa", bound="lower") == 0.1
    assert _value(registry, diff, segment="all", bound="upper") == 0.84
    assert _value(registry, "genesis_fp16_live_watch_evidence", segment="qa") == 900.0
    assert math.isnan(_value(registry, "genesis_fp16_live_watch_records_needed") or 0.0)
    rate = "genesis_fp16_live_watch_false_rollback_rate"
    assert _value(registry, rate, bound="estimate") == 0.005
    assert _value(registry, rate, bound="upper") == 0.0277
    metrics.observe("se_darwin", _primary(live, segments=()), False)
    assert _value(registry, diff, segment="qa", bound="lower") is None


def test_not_watching_follows_the_clock_between_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Served at t, idle limit 60 s: the gauge reads 0 at t + 30 and 1 at t + 61 with no
    run in between (computed at the scrape); no predecessor reads 1 at once."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    served = "2026-01-01T00:00:00Z"
    start = 1767225600.0  # that stamp
    clock = [start + 30]
    monkeypatch.setattr(served_metrics.time, "time", lambda: clock[0])

    def pointer(live: dict[str, Any] | None, predecessor: bool) -> ServedPointer:
        entry = {"checkpoint": "m.pt", "served_at": served, "live": live}
        history = [{"checkpoint": "m0.pt"}] if predecessor else []
        return ServedPointer.from_json({"version": 1, "served": entry, "history": history})

    metrics.observe_pointer("se_darwin", pointer(None, True), 60.0)
    name = "genesis_fp16_live_watch_not_watching"
    assert _value(registry, name) == 0.0
    assert _value(registry, "genesis_fp16_live_watch_last_record_timestamp_seconds") == start
    clock[0] = start + 61
    assert _value(registry, name) == 1.0
    later = {  # records arrived: the watch's figures (one column beside the report's)
        "against": None, "records": 3, "new_records": 3, "alpha": 0.05, "regression": False,
        "difference": 0.0, "lower": -0.1, "upper": 0.1, "margin": 0.01,
        "updated_at": "2026-01-01T00:01:00Z",
    }  # fmt: skip
    metrics.observe_pointer("se_darwin", pointer(later, True), 60.0)
    assert _value(registry, name) == 0.0
    metrics.observe_pointer("se_darwin", pointer(None, False), 60.0)
    clock[0] = start
    assert _value(registry, name) == 1.0
