"""Metrics: counters advance by the increase of the summaries' running totals."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fake_results import train_result
from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16_infrastructure.api import Calibration
from genesis_fp16_infrastructure.contract.reports import DataReport
from genesis_fp16_infrastructure.training.reports import EarlyStopReport, Measured


@dataclass(frozen=True)
class Summary:
    precision: str
    optimizer_steps: int
    skipped_steps: int
    nonfinite_losses: int
    samples: int
    loss_scale: float = 1024.0
    overflow_rate: float = 0.0
    overflow_rate_window: float = 0.25
    grad_norm: float = 1.0
    train_loss: float = 0.5


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_counters_advance_by_deltas_across_summaries_and_runs() -> None:
    """Two summaries of one run add their increase; a new run counts from zero again."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1.2.3")
    metrics.start_run("a")
    metrics.observe_summary("a", Summary("fp16", 10, 2, 0, 160))
    metrics.observe_summary("a", Summary("fp16", 25, 3, 1, 400))
    assert value(registry, "genesis_fp16_optimizer_steps_total", agent="a") == 25
    assert value(registry, "genesis_fp16_skipped_steps_total", agent="a") == 3
    assert value(registry, "genesis_fp16_nonfinite_loss_total", agent="a") == 1
    assert value(registry, "genesis_fp16_overflow_rate", agent="a") == 0.25
    metrics.start_run("a")
    metrics.observe_summary("a", Summary("fp32", 5, 0, 0, 80))
    assert value(registry, "genesis_fp16_optimizer_steps_total", agent="a") == 30
    assert value(registry, "genesis_fp16_samples_total", agent="a") == 480
    assert value(registry, "genesis_fp16_precision", agent="a", precision="fp32") == 1
    assert value(registry, "genesis_fp16_precision", agent="a", precision="fp16") == 0


def test_resumed_totals_are_not_counted_again() -> None:
    """A run resumed at 100 steps (7 skipped) whose first summary says 110 adds 10 steps."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1")
    metrics.start_run("a", {"optimizer_steps": 93, "skipped_steps": 7, "nonfinite_losses": 0})
    metrics.observe_summary("a", Summary("bf16", 102, 8, 0, 160))
    assert value(registry, "genesis_fp16_optimizer_steps_total", agent="a") == 9
    assert value(registry, "genesis_fp16_skipped_steps_total", agent="a") == 1
    assert value(registry, "genesis_fp16_samples_total", agent="a") == 160


def test_registry_is_the_one_passed_in() -> None:
    """Two daemons' metrics live on separate registries."""
    first, second = CollectorRegistry(), CollectorRegistry()
    DaemonMetrics(first, "1").set_precision("a", "bf16")
    DaemonMetrics(second, "1")
    assert value(first, "genesis_fp16_precision", agent="a", precision="bf16") == 1
    assert value(second, "genesis_fp16_precision", agent="a", precision="bf16") is None
    assert value(first, "genesis_fp16_build_info", version="1") == 1


def test_execution_gauge_marks_one_mode() -> None:
    """set_execution: 1 for the mode that ran, 0 for the other, per agent."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "1")
    metrics.set_execution("a", "cuda_graph")
    metrics.set_execution("a", "eager")
    assert value(registry, "genesis_fp16_execution", agent="a", mode="eager") == 1
    assert value(registry, "genesis_fp16_execution", agent="a", mode="cuda_graph") == 0


def test_execution_gauge_has_the_compiled_step_as_its_own_mode() -> None:
    """cuda_graph_compiled (compile=on) is exported as a mode of its own, the others 0."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "1")
    metrics.set_execution("a", "cuda_graph_compiled")
    for mode, expected in (("cuda_graph_compiled", 1), ("cuda_graph", 0), ("eager", 0)):
        assert value(registry, "genesis_fp16_execution", agent="a", mode=mode) == expected


def test_auto_measurement_exports_each_precisions_step_time_and_the_choice() -> None:
    """set_auto_measurement: seconds per precision, chosen=1 on one; a new choice replaces
    it; a run that measured nothing leaves them."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "1")
    rows = (
        Measured("fp32", "eager", 2.0, 2.0, 2.0, 3),
        Measured("bf16", "eager", 1.0, 1.0, 1.0, 3),
    )
    measured = Calibration("bf16", "faster", rows, {}, {}, 0.1)
    metrics.report.set_auto_measurement("a", train_result(precision_calibration=measured))
    name = "genesis_fp16_auto_step_seconds"
    assert value(registry, name, agent="a", precision="bf16", chosen="1") == 0.001
    assert value(registry, name, agent="a", precision="fp32", chosen="0") == 0.002
    again = replace(measured, chosen="fp32")
    metrics.report.set_auto_measurement("a", train_result(precision_calibration=again))
    metrics.report.set_auto_measurement("a", train_result())  # nothing measured: kept
    assert value(registry, name, agent="a", precision="fp32", chosen="1") == 0.002
    assert (
        registry.get_sample_value(name, {"agent": "a", "precision": "bf16", "chosen": "1"}) is None
    )


def test_eval_quality_and_best_step_are_exported() -> None:
    """set_eval: the AUC, its interval and the split size per agent; NaN is left out."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "1")
    ev = {"loss": 1.0, "auc": 0.8, "auc_ci_low": 0.75, "auc_ci_high": 0.85, "examples": 1000.0}
    early_stop = EarlyStopReport("loss", "min", 0.5, 120, 4, 1, 3, 10, "no improvement")
    metrics.report.set_eval("a", train_result(eval=ev, early_stop=early_stop))
    for name in ("auc", "auc_ci_low", "auc_ci_high", "examples"):
        assert value(registry, "genesis_fp16_eval_quality", agent="a", metric=name) == ev[name]
    assert value(registry, "genesis_fp16_early_stop_best_step", agent="a") == 120
    metrics.report.set_eval("b", train_result(eval={"auc": float("nan")}))
    assert value(registry, "genesis_fp16_eval_quality", agent="b", metric="auc") is None


def test_a_run_that_started_afresh_counts_its_steps_from_zero() -> None:
    """A checkpoint at 160 steps, and a run that trained afresh instead (changed data):
    its first summary at 20 steps adds 20, not nothing."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1")
    metrics.start_run("a", {"optimizer_steps": 160, "skipped_steps": 0, "nonfinite_losses": 0})
    metrics.observe_summary("a", Summary("fp32", 20, 0, 0, 320))
    metrics.observe_summary("a", Summary("fp32", 30, 0, 0, 480))
    assert value(registry, "genesis_fp16_optimizer_steps_total", agent="a") == 30


def test_up_to_date_runs_are_healthy_and_new_data_is_counted() -> None:
    """An up_to_date run has its own outcome and refreshes last success; a run on changed
    data counts its new records and when it learned them; an unchanged one does not."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1")
    metrics.add_agent("a")
    for data, steps, now in (
        (DataReport(500, "f1", "first"), 80, 10.0),
        (DataReport(800, "f2", "changed", new=300), 90, 20.0),
        (DataReport(800, "f2", "unchanged", new=0), 0, 30.0),
    ):
        metrics.report.set_data("a", train_result(data=data, steps=steps), now)
    metrics.finish_run("a", "up_to_date", 0.5, None, 30.0)
    assert value(registry, "genesis_fp16_training_records", agent="a") == 800
    assert value(registry, "genesis_fp16_new_records_total", agent="a") == 800
    assert value(registry, "genesis_fp16_last_learned_timestamp_seconds", agent="a") == 20.0
    assert value(registry, "genesis_fp16_last_success_timestamp_seconds", agent="a") == 30.0
    runs = "genesis_fp16_training_runs_total"
    assert value(registry, runs, agent="a", outcome="up_to_date") == 1
    assert value(registry, runs, agent="a", outcome="success") == 0


def test_quarantined_records_are_counted_by_the_runs_that_read_them() -> None:
    """The counter starts at 0 per agent; runs that read their data add what they set
    aside; a run the data manifest found up to date (the stored run's count) adds none."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1")
    metrics.add_agent("a")
    name = "genesis_fp16_records_quarantined_total"
    assert value(registry, name, agent="a") == 0
    read = DataReport(800, "f", "unchanged", new=0)
    metrics.report.count_quarantined("a", train_result(quarantined=2, data=read))
    metrics.report.count_quarantined("a", train_result(quarantined=3))  # no data reported
    stored = DataReport(800, "f", "unchanged", new=0, checked_by="manifest", files_hashed=0)
    metrics.report.count_quarantined("a", train_result(quarantined=2, data=stored))
    metrics.report.count_quarantined("a", train_result(quarantined=0))
    assert value(registry, name, agent="a") == 5


def test_no_created_series_and_run_durations_fit_below_the_timeout() -> None:
    """Counters and the histogram export no *_created series (one series per counter, not
    two), and a run that lasts until the default 6 h timeout lands in a finite bucket."""
    from prometheus_client import generate_latest

    from genesis_fp16.config.settings import Settings
    from genesis_fp16.metrics.metric_names import RUN_DURATION_BUCKETS

    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, "test")
    metrics.run_duration.labels(agent="a").observe(Settings().run_timeout_seconds)
    text = generate_latest(registry).decode()
    assert "_created" not in text
    assert max(RUN_DURATION_BUCKETS) >= Settings().run_timeout_seconds
    inf_line = next(line for line in text.splitlines() if 'le="+Inf"' in line)
    below_inf = [line for line in text.splitlines() if "_bucket{" in line and "+Inf" not in line]
    assert below_inf[-1].split()[-1] == inf_line.split()[-1] == "1.0"  # counted below +Inf


def _started_and_steps(registry: CollectorRegistry) -> tuple[float | None, float | None]:
    started = value(registry, "genesis_fp16_training_runs_started_total", agent="a")
    return started, value(registry, "genesis_fp16_optimizer_steps_total", agent="a")


def test_a_run_is_counted_as_started_with_its_first_steps() -> None:
    """At every phase of two runs (added, started, mid-run, after the last step, after the
    count) a scrape sees each run's start no later than its steps, and an up-to-date run
    (no step reported) is not counted: what GenesisFp16TrainingStalled compares."""
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, version="1")
    metrics.add_agent("a")
    seen = [_started_and_steps(registry)]
    for _ in range(2):
        metrics.start_run("a")
        seen.append(_started_and_steps(registry))
        metrics.observe_summary("a", Summary("fp32", 40, 0, 0, 640))
        seen.append(_started_and_steps(registry))
        metrics.observe_summary("a", Summary("fp32", 100, 0, 0, 1600))
        seen.append(_started_and_steps(registry))
        metrics.finish_run("a", "success", 1.0, None, 1.0)
        seen.append(_started_and_steps(registry))
    metrics.start_run("a")
    metrics.finish_run("a", "up_to_date", 0.1, None, 2.0)
    seen.append(_started_and_steps(registry))
    first, second = [(1, 40), (1, 100), (1, 100)], [(2, 140), (2, 200), (2, 200)]
    assert seen == [(0, 0), (0, 0), *first, (1, 100), *second, (2, 200)]


def test_a_scrape_reads_the_steps_before_the_runs_started() -> None:
    """The steps counters come before the runs-started counter in a scrape, so a scrape
    racing a run's first report never reads its steps without its start."""
    registry = CollectorRegistry()
    DaemonMetrics(registry, version="1").add_agent("a")
    names = [family.name for family in registry.collect()]
    started = names.index("genesis_fp16_training_runs_started")
    assert names.index("genesis_fp16_optimizer_steps") < started
    assert names.index("genesis_fp16_skipped_steps") < started
