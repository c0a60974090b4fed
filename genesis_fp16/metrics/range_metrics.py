"""Per-layer range statistics in Prometheus, with bounded cardinality.

A run's sampled :class:`~genesis_fp16_infrastructure.training.flight.range_stats.RangeReport`
names every module of the model; exporting each would be one series per module and
statistic (thousands for a large model). Only the ``k`` modules nearest fp16's limits
(per agent) and a ``module="(all)"`` row of totals are exported, and the series of a
module that left the top ``k`` are removed, so an agent never holds more than
``(k + 1) * 5`` series::

    ranges = RangeMetrics(registry, k=8)
    ranges.export("se_darwin", report)

- ``genesis_fp16_layer_max_abs{agent,module,kind}``: the largest finite magnitude of
  the module's ``activation`` (outputs) or ``gradient`` (its parameters', unscaled);
- ``genesis_fp16_layer_fp16_fraction{agent,module,limit}``: the fraction of its scaled
  gradient values fp16 could not hold, ``overflow`` (over 65504 or not finite) or
  ``underflow`` (non-zero under 2**-24, flushed to zero);
- ``genesis_fp16_layer_nonfinite{agent,module}``: non-finite values in the sampled step.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge

TOTAL = "(all)"
RANGE_METRIC_NAMES = (
    "genesis_fp16_layer_max_abs",
    "genesis_fp16_layer_fp16_fraction",
    "genesis_fp16_layer_nonfinite",
)


class RangeMetrics:
    """The three range gauges of one registry; see the module docstring."""

    def __init__(self, registry: CollectorRegistry, k: int = 8) -> None:
        if k < 1:
            raise ValueError(f"RangeMetrics(k={k!r}): must be >= 1")
        self.k = k
        self.max_abs = Gauge(
            "genesis_fp16_layer_max_abs",
            "Largest finite magnitude in the last sampled step, per module nearest fp16's "
            "limits (top k per agent) and (all): activation (outputs) or gradient (unscaled).",
            ("agent", "module", "kind"),
            registry=registry,
        )
        self.fraction = Gauge(
            "genesis_fp16_layer_fp16_fraction",
            "Fraction of a module's scaled gradient values fp16 cannot hold in the last "
            "sampled step: overflow (> 65504 or not finite) or underflow (non-zero < 2**-24).",
            ("agent", "module", "limit"),
            registry=registry,
        )
        self.nonfinite = Gauge(
            "genesis_fp16_layer_nonfinite",
            "Non-finite activation and gradient values in the last sampled step.",
            ("agent", "module"),
            registry=registry,
        )
        self._shown: dict[str, set[str]] = {}

    def export(self, agent: str, report: Any) -> list[str]:
        """Set the gauges from ``report`` for ``agent``; the modules shown, nearest first."""
        top = report.nearest_limits(self.k)
        rows = {m: report.modules[m] for m in top}
        rows[TOTAL] = report.totals()
        for gone in self._shown.get(agent, set()) - set(rows):
            self._remove(agent, gone)
        for module, row in rows.items():
            self.max_abs.labels(agent, module, "activation").set(row["activation_max"])
            self.max_abs.labels(agent, module, "gradient").set(row["gradient_max"])
            self.fraction.labels(agent, module, "overflow").set(row["overflow"])
            self.fraction.labels(agent, module, "underflow").set(row["underflow"])
            self.nonfinite.labels(agent, module).set(row["nonfinite"])
        self._shown[agent] = set(rows)
        return top

    def _remove(self, agent: str, module: str) -> None:
        for kind in ("activation", "gradient"):
            self.max_abs.remove(agent, module, kind)
        for limit in ("overflow", "underflow"):
            self.fraction.remove(agent, module, limit)
        self.nonfinite.remove(agent, module)
