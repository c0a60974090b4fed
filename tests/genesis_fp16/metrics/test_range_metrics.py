"""Per-layer range statistics in Prometheus: bounded cardinality, and a real daemon's
/metrics carrying them for its agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS, DaemonFactory
from fake_results import train_result
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from torch import nn

from genesis_fp16.metrics.daemon_metrics import RangeMetrics
from genesis_fp16_infrastructure.training.flight.range_stats import TOTAL
from genesis_fp16_infrastructure.training.reports import ModuleRange, RangeSummary

GUARD_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "guard_plugins"
AGENT = "fixture_fault"
# The names RangeMetrics registers, read from a registry of its own.
RANGE_METRIC_NAMES = {m.name for m in RangeMetrics(CollectorRegistry()).families.registry.collect()}


def _row(name: str, over: float, under: float | None = 20.0) -> ModuleRange:
    return ModuleRange(name, 2.0 ** (16 - over), 1.0, 0.0, 0.0, 0.0, over, under)


def _summary(names: list[str], hot: int, cold: int) -> RangeSummary:
    """Module ``hot`` nearest overflow, ``cold`` nearest underflow; 8 of each, as a run's."""
    rows = [
        _row(n, 1.0 if i == hot else 10.0 + i / 1000, 1.0 if i == cold else 20.0 + i / 1000)
        for i, n in enumerate(names)
    ]
    by_over = sorted(rows, key=lambda r: r.headroom_overflow or 0.0)[:8]
    by_under = sorted(rows, key=lambda r: r.headroom_underflow or 0.0)[:8]
    total = _row(TOTAL, 1.0, 1.0)
    return RangeSummary(3, 30, "fp16", 40, 2.0, tuple(by_over), tuple(by_under), total)


def _series(registry: CollectorRegistry, agent: str) -> list[dict[str, str]]:
    return [
        s.labels
        for m in registry.collect()
        for s in m.samples
        if m.name in RANGE_METRIC_NAMES and s.labels.get("agent") == agent
    ]


def test_prometheus_series_stay_bounded_for_500_modules() -> None:
    """A 500-module model exports the k nearest overflow, the k nearest underflow and
    (all) per agent, whatever the model's size; a module that leaves them loses its series."""
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(499)])  # 500 with the root
    names = [name or "(model)" for name, _ in model.named_modules()]
    registry = CollectorRegistry()
    ranges = RangeMetrics(registry, k=8)
    for agent in ("a", "b"):
        shown = ranges.export(agent, train_result(ranges=_summary(names, hot=300, cold=400)))
        assert shown[0] == names[300]
    shown = ranges.export("a", train_result(ranges=_summary(names, hot=350, cold=450)))
    assert shown[0] == names[350]
    assert ranges.export("a", train_result()) == []  # no step sampled: the series stay
    for agent in ("a", "b"):
        modules = {s["module"] for s in _series(registry, agent) if "module" in s}
        assert len(modules) <= 2 * 8 + 1 and TOTAL in modules
    shown = {s["module"] for s in _series(registry, "a") if "module" in s}
    assert {names[350], names[450]} <= shown and not {names[300], names[400]} & shown
    headroom = {
        s.labels["module"]: s.value
        for m in registry.collect()
        if m.name == "genesis_fp16_range_headroom_overflow_log2"
        for s in m.samples
        if s.labels["agent"] == "a"
    }
    assert headroom[names[350]] == 1.0 and len(headroom) == 8 + 1


def test_a_module_without_a_headroom_has_no_series() -> None:
    """A headroom the run could not measure (None) is absent, not exported as a number."""
    registry = CollectorRegistry()
    row = _row("0", 3.0, None)
    summary = RangeSummary(1, 3, "fp16", 10, None, (row,), (row,), row)
    RangeMetrics(registry).export("a", train_result(ranges=summary))
    names = {m.name for m in registry.collect() for s in m.samples if s.labels.get("agent") == "a"}
    assert "genesis_fp16_range_headroom_underflow_log2" not in names
    assert "genesis_fp16_range_overhead_ratio" not in names  # not measured: not exported
    assert "genesis_fp16_range_headroom_overflow_log2" in names


@pytest.mark.slow
def test_a_real_daemon_exports_its_agents_ranges(daemon_factory: DaemonFactory) -> None:
    """A daemon's fp16 run of a fit() agent, range statistics on by default, puts the
    modules nearest overflow and underflow on /metrics with (all) and the sample count."""
    env = {
        "PYTHONPATH": os.pathsep.join([str(GUARD_PLUGINS), str(FIXTURE_PLUGINS)]),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
        "ENABLE_FP16_TRAINING": "true",
        "GENESIS_FP16_STEPS_PER_RUN": "30",
        "GENESIS_FP16_SCHEDULE": "3600",
        "FIXTURE_FAULT_STEP": "100000",  # no fault: a healthy fp16 run
    }
    daemon = daemon_factory(env)
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_training_runs_total", agent=AGENT, outcome="success"),
        "the first run",
        timeout=120,
    )
    samples = daemon.sample("genesis_fp16_range_samples", agent=AGENT)
    assert samples is not None and samples >= 1
    over = "genesis_fp16_range_headroom_overflow_log2"
    total = daemon.sample(over, agent=AGENT, module=TOTAL)
    assert total is not None and 0.0 < total < 40.0  # a healthy tiny model: far from 65504
    modules = {
        s.labels["module"]
        for family in text_string_to_metric_families(daemon.metrics_text())
        for s in family.samples
        if s.name == over and s.labels.get("agent") == AGENT
    }
    assert TOTAL in modules and len(modules) >= 2
    assert daemon.sample("genesis_fp16_range_headroom_underflow_log2", agent=AGENT, module=TOTAL)
    assert daemon.sample("genesis_fp16_layer_max_abs", agent=AGENT, module=TOTAL, kind="gradient")
