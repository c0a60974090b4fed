"""Files the daemon could not use: state-folder files skipped at start-up, and the
TensorBoard curves (GENESIS_FP16_TRACKING_DIR) it could not write.

>>> from prometheus_client import CollectorRegistry
>>> storage = StorageMetrics(Families(CollectorRegistry()))
>>> storage.tracking_write_failures.labels(agent="se_darwin").inc(2)
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import Families


class StorageMetrics:
    """The counters of unusable or unwritable files, each labelled by ``agent``."""

    def __init__(self, families: Families) -> None:
        self.state_files_skipped = families.counter(
            "state_files_skipped",
            "State-folder files read at start-up that were unusable (corrupt, another "
            "format, not a regular file) and skipped: last_success (the agent starts at 0).",
            ("agent", "file"),
        )
        self.tracking_write_failures = families.counter(
            "tracking_write_failures",
            "Writes of a run's TensorBoard curves (GENESIS_FP16_TRACKING_DIR) that failed or "
            "were dropped after a failure; the run itself goes on. Present once a tracked "
            "run ends.",
        )
