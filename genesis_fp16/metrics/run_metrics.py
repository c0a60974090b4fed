"""A run's life as the scheduler sees it: started, finished by outcome, failed by reason,
skipped, overdue, how long it took, its eval loss and when the agent last succeeded.

>>> from prometheus_client import CollectorRegistry
>>> runs = RunMetrics(Families(CollectorRegistry()))
>>> runs.finish_run("se_darwin", "success", 12.0, None, now=1000.0)
>>> runs.last_success.labels(agent="se_darwin")._value.get()
1000.0
"""

from __future__ import annotations

from prometheus_client import Histogram

from genesis_fp16.metrics.metric_names import (
    HEALTHY_OUTCOMES,
    PREFIX,
    RUN_DURATION_BUCKETS,
    Families,
)


class RunMetrics:
    """The per-run series, each labelled by ``agent``.

    Declare it after the step counters (StepMetrics) so that a scrape reads
    ``training_runs_started`` after them: the run is counted before its first steps
    (DaemonMetrics.observe_summary), so a scrape that sees a run's steps sees its start
    too. The alert that compares runs with steps (GenesisFp16TrainingStalled) reads it,
    not the finished runs, which are counted only after eval and the gate, minutes after
    the last step.
    """

    def __init__(self, families: Families) -> None:
        gauge, counter = families.gauge, families.counter
        self.eval_loss = gauge("eval_loss", "Held-out loss after the last finished run.")
        self.training_runs = counter(
            "training_runs", "Finished training runs by outcome.", ("agent", "outcome")
        )
        self.runs_started = counter(
            "training_runs_started",
            "Training runs that reported steps, counted with their first report (taken or "
            "skipped steps): a run that ends before its first step (up to date, refused) "
            "is not counted.",
        )
        self.run_failures = counter(
            "run_failures",
            "Failed runs by reason: refused (a bad request), error (a bug or bad data), "
            "storage (disk full or read-only), exit (sys.exit, os._exit or a crash ended "
            "it without a result), hung (no step boundary within the run timeout and its "
            "grace: killed, or abandoned when its process outlives the kill), memory (its "
            "process grew past GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES), device_unavailable "
            "(its GPU is missing or was lost: no CUDA device, a driver or bus error).",
            ("agent", "reason"),
        )
        self.jobs_skipped = counter(
            "jobs_skipped",
            "Scheduled jobs that did not start: still_running (the previous run had not "
            "ended), hung (the agent's abandoned run still holds its thread).",
            ("agent", "reason"),
        )
        self.runs_overdue = gauge(
            "runs_overdue",
            "1 while the agent's run is past its timeout (RUN_TIMEOUT_SECONDS) or abandoned.",
        )
        self.run_duration = Histogram(
            f"{PREFIX}_training_run_duration_seconds",
            "Wall time of one training run.",
            ("agent",),
            buckets=RUN_DURATION_BUCKETS,
            registry=families.registry,
        )
        self.last_success = gauge(
            "last_success_timestamp_seconds",
            "Unix time of the last successful or up-to-date run (the model is current), "
            "kept in the state folder across restarts; 0: the agent never succeeded there.",
        )

    def count_run(
        self,
        agent: str,
        outcome: str,
        duration: float,
        failure: str | None,
        eval_loss: float | None,
        now: float,
    ) -> None:
        """Count a run that ended: its failure by reason (None: none), then the run by
        outcome, last (whoever sees the count finds the run's other series)."""
        if failure is not None:
            self.run_failures.labels(agent=agent, reason=failure).inc()
        self.finish_run(agent, outcome, duration, eval_loss, now)

    def finish_run(
        self, agent: str, outcome: str, duration: float, eval_loss: float | None, now: float
    ) -> None:
        self.training_runs.labels(agent=agent, outcome=outcome).inc()
        self.run_duration.labels(agent=agent).observe(duration)
        if eval_loss is not None:
            self.eval_loss.labels(agent=agent).set(eval_loss)
        if outcome in HEALTHY_OUTCOMES:
            self.last_success.labels(agent=agent).set(now)
