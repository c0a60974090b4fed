"""What a run's steps report at each log (a ``TrainingSummary``): its running totals of
steps, skipped steps, non-finite losses and samples, and the window's overflow rate,
gradient norm, loss and step time.

>>> from prometheus_client import CollectorRegistry
>>> steps = StepMetrics(Families(CollectorRegistry()))
>>> steps.optimizer_steps.labels(agent="se_darwin").inc(10)
>>> steps.optimizer_steps.labels(agent="se_darwin")._value.get()
10.0
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.plugin_api import TrainResult

# The summary's cumulative counts and the counters they advance.
CUMULATIVE = {
    "optimizer_steps": "optimizer_steps",
    "skipped_steps": "skipped_steps",
    "nonfinite_losses": "nonfinite_loss",
    "samples": "samples",
}


class StepMetrics:
    """The series of a run's per-log summaries, each labelled by ``agent``."""

    def __init__(self, families: Families) -> None:
        gauge, counter = families.gauge, families.counter
        self.optimizer_steps = counter(
            "optimizer_steps", "Optimizer steps taken (skipped ones excluded)."
        )
        self.skipped_steps = counter(
            "skipped_steps",
            "Optimizer steps skipped for a non-finite gradient (fp16: an overflow).",
        )
        self.overflow_rate = gauge(
            "overflow_rate", "Share of the recent window of steps that overflowed."
        )
        self.nonfinite_loss = counter("nonfinite_loss", "Losses that were NaN or infinite.")
        self.grad_norm = gauge("grad_norm", "Gradient norm (unscaled) at the last log.")
        self.samples = counter("samples", "Training samples consumed.")
        self.train_loss = gauge("train_loss", "Training loss at the last log.")
        self.step_seconds = gauge(
            "step_seconds",
            "Wall seconds per step between the last two logs of a run (the step time to "
            "set beside DCGM's GPU utilisation).",
        )

    def export_final_loss(self, agent: str, result: TrainResult) -> None:
        """The run's own final loss on ``train_loss`` (under torchrun, rank 0's last log
        was its interval's); a run that took no step leaves the last one's."""
        if result.steps and result.final_train_loss is not None:
            self.train_loss.labels(agent=agent).set(float(result.final_train_loss))
