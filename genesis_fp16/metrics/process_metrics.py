"""The daemon process itself: its version, where it runs (the labels DCGM's GPU series
carry, so they join ours), the scheduler's heartbeat and the exceptions that ended a
thread.

>>> from prometheus_client import CollectorRegistry
>>> process = ProcessMetrics(Families(CollectorRegistry()), "0.1.0", placement=None)
>>> process.build_info.labels(version="0.1.0")._value.get()
1.0
"""

from __future__ import annotations

import os

from genesis_fp16.metrics.metric_names import Families
from genesis_fp16.metrics.placement import device_labels


class ProcessMetrics:
    """The process series, with no ``agent`` label. ``placement`` is device_info's label
    sets; none (None or empty) reads them from the daemon's process environment
    (downward API, NVIDIA_VISIBLE_DEVICES), once, here."""

    def __init__(
        self, families: Families, version: str, placement: list[dict[str, str]] | None
    ) -> None:
        gauge = families.gauge
        self.thread_exceptions = families.counter(
            "thread_exceptions",
            "Exceptions that ended a thread of the daemon (its own or a library's), each "
            "logged in one structured line (threading.excepthook).",
            (),
        )
        self.heartbeat = gauge(
            "scheduler_heartbeat_timestamp_seconds",
            "Unix time of the scheduler's last heartbeat job.",
            (),
        )
        self.build_info = gauge(
            "build_info", "Always 1; the label carries the version.", ("version",)
        )
        # What DCGM's GPU series carry, so they join ours (genesis_fp16/metrics/placement.py).
        self.device_info = gauge(
            "device_info",
            "Always 1; where the daemon runs: pod, namespace, host, and each GPU's index, "
            "UUID and model, the values DCGM's series carry (empty on a CPU host).",
            ("pod", "namespace", "hostname", "gpu", "uuid", "model_name"),
        )
        self.build_info.labels(version=version).set(1)
        for labels in placement or device_labels(os.environ):
            self.device_info.labels(**labels).set(1)
