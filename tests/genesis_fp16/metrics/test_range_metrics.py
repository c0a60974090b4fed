"""Per-layer range statistics in Prometheus stay within their cardinality bound."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from torch import nn

from genesis_fp16.metrics.range_metrics import RANGE_METRIC_NAMES, TOTAL, RangeMetrics
from genesis_fp16_infrastructure.training.flight.range_stats import RangeReport


def _report(names: list[str], hot: int) -> RangeReport:
    rows = {
        n: {
            "activation_max": 1000.0 if i == hot else float(i % 100),
            "gradient_max": 1.0,
            "overflow": 0.0,
            "underflow": 0.0,
            "nonfinite": 0.0,
        }
        for i, n in enumerate(names)
    }
    return RangeReport(step=1, precision="fp16", modules=rows)


def test_prometheus_series_stay_bounded_for_500_modules() -> None:
    """A 500-module model exports at most (k + 1) * 5 series per agent, those of the k
    modules nearest the limits and the totals; a module that leaves the top k loses them."""
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(499)])  # 500 with the root
    names = [name or "(model)" for name, _ in model.named_modules()]
    assert len(names) == 500
    registry = CollectorRegistry()
    ranges = RangeMetrics(registry, k=8)
    for agent in ("a", "b"):
        assert ranges.export(agent, _report(names, hot=3))[0] == names[3]
    assert ranges.export("a", _report(names, hot=7))[0] == names[7]
    gauges = {n for n in RANGE_METRIC_NAMES}
    for agent in ("a", "b"):
        series = [
            s
            for m in registry.collect()
            if m.name in gauges
            for s in m.samples
            if s.labels["agent"] == agent
        ]
        assert len(series) == (8 + 1) * 5
    shown = {
        s.labels["module"]
        for m in registry.collect()
        for s in m.samples
        if s.labels.get("agent") == "a"
    }
    assert TOTAL in shown and names[7] in shown and names[3] not in shown
