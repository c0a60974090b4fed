"""The live watch's series: figures, the regression flag and the rollback counter."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.live_metrics import LiveMetrics
from genesis_fp16_infrastructure.contract.reports import GateReport, LiveReport

ROLLED_BACK = LiveReport(
    served="m2",
    against="m1",
    records=295,
    new_records=95,
    served_auc=0.61,
    previous_auc=0.69,
    served_log_loss=0.95,
    previous_log_loss=0.32,
    difference=0.63,
    lower=0.43,
    upper=0.84,
    margin=0.01,
    alpha=0.05,
    regression=True,
    rolled_back=True,
    now_served="m1",
)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"agent": "se_darwin", **labels})


def test_a_rollback_is_flagged_and_the_flag_cleared_by_a_promotion() -> None:
    """A reported rollback sets the regression flag with the figures (the count comes
    from the journal, not the report); a later promoted candidate clears the flag."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    metrics.observe("se_darwin", None, GateReport("promoted", "no worse"))
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0  # exists before
    metrics.observe("se_darwin", ROLLED_BACK, GateReport("rejected", "worse"))
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0  # the report's
    assert _value(registry, "genesis_fp16_live_regression") == 1.0
    assert _value(registry, "genesis_fp16_live_records") == 295.0
    assert _value(registry, "genesis_fp16_live_log_loss_difference", bound="lower") == 0.43
    assert _value(registry, "genesis_fp16_live_quality", model="previous", score="auc") == 0.69
    metrics.observe("se_darwin", None, GateReport("promoted", "no worse"))
    assert _value(registry, "genesis_fp16_live_regression") == 0.0


ROLLBACK = {"kind": "rollback", "reason": "live_regression"}


def test_journal_rollbacks_are_counted_once_from_the_baseline_on() -> None:
    """Rollbacks before the baseline are not counted; each live-regression rollback after
    it counts once however often the journal is read; an operator's does not count."""
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    metrics.baseline("se_darwin", [{"seq": 1, **ROLLBACK}])
    journal = [{"seq": 1, **ROLLBACK}, {"seq": 2, "kind": "gate"}, {"seq": 3, **ROLLBACK}]
    assert metrics.observe_journal("se_darwin", journal) == 1
    assert metrics.observe_journal("se_darwin", journal) == 0
    operator = {"seq": 4, "kind": "rollback", "reason": "operator"}
    assert metrics.observe_journal("se_darwin", [*journal, operator]) == 0
    assert metrics.observe_journal("se_darwin", [{"seq": 5, **ROLLBACK}]) == 1
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 2.0


def test_a_journal_never_baselined_counts_nothing_it_held_already() -> None:
    """A daemon that reads an agent's journal before any run of it started (a restart):
    what the journal held is an earlier daemon's, not counted again; what follows is."""
    metrics = LiveMetrics(CollectorRegistry())
    assert metrics.observe_journal("se_darwin", [{"seq": 7, **ROLLBACK}]) == 0
    assert metrics.observe_journal("se_darwin", [{"seq": 8, **ROLLBACK}]) == 1


def test_a_held_regression_is_flagged_but_not_counted() -> None:
    """A regression held by a pin: flag 1, no rollback counted."""
    registry = CollectorRegistry()
    LiveMetrics(registry).observe(
        "se_darwin", replace(ROLLED_BACK, rolled_back=False, held="pinned"), None
    )
    assert _value(registry, "genesis_fp16_live_regression") == 1.0
    assert _value(registry, "genesis_fp16_live_rollbacks_total") == 0.0


def test_an_auc_the_records_could_not_give_is_left_unset() -> None:
    """A report whose AUCs are None (records of one label) sets the log-losses and leaves
    the AUC series absent rather than exporting a made-up value."""
    registry = CollectorRegistry()
    LiveMetrics(registry).observe(
        "se_darwin", replace(ROLLED_BACK, served_auc=None, previous_auc=None), None
    )
    assert _value(registry, "genesis_fp16_live_quality", model="served", score="auc") is None
    assert _value(registry, "genesis_fp16_live_quality", model="served", score="log_loss") == 0.95
