"""Metric names in PromQL expressions, and the names the daemon really exports.

A deliberately small reader of PromQL: enough to find every metric selector in an
expression and the function call it sits in, for the dashboard and alert-rule checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<open>\()|(?P<close>\))|(?P<other>\S))"
)
KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left"}
    | {"group_right", "inf", "nan", "Inf", "NaN"}
)
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
COUNTER_FUNCTIONS = frozenset({"rate", "increase", "irate"})


@dataclass(frozen=True)
class Selector:
    """One metric selector: its name and the innermost function call around it."""

    metric: str
    function: str | None


def selectors(expr: str) -> list[Selector]:
    """Every metric selector in ``expr``, in order.

    >>> selectors('sum by (agent) (rate(x_total{a="b"}[5m])) / y')
    [Selector(metric='x_total', function='rate'), Selector(metric='y', function=None)]
    """
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _OFFSET.sub("", text)
    text = _GROUPING.sub("", text)
    tokens = [m for m in _TOKEN.finditer(text) if m.lastgroup]
    found: list[Selector] = []
    stack: list[str | None] = []
    calls = set()  # indexes of names that call a function: `name (`
    for index, token in enumerate(tokens[:-1]):
        name = token.group("name")
        if name and name not in KEYWORDS and tokens[index + 1].lastgroup == "open":
            calls.add(index)
    for index, token in enumerate(tokens):
        kind, value = token.lastgroup, token.group(token.lastgroup or 0)
        if index in calls:
            stack.append(value)
        elif kind == "open" and index - 1 not in calls:
            stack.append(None)
        elif kind == "close":
            stack.pop()
        elif kind == "name" and value not in KEYWORDS:
            function = next((name for name in reversed(stack) if name), None)
            found.append(Selector(value, function))
    return found


def is_counter_series(metric: str) -> bool:
    """Counters and histogram parts, which only make sense through rate() or increase()."""
    return metric.endswith(COUNTER_SUFFIXES)


def exported_series_names() -> set[str]:
    """Every series name the daemon's metrics module registers, as Prometheus scrapes them.

    Built from the daemon's own registry (genesis_fp16.metrics.daemon_metrics.DaemonMetrics),
    so a metric renamed there makes a dashboard or rule that still uses the old name fail.
    """
    from genesis_fp16.metrics.daemon_metrics import DaemonMetrics

    registry = CollectorRegistry()
    DaemonMetrics(registry, version="test")
    names: set[str] = set()
    for family in registry.collect():
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("_count", "_sum", "_created", ""),
            "info": ("_info",),
        }.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names
