"""What a finished run reports beyond its counters: its eval quality, the step early
stopping kept, a measured ``auto``, where its time went, its data, the records its read
quarantined and its device memory.

Each ``set_*`` reads one typed field of the run's ``TrainResult``
(genesis_fp16/jobs/recording.py passes the result, or the field), so an agent that reports
none of them leaves these series absent rather than at zero.

>>> from prometheus_client import CollectorRegistry, generate_latest
>>> report = RunReportMetrics(CollectorRegistry())
>>> report.set_phases("se_darwin", {"train": 1.5})
>>> b'genesis_fp16_run_phase_seconds{agent="se_darwin",phase="train"} 1.5' in generate_latest(
...     report.registry)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.metric_names import EVAL_QUALITY, PRECISION_LABELS, Families
from genesis_fp16.plugin_api import TrainResult
from genesis_fp16_infrastructure.api import PrecisionName


class RunReportMetrics:
    """The per-run report series of :class:`~genesis_fp16.metrics.daemon_metrics.DaemonMetrics`
    (its ``report``), registered on ``registry``."""

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
            "Seconds the last finished run spent per phase (check, read, encode, train, eval, "
            "final_fit), for agents that report them (TrainResult.phases: se_darwin's).",
            ("agent", "phase"),
        )
        self.device_memory_peak = gauge(
            "device_memory_peak_bytes", "Peak accelerator memory of the last run (GPU only)."
        )

    def add_agent(self, agent: str) -> None:
        """Create the agent's counters at zero, so that their rates work from the first run."""
        self.new_records.labels(agent=agent)
        self.records_quarantined.labels(agent=agent)

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
