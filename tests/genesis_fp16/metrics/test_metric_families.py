"""The daemon's series, split into one class per family, are exactly those it exported
before the split, and no function of genesis_fp16/metrics/ is long."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

import genesis_fp16.metrics
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

# Written from main at 88915a42, before the split, by ``python <this file>`` (one help text
# since: run_failures' hung, when thread isolation was removed): every family of
# a fresh DaemonMetrics with one agent added, with its type, help and samples (labels, value).
EXPECTED = Path(__file__).with_name("daemon_series_88915a42.json")
PLACEMENT = [
    {"pod": "p", "namespace": "n", "hostname": "h", "gpu": "0", "uuid": "u", "model_name": "m"}
]
LONGEST = 60  # lines of one function in genesis_fp16/metrics/ (issue 94)


def series() -> dict[str, Any]:
    """Each family of a fresh registry by name: its type, help, label names (a family
    with no sample yet has them too) and sorted samples."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="0.1.0", placement=PLACEMENT)
    metrics.add_agent("se_darwin", last_success=1234.5)
    # The registry keeps no label names of its own: read them from each collector.
    labels = {
        name: list(collector._labelnames)  # type: ignore[attr-defined]
        for collector, names in registry._collector_to_names.items()
        for name in names
    }
    return {
        family.name: {
            "type": family.type,
            "help": family.documentation,
            "labels": labels[family.name],
            "samples": sorted([s.name, sorted(s.labels.items()), s.value] for s in family.samples),
        }
        for family in registry.collect()
    }


def test_every_series_is_as_before_the_split() -> None:
    """Names, types, help texts, label sets and initial values equal the pre-split ones."""
    expected = json.loads(EXPECTED.read_text())
    found = json.loads(json.dumps(series()))  # tuples as lists, as the fixture holds them
    assert sorted(found) == sorted(expected)
    for name, family in expected.items():
        assert found[name] == family, name


def test_no_function_in_metrics_is_over_60_lines() -> None:
    """Each function of genesis_fp16/metrics/ is at most 60 lines, its docstring included."""
    root = Path(genesis_fp16.metrics.__file__).parent
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    long.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines")
    assert long == []


if __name__ == "__main__":
    EXPECTED.write_text(json.dumps(series(), indent=1, sort_keys=True) + "\n")
