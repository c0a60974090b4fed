"""The daemon's Prometheus metrics, on a registry the daemon creates and passes in.

Every name has the prefix ``genesis_fp16_``; per-agent series carry the label ``agent``
and every label has a bounded set of values (agent names come from installed plugins,
precisions and outcomes from fixed lists).

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> metrics = DaemonMetrics(CollectorRegistry(), version="0.1.0")
>>> metrics.set_precision("se_darwin", "bf16")
>>> b'genesis_fp16_precision{agent="se_darwin",precision="bf16"} 1.0' in generate_latest(
...     metrics.registry)
True
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics

from genesis_fp16.metrics.config_metrics import ConfigMetrics
from genesis_fp16.metrics.diagnostics_export import RlDiagnosticsMetrics
from genesis_fp16.metrics.guard_metrics import GuardMetrics
from genesis_fp16.metrics.metric_names import (
    EVAL_QUALITY,
    FAILURE_REASONS,
    PRECISION_LABELS,
    RUN_OUTCOMES,
    SKIP_REASONS,
    Families,
)
from genesis_fp16.metrics.plugin_metrics import PluginMetrics
from genesis_fp16.metrics.precision_metrics import PrecisionMetrics
from genesis_fp16.metrics.process_metrics import ProcessMetrics
from genesis_fp16.metrics.run_metrics import RunMetrics
from genesis_fp16.metrics.served_metrics import LiveMetrics, PromotionMetrics, RecentVerdictMetrics
from genesis_fp16.metrics.step_metrics import CUMULATIVE, StepMetrics
from genesis_fp16.metrics.storage_metrics import StorageMetrics
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import (
    FALLBACK_REASONS,
    LOW_PRECISIONS,
    AgentFolder,
    PrecisionName,
)

# A probe verdict's colour as a gauge holds it; a variant with no verdict ("n/a") sets none.
COLOUR_VALUES = {"green": 0, "amber": 1, "red": 2}


class DaemonMetrics(
    StepMetrics,
    PrecisionMetrics,
    GuardMetrics,
    RunMetrics,
    StorageMetrics,
    ProcessMetrics,
    PluginMetrics,
    ConfigMetrics,
):
    """All series of the daemon, registered on ``registry``: each family's series declared
    in its own class (a base of this one, so ``metrics.optimizer_steps`` is the step
    family's counter), and what a finished run reports beyond them in objects of their own
    (``report``, ``rl``, ``probe``, ``promotion``, ``live``, ``ranges``, ``events``,
    ``verdicts``).

    Counters that the training core reports as running totals (skipped steps, samples)
    advance by the increase between two summaries of the same agent; see
    :meth:`observe_summary`. The job that records a healthy run also keeps its time in
    the state folder (jobs/run_ended.py), and the daemon passes the stored time back to
    :meth:`add_agent` at start-up.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        version: str,
        placement: list[dict[str, str]] | None = None,  # device_info's label sets
    ) -> None:
        self.registry = registry
        # No *_created series: each counter and histogram would export a second series, a
        # creation time that Grafana and the alert rules never read. prometheus_client
        # keeps this switch process-wide; the daemon's registry is the one it serves.
        disable_created_metrics()
        families = Families(registry)
        StepMetrics.__init__(self, families)
        PrecisionMetrics.__init__(self, families)
        GuardMetrics.__init__(self, families)
        RunMetrics.__init__(self, families)  # after the steps: see RunMetrics
        StorageMetrics.__init__(self, families)
        ProcessMetrics.__init__(self, families, version, placement)
        PluginMetrics.__init__(self, families)
        ConfigMetrics.__init__(self, families)
        # What a finished run reports beyond its counters (RunReportMetrics, below), RL
        # diagnostics (genesis_fp16_rl_*), the probe's verdict.
        self.report = RunReportMetrics(registry)
        self.rl = RlDiagnosticsMetrics(registry)
        self.probe = ProbeMetrics(registry)
        self.promotion = PromotionMetrics(registry)
        self.live = LiveMetrics(registry)  # the served model watched on new records
        self.ranges = RangeMetrics(registry)  # per-layer range statistics, top k per agent
        self.events = EventMetrics(registry)  # the event outbox's deliveries
        self.verdicts = RecentVerdictMetrics(registry)  # is each agent still learning
        self._last: dict[str, dict[str, float]] = {}
        self._previous_log: dict[str, tuple[int, float]] = {}  # (step, wall) per agent
        self._first: set[str] = set()  # agents whose run has not reported yet
        self._lock = threading.Lock()

    def add_agent(self, agent: str, last_success: float = 0.0) -> None:
        """Create the agent's series at zero so that rates work from the first run;
        ``last_success`` is the time read back from the state folder (0: never)."""
        for counter in (*(getattr(self, name) for name in CUMULATIVE.values()), self.runs_started):
            counter.labels(agent=agent)
        for outcome in RUN_OUTCOMES:
            self.training_runs.labels(agent=agent, outcome=outcome)
        for reason in FAILURE_REASONS:
            self.run_failures.labels(agent=agent, reason=reason)
        for reason in SKIP_REASONS:
            self.jobs_skipped.labels(agent=agent, reason=reason)
        for reason in FALLBACK_REASONS:
            self.execution_fallbacks.labels(agent=agent, reason=reason)
        for name in AgentFolder.STATE_FILES:  # each set aside as <name>.unusable-*
            self.state_files_skipped.labels(agent=agent, file=name)
        self.report.add_agent(agent)
        self.runs_overdue.labels(agent=agent).set(0)
        self.run_duration.labels(agent=agent)
        self.last_success.labels(agent=agent).set(last_success)

    def start_run(self, agent: str, resumed: Mapping[str, float] | None = None) -> None:
        """Set where the next run's running totals start.

        The core's trainer continues ``optimizer_steps``, ``skipped_steps`` and
        ``nonfinite_losses`` from the checkpoint it resumes, and counts ``samples`` from
        zero in every run; ``resumed`` holds the checkpoint's totals (empty: from zero).
        """
        with self._lock:
            self._last[agent] = dict(resumed or {})  # floats: recording.resumed_totals
            self._previous_log.pop(agent, None)  # wall_seconds restarts with the run
            self._first.add(agent)

    def observe_summary(self, agent: str, summary: Any, show_precision: bool = True) -> None:
        """Export one ``TrainingSummary`` (a per-log-interval report) of ``agent``.

        ``show_precision=False`` leaves the precision gauge alone: a run that a reload is
        stopping reports in its old precision while the gauge shows the next run's.

        Counters advance by the increase of the summary's running totals since the
        previous summary of the run (or since the resumed checkpoint's totals).
        """
        with self._lock:
            last = self._last.setdefault(agent, {})
            if agent in self._first:
                self._first.discard(agent)
                self.runs_started.labels(agent=agent).inc()  # before its steps: see RunMetrics
                steps = summary.optimizer_steps + summary.skipped_steps  # skipped included
                if steps < last.get("optimizer_steps", 0.0) + last.get("skipped_steps", 0.0):
                    # Below the checkpoint's totals at its first report: the agent did not
                    # resume it (changed data trains afresh), so its totals start at zero.
                    last.clear()
            for field, name in CUMULATIVE.items():
                value = float(getattr(summary, field))
                increase = value - last.get(field, 0.0)
                if increase > 0:
                    getattr(self, name).labels(agent=agent).inc(increase)
                last[field] = max(value, last.get(field, 0.0))
            self._observe_step_time(agent, summary)
        self.loss_scale.labels(agent=agent).set(float(summary.loss_scale))
        self.overflow_rate.labels(agent=agent).set(float(summary.overflow_rate_window))
        self.grad_norm.labels(agent=agent).set(float(summary.grad_norm))
        self.train_loss.labels(agent=agent).set(float(summary.train_loss))
        if show_precision:
            self.set_precision(agent, summary.precision)

    def _observe_step_time(self, agent: str, summary: Any) -> None:
        """Seconds per step since the run's previous log (a summary with no clock: none)."""
        step, wall = getattr(summary, "step", None), getattr(summary, "wall_seconds", None)
        if step is None or wall is None:
            return
        previous = self._previous_log.get(agent)
        self._previous_log[agent] = (int(step), float(wall))
        if previous is not None and step > previous[0] and wall >= previous[1]:
            self.step_seconds.labels(agent=agent).set((wall - previous[1]) / (step - previous[0]))


class ProbeMetrics:
    """The precision probe's gauges, ``genesis_fp16_probe_*``, registered on ``registry``;
    genesis_fp16/jobs/probe_gate.py runs the probe and exports its record here.

    >>> COLOUR_VALUES["amber"]
    1
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        gauge = Families(registry).gauge
        self.verdict = gauge(
            "probe_verdict",
            "Precision probe verdict per variant: 0 green, 1 amber, 2 red.",
            ("agent", "variant"),
        )
        self.recommended = gauge(
            "probe_recommended",
            "1 for the variant the precision probe recommends, 0 for the others.",
            ("agent", "variant"),
        )
        self.precision_verdict = gauge(
            "probe_precision_verdict",
            "Probe verdict of autocast in this precision (bf16_autocast, fp16_autocast).",
            ("agent", "precision"),
        )
        self.timestamp = gauge(
            "probe_timestamp_seconds",
            "Unix time at which the precision probe of the agent ran.",
        )

    def export(self, agent: str, verdict: Mapping[str, str], recommended: str, at: float) -> None:
        """Set the gauges from a successful probe's verdict per variant, its pick and time."""
        for variant, colour in verdict.items():
            value = COLOUR_VALUES.get(colour)
            if value is not None:
                self.verdict.labels(agent=agent, variant=variant).set(value)
            is_recommended = 1 if variant == recommended else 0
            self.recommended.labels(agent=agent, variant=variant).set(is_recommended)
        for precision in LOW_PRECISIONS:
            value = COLOUR_VALUES.get(verdict.get(f"{precision}_autocast", "n/a"))
            if value is not None:
                self.precision_verdict.labels(agent=agent, precision=precision).set(value)
        self.timestamp.labels(agent=agent).set(at)


class EventMetrics:
    """The event outbox's series (genesis_fp16/events): what waits for a receiver, each
    delivery attempt, and the events dropped undelivered past the outbox's bound:
    ``genesis_fp16_events_undelivered{agent}``, ``genesis_fp16_event_deliveries_total
    {agent, outcome}`` and ``genesis_fp16_events_dropped{agent}``.

    >>> metrics = EventMetrics(CollectorRegistry())
    >>> metrics.observe_pass("se_darwin", 2, 0)
    >>> metrics.undelivered.labels(agent="se_darwin")._value.get()
    2.0
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        f = Families(registry)
        self.undelivered = f.gauge(
            "events_undelivered",
            "Events in the agent's outbox not yet delivered to every configured webhook "
            "(GENESIS_FP16_EVENTS_URLS): new, or waiting for a retry.",
        )
        self.deliveries = f.counter(
            "event_deliveries",
            "Webhook delivery attempts, by outcome: delivered (HTTP 2xx) or failed (refused, "
            "timed out, another status).",
            ("agent", "outcome"),
        )
        self.dropped = f.gauge(
            "events_dropped",
            "Events the agent's outbox dropped undelivered past its bound (10 x "
            "GENESIS_FP16_EVENTS_KEEP events), since the outbox was made.",
        )

    def observe_attempt(self, agent: str, delivered: bool) -> None:
        self.deliveries.labels(agent=agent, outcome="delivered" if delivered else "failed").inc()

    def observe_pass(self, agent: str, undelivered: int, dropped: int) -> None:
        self.undelivered.labels(agent=agent).set(undelivered)
        self.dropped.labels(agent=agent).set(dropped)


class RunReportMetrics:
    """What a finished run reports beyond its counters: its eval quality, the step early
    stopping kept, a measured ``auto``, where its time went, its data, the records its read
    quarantined and its device memory; the per-run report series of :class:`DaemonMetrics`
    (its ``report``), registered on ``registry``.

    Each ``set_*`` reads one typed field of the run's ``TrainResult`` (:meth:`run_ended`
    sets them all, at the end of each run: genesis_fp16/jobs/run_ended.py), so an agent that
    reports none of them leaves these series absent rather than at zero.

    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> report = RunReportMetrics(CollectorRegistry())
    >>> report.set_phases("se_darwin", {"train": 1.5})
    >>> b'genesis_fp16_run_phase_seconds{agent="se_darwin",phase="train"} 1.5' in generate_latest(
    ...     report.registry)
    True
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.families = f = Families(registry)
        gauge = f.gauge
        self.eval_quality = gauge(
            "eval_quality",
            "Held-out AUC after the last finished run (out-of-fold on a cross-validated "
            "pool), with its 95% interval (auc_ci_low, auc_ci_high) and the number of "
            "records it is measured on (examples).",
            ("agent", "metric"),
        )
        self.early_stop_best_step = gauge(
            "early_stop_best_step", "Step whose weights early stopping kept (the served ones)."
        )
        self.auto_step = gauge(
            "auto_step_seconds",
            "Median step time per precision measured for the agent's auto choice "
            "(chosen=1 for the one it trains in); absent until auto is measured.",
            ("agent", "precision", "chosen"),
        )
        self.last_learned = gauge(
            "last_learned_timestamp_seconds",
            "Unix time of the last successful run that trained on new or changed data.",
        )
        self.training_records = gauge(
            "training_records", "Labelled records the served model was trained on."
        )
        self.new_records = f.counter(
            "new_records",
            "Records new to the model when a run trained on them (all of them on a "
            "first run, or when the checkpoint kept no record of its data).",
        )
        self.records_quarantined = f.counter(
            "records_quarantined",
            "Records a run's read of its data set aside as malformed (TrainResult."
            "quarantined; each kept in the run's quarantine file): a malformed record left "
            "in the data is counted again by each run that reads the data, never by a run "
            "the data manifest found up to date (it reads nothing).",
        )
        self.run_phase_seconds = gauge(
            "run_phase_seconds",
            "Seconds the last finished run spent per phase (TrainResult.phases): se_darwin's "
            "check, read, encode, train, eval, drift, final_fit; every judged run's live and gate.",
            ("agent", "phase"),
        )
        self.device_memory_peak = gauge(
            "device_memory_peak_bytes", "Peak accelerator memory of the last run (GPU only)."
        )

    def add_agent(self, agent: str) -> None:
        """Create the agent's counters at zero, so that their rates work from the first run."""
        self.new_records.labels(agent=agent)
        self.records_quarantined.labels(agent=agent)

    def run_ended(self, agent: str, result: TrainResult, now: float) -> None:
        """Each typed field of a finished run's result it reports (``now``: when it ended)."""
        self.set_auto_measurement(agent, result)
        self.set_eval(agent, result)
        self.set_data(agent, result, now)
        self.count_quarantined(agent, result)
        if result.phases is not None:  # where the run's time went (se_darwin, judged runs)
            self.set_phases(agent, result.phases)
        if result.device_memory_peak_bytes is not None:
            self.set_device_memory_peak(agent, result.device_memory_peak_bytes)

    def count_quarantined(self, agent: str, result: TrainResult) -> None:
        """Count the records the run's read set aside (``TrainResult.quarantined``).

        A run the data manifest found up to date read no file: its result is the stored
        run's, quarantined count included, which was counted when that run read them.
        """
        if result.data is not None and result.data.checked_by == "manifest":
            return
        if result.quarantined > 0:  # a plugin's negative count is its bug: nothing to add
            self.records_quarantined.labels(agent=agent).inc(result.quarantined)

    def set_auto_measurement(self, agent: str, result: TrainResult) -> None:
        """Export the run's measured ``auto`` (``TrainResult.precision_calibration``); a run
        that measured none leaves the series."""
        calibration = result.precision_calibration
        if calibration is None:
            return
        fastest: dict[
            PrecisionName, float
        ] = {}  # on CUDA a precision has an eager and a captured row
        for row in calibration.rows:
            if row.precision in PRECISION_LABELS:
                ms = fastest.get(row.precision, math.inf)
                fastest[row.precision] = min(ms, row.median_ms)
        chosen = calibration.chosen  # one series per precision: the stale one removed
        seconds = {
            (name, "1" if name == chosen else "0"): ms / 1000 for name, ms in fastest.items()
        }
        self.families.replace(self.auto_step, agent, seconds)

    def set_eval(self, agent: str, result: TrainResult) -> None:
        """The eval AUC (held-out or out-of-fold), its interval and the records it is
        measured on, and early stopping's best step."""
        early_stop = result.early_stop
        for name in EVAL_QUALITY:
            value = result.eval.get(name)
            if value is not None and math.isfinite(value):
                self.eval_quality.labels(agent=agent, metric=name).set(value)
        if early_stop is not None and early_stop.best_step is not None:
            self.early_stop_best_step.labels(agent=agent).set(early_stop.best_step)

    def set_phases(self, agent: str, phases: Mapping[str, Any]) -> None:
        """The last run's seconds per phase; a phase it did not have is removed, not left
        at an older run's value."""
        seconds = {(phase,): float(value) for phase, value in phases.items()}
        self.families.replace(self.run_phase_seconds, agent, seconds)

    def set_data(self, agent: str, result: TrainResult, now: float) -> None:
        """What a finished run reports of its data (``TrainResult.data``; none: nothing):
        the records trained on, the new ones, and when the model last learned new data."""
        data = result.data
        if data is None:
            return
        self.training_records.labels(agent=agent).set(float(data.records))
        if result.steps > 0 and data.change != "unchanged":
            new = data.records if data.new is None else data.new
            self.new_records.labels(agent=agent).inc(float(new))
            self.last_learned.labels(agent=agent).set(now)

    def set_device_memory_peak(self, agent: str, peak: int) -> None:
        """The run's peak accelerator memory in bytes (``TrainResult.device_memory_peak_bytes``)."""
        self.device_memory_peak.labels(agent=agent).set(float(peak))


class RangeMetrics:
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
