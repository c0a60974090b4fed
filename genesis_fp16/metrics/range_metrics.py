"""Per-layer range statistics in Prometheus, with bounded cardinality.

A run reports its sampled steps' range statistics as a
:class:`~genesis_fp16_infrastructure.training.reports.RangeSummary` (``TrainResult.ranges``):
the modules nearest fp16's overflow and nearest its underflow, and every module's totals.
Only the ``k`` nearest of each (per agent) and a ``module="(all)"`` row are exported, and
the series of a module that left them are removed, so an agent never holds more than
``2k + 1`` modules' series, whatever the model's size::

    ranges = RangeMetrics(registry, k=8)
    ranges.export("se_darwin", result)  # its TrainResult.ranges

- ``genesis_fp16_range_headroom_overflow_log2{agent,module}``: doublings between the
  module's largest activation and 65504 (fp16's largest value), the smallest over the
  run's sampled steps; 0 is the edge, past it the activation overflows and its step is
  skipped (a loss scale does not help an activation);
- ``genesis_fp16_range_headroom_underflow_log2{agent,module}``: doublings between the
  module's largest scaled gradient and 2**-24 (fp16's smallest subnormal); at 0 its whole
  gradient flushes to zero;
- ``genesis_fp16_layer_max_abs{agent,module,kind}``: the largest finite magnitude of
  the module's ``activation`` (outputs) or ``gradient`` (its parameters', unscaled);
- ``genesis_fp16_layer_fp16_fraction{agent,module,limit}``: the largest fraction of its
  scaled gradient values fp16 could not hold in a sampled step, ``overflow`` (over 65504
  or not finite) or ``underflow`` (non-zero under 2**-24, flushed to zero);
- ``genesis_fp16_layer_nonfinite{agent,module}``: non-finite values in the sampled steps;
- ``genesis_fp16_range_samples{agent}``, ``genesis_fp16_range_sample_every{agent}`` and
  ``genesis_fp16_range_overhead_ratio{agent}``: the last run's sampled steps, the
  interval it ended with, and the share of its step time they cost (as measured in the run).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.plugin_api import TrainResult


class RangeMetrics:
    """The range gauges of one registry; see the module docstring."""

    def __init__(self, registry: CollectorRegistry, k: int = 8) -> None:
        if k < 1:
            raise ValueError(f"RangeMetrics(k={k!r}): must be >= 1")
        self.k = k
        self.families = f = Families(registry)
        module = ("agent", "module")
        self.headroom = {
            "overflow": f.gauge(
                "range_headroom_overflow_log2",
                "Doublings between a module's largest activation and fp16's 65504 over the "
                "last run's sampled steps, for the k modules nearest overflow and (all).",
                module,
            ),
            "underflow": f.gauge(
                "range_headroom_underflow_log2",
                "Doublings between a module's largest scaled gradient and fp16's smallest "
                "subnormal (2**-24), for the k modules nearest underflow and (all).",
                module,
            ),
        }
        self.max_abs = f.gauge(
            "layer_max_abs",
            "Largest finite magnitude in the last run's sampled steps, per module nearest "
            "fp16's limits and (all): activation (outputs) or gradient (unscaled).",
            (*module, "kind"),
        )
        self.fraction = f.gauge(
            "layer_fp16_fraction",
            "Largest fraction of a module's scaled gradient values fp16 cannot hold in a "
            "sampled step: overflow (> 65504 or not finite) or underflow (non-zero < 2**-24).",
            (*module, "limit"),
        )
        self.nonfinite = f.gauge(
            "layer_nonfinite",
            "Non-finite activation and gradient values in the last run's sampled steps.",
            module,
        )
        self.samples = f.gauge("range_samples", "Sampled steps of the last run.")
        self.every = f.gauge(
            "range_sample_every", "Steps between range samples at the end of the last run."
        )
        self.overhead = f.gauge(
            "range_overhead_ratio",
            "Share of the last run's step time its range samples cost, as the run measured it.",
        )

    def export(self, agent: str, result: TrainResult) -> list[str]:
        """Set the gauges from the run's ``result.ranges`` for ``agent``; the modules
        shown, nearest overflow first, then those nearest underflow not already shown. A
        run that sampled no step (no ranges) leaves the last run's series."""
        summary = result.ranges
        if summary is None:
            return []
        replace = self.families.replace
        for limit, gauge in self.headroom.items():  # None: no such value in the module (no series)
            near = summary.nearest(self.k, limit).items()
            found = {(m,): getattr(r, f"headroom_{limit}") for m, r in near}
            replace(gauge, agent, {m: v for m, v in found.items() if v is not None})
        rows = summary.nearest(self.k)
        layer = rows.values()
        kinds = {"activation": "activation_max", "gradient": "gradient_max"}
        maxima = {(r.module, k): getattr(r, field) for r in layer for k, field in kinds.items()}
        replace(self.max_abs, agent, maxima)
        limits = ("overflow", "underflow")
        replace(self.fraction, agent, {(r.module, k): getattr(r, k) for r in layer for k in limits})
        replace(self.nonfinite, agent, {(r.module,): r.nonfinite for r in layer})
        self.samples.labels(agent).set(summary.samples)
        self.every.labels(agent).set(summary.every)
        if summary.overhead is not None:
            self.overhead.labels(agent).set(summary.overhead)
        return list(rows)[:-1]
