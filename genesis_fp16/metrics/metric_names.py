"""The names and label values of the daemon's metrics (genesis_fp16/metrics/daemon_metrics.py),
and the one way a family is declared (:class:`Families`).

Every name has the prefix ``genesis_fp16_``, and every label has a bounded set of values:
the outcomes, reasons and buckets below, fixed here so that the alert rules, the docs
and the tests read the same lists the daemon exports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from genesis_fp16_infrastructure.api import PRECISIONS, Outcome

PREFIX = "genesis_fp16"
PRECISION_LABELS = PRECISIONS
# up_to_date: the agent's model had already learned all of its data, so the run took no
# step (healthy: a daemon whose data does not change trains nothing and pages nobody).
RUN_OUTCOMES = (
    Outcome.SUCCESS,
    Outcome.FAILED,
    Outcome.STOPPED,
    Outcome.UP_TO_DATE,
    Outcome.REJECTED,
)
# Outcomes that count as the agent being trained as it should (last_success_timestamp).
HEALTHY_OUTCOMES = (Outcome.SUCCESS, Outcome.UP_TO_DATE)
RELOAD_OUTCOMES = ("success", "failure")
# Why a run failed (genesis_fp16_run_failures_total), and why a job did not start.
# nonfinite_gradients / nonfinite_loss: the run ran its steps and learned nothing
# (TrainResult.failure; contract.reports.LEARNING_FAILURES).
FAILURE_REASONS = (
    *("refused", "error", "storage", "exit", "hung", "memory", "device_unavailable"),
    *("nonfinite_gradients", "nonfinite_loss"),
)
SKIP_REASONS = ("still_running", "hung")
# Runs last minutes; the tail reaches two hours so a stuck run still lands in a bucket.
# Up to twice the default run timeout (6 h), so a run stopped by its timeout still lands
# in a finite bucket and histogram_quantile reads it.
RUN_DURATION_BUCKETS = (
    *(5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0),
    *(14400.0, 21600.0, 43200.0),
)

# The quality figures genesis_fp16_eval_quality carries, by its metric label: held-out, or
# out of fold where the agent cross-validates a small pool (se_darwin under 3,334 records).
EVAL_QUALITY = ("auc", "auc_ci_low", "auc_ci_high", "examples")

Labels = TypeVar("Labels", bound=tuple[str, ...])  # a series' label values after ``agent``


class Families:
    """The metric families of one registry: each name prefixed ``genesis_fp16_`` (or
    ``prefix``), labelled by ``agent`` unless told; and the series that an export replaces
    whole (:meth:`replace`).

    >>> families = Families(CollectorRegistry())
    >>> phases = families.gauge("run_phase_seconds", "Seconds per phase.", ("agent", "phase"))
    >>> families.replace(phases, "se_darwin", {("read",): 1.0, ("train",): 2.0})
    >>> families.replace(phases, "se_darwin", {("train",): 3.0})  # read: removed, not left
    >>> [s.labels["phase"] for s in phases.collect()[0].samples]
    ['train']
    """

    def __init__(self, registry: CollectorRegistry, prefix: str = PREFIX) -> None:
        self.registry, self.prefix = registry, prefix
        self._written: dict[tuple[Gauge, str], set[tuple[str, ...]]] = {}

    def gauge(self, name: str, doc: str, labels: tuple[str, ...] = ("agent",)) -> Gauge:
        return Gauge(f"{self.prefix}_{name}", doc, labels, registry=self.registry)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ("agent",)) -> Counter:
        return Counter(f"{self.prefix}_{name}", doc, labels, registry=self.registry)

    def replace(self, gauge: Gauge, agent: str, values: Mapping[Labels, float]) -> None:
        """Set ``agent``'s series of ``gauge`` to ``values`` (keyed by their labels after
        ``agent``) and remove the ones its last replace wrote that ``values`` leave out:
        a module, phase or segment a run no longer reports is not left at an older value."""
        key = (gauge, agent)
        for gone in self._written.get(key, set()) - set(values):
            gauge.remove(agent, *gone)
        for labels, value in values.items():
            gauge.labels(agent, *labels).set(value)
        self._written[key] = set[tuple[str, ...]](values)
