"""The daemon's configuration: its reloads by outcome, whether the last one worked, and
whether the fp32 rollback switch (ENABLE_FP16_TRAINING=false) is in force.

>>> from prometheus_client import CollectorRegistry
>>> config = ConfigMetrics(Families(CollectorRegistry()))
>>> config.config_last_reload_successful._value.get()  # start-up's configuration loaded
1.0
"""

from __future__ import annotations

from genesis_fp16.metrics.metric_names import RELOAD_OUTCOMES, Families


class ConfigMetrics:
    """The configuration series, with no ``agent`` label; every reload outcome exists at
    zero from the start, so a rate over it works from the first reload."""

    def __init__(self, families: Families) -> None:
        self.config_reloads = families.counter(
            "config_reloads", "Configuration reloads by outcome.", ("outcome",)
        )
        self.config_last_reload_successful = families.gauge(
            "config_last_reload_successful", "1 if the last configuration reload worked.", ()
        )
        self.fp32_rollback = families.gauge(
            "fp32_rollback",
            "1 while ENABLE_FP16_TRAINING=false is in force: every agent trains in fp32 by "
            "the rollback switch (not by auto's choice); 0 otherwise. Follows each reload.",
            (),
        )
        self.config_last_reload_successful.set(1)
        for outcome in RELOAD_OUTCOMES:
            self.config_reloads.labels(outcome=outcome)
