"""Per-layer range statistics: real fp16 steps on the CPU, sampled; the captured
CUDA-graph path runs on a GPU only (Prometheus:
tests/genesis_fp16/metrics/test_range_metrics.py)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from guard_faults import STEPS, FaultTask
from torch import nn

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequest, TrainResult
from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, fit
from genesis_fp16_infrastructure.training.flight.range_stats import (
    MIN_EVERY,
    TOTAL,
    RangeReport,
    RangeStatsConfig,
    SampleClock,
    headrooms,
    nearness,
)

QUIET = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)


class _Hot(FaultTask):
    """Batch 8's inputs scaled by 2**12: module 0's fp16 outputs near 65504, not over."""

    def loss(self, model: nn.Module, batch: tuple[int, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        step, x, y = batch
        return super().loss(model, (step, x * 2.0**12 if step == 8 else x, y))


def _reports(task: FaultTask, every: int, device: str = "cpu") -> list[RangeReport]:
    reports: list[RangeReport] = []
    options = FitOptions(
        precision="fp16",
        device=device,
        steps=STEPS,
        log_interval=10,
        guard=QUIET,
        range_stats=RangeStatsConfig(every=every),
        on_range_stats=reports.append,
    )
    fit(task, options)
    return reports


def test_sampled_steps_report_every_module() -> None:
    """One report per ``every`` steps, each naming every module with its figures; the
    step with inputs 4096 times larger shows in module 0's largest activation."""
    reports = _reports(_Hot(None), every=9)
    assert [r.step for r in reports] == [9, 18, 27, 36]
    first = reports[0]  # step 9 ran batch 8: the hot one
    assert set(first.modules) == {"(model)", "0", "1", "2", "3"}
    assert first.modules["0"]["activation_max"] > 1000.0
    assert reports[1].modules["0"]["activation_max"] < 100.0
    assert all(r.modules["3"]["gradient_max"] > 0 for r in reports)
    assert first.nearest_limits(1) == ["0"]


def test_an_overflow_shows_as_nonfinite_and_overflow_fraction() -> None:
    """The step whose loss gradient overflows fp16 reports non-finite values and an
    overflow fraction of 1 for the last layer's scaled gradients."""
    reports = _reports(FaultTask("overflow", fault_step=8, until=9), every=9)
    hot = reports[0].modules["3"]
    assert hot["overflow"] == 1.0 and hot["nonfinite"] > 0
    assert nearness(hot) == float("inf")
    assert reports[1].modules["3"]["overflow"] == 0.0


def test_the_default_samples_a_short_run_early_and_sums_it_up() -> None:
    """With the default (cost-chosen) config a 50-step run samples its step 3 first;
    FitResult.ranges holds the smallest headrooms over the samples and the hot module."""
    reports: list[RangeReport] = []
    options = FitOptions(
        precision="fp16",
        steps=50,
        log_interval=50,
        range_stats=RangeStatsConfig(),
        on_range_stats=reports.append,
    )
    result = fit(_Hot(None), options)
    summary = result.ranges
    assert summary is not None and reports and reports[0].step == 3
    assert summary.samples == len(reports) and summary.last_step == reports[-1].step
    assert summary.every >= MIN_EVERY and summary.precision == "fp16"
    assert summary.total.module == TOTAL
    smallest = min(r.modules["0"]["headroom_overflow"] for r in reports)
    nearest = {m.module: m for m in summary.nearest_overflow}
    assert nearest["0"].headroom_overflow == pytest.approx(smallest)
    assert summary.total.headroom_overflow is not None
    assert summary.total.headroom_overflow <= smallest


def test_a_run_without_range_stats_reports_none() -> None:
    """FitOptions' default (None) installs nothing and reports no ranges."""
    result = fit(_Hot(None), FitOptions(precision="fp16", steps=5, log_interval=5))
    assert result.ranges is None


def test_a_request_turns_them_on_by_default_and_off_when_asked(tmp_path: Path) -> None:
    """TrainRequest.fit_options carries the cost-chosen config; range_stats=False: None."""
    request = TrainRequest(
        agent="a", precision_reason="test", state_dir=tmp_path, checkpoint_dir=tmp_path / "c"
    )
    assert request.fit_options().range_stats == RangeStatsConfig()
    off = TrainRequest.from_json({**request.to_json(), "range_stats": False})
    assert off.fit_options().range_stats is None


def test_the_summary_crosses_train_result_json_intact(tmp_path: Path) -> None:
    """The child's TrainResult JSON carries ranges as the typed record, field for field."""
    request = TrainRequest(
        agent="a",
        precision="fp16",
        precision_reason="test",
        state_dir=tmp_path,
        checkpoint_dir=tmp_path / "c",
        steps=12,
        log_interval=12,
    )
    fitted = fit(_Hot(None), request.fit_options(checkpoint_dir=None))
    result = TrainResult.from_fit(request, fitted)
    back = TrainResult.from_json(json.loads(json.dumps(result.to_json())))
    assert result.ranges is not None and back.ranges == result.ranges


def test_headrooms_count_doublings_to_fp16s_limits() -> None:
    """65504 / 2**11 leaves just under 5 doublings; 2**-20 is 4 doublings over 2**-24."""
    over, under = headrooms(2.0**11, 2.0**-20)
    assert 4.99 < over < 5.0 and under == 4.0
    assert headrooms(0.0, 0.0) == (float("inf"), float("inf"))


def test_the_clock_spaces_samples_so_they_cost_the_budget() -> None:
    """Plain steps of 1 s and a sample that costs 3 s more: the next sample comes 300
    steps later (3 plain steps / 1%); plain times leave the sampled ones out."""
    now = [0.0]
    clock = SampleClock(RangeStatsConfig(budget=0.01), clock=lambda: now[0])
    clock.start(0)
    assert clock.next == 3
    hooked = False
    for step in range(1, 6):
        now[0] += 1.0 + (3.0 if hooked else 0.0)  # the step (and its sample's extra work)
        clock.tick(step)
        if hooked and step == clock.next:
            clock.sampled(step)
            hooked = False
        elif step == clock.next - 1:
            clock.busy()
            hooked = True
    assert clock.cost() == pytest.approx(3.0)
    assert clock.every == 300 and clock.next == 303
    assert list(clock.plain) == [1.0, 1.0]  # steps 2 and 5: the others had hooks in or out


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_captured_step_reports_from_inside_the_graph() -> None:
    """On a captured step the hooks run inside the graph and sampled steps read them."""
    reports = _reports(_Hot(None), every=9, device="cuda")
    assert [r.step for r in reports] == [9, 18, 27, 36]
    assert reports[0].modules["0"]["activation_max"] > 1000.0


@pytest.mark.gpu
@needs_cuda
def test_range_stats_cost_on_the_captured_step(
    record_property: Callable[[str, object], None],
) -> None:
    """The captured step's time with the statistics on (inside the graph, every step)
    and off, interleaved, recorded for `make gpu-check`; the report still arrives."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(3):
        for mode in ("off", "on"):
            reports: list[RangeReport] = []
            started = time.perf_counter()
            options = FitOptions(
                precision="fp16",
                device="cuda",
                steps=200,
                log_interval=100,
                cuda_graph="on",
                range_stats=RangeStatsConfig(every=100) if mode == "on" else None,
                on_range_stats=reports.append,
            )
            result = fit(FaultTask(None), options)
            torch.cuda.synchronize()
            times[mode].append((time.perf_counter() - started) / result.steps_run)
            assert mode == "off" or [r.step for r in reports] == [100, 200]
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    record_property("verdict", f"captured step {off * 1e3:.3f} ms off, {on * 1e3:.3f} ms on")


@pytest.mark.gpu
@needs_cuda
def test_cost_chosen_sampling_on_the_captured_step() -> None:
    """The default config on a captured step: a first sample at step 3 of a 50-step run,
    read from inside the graph, with its cost measured and an interval chosen."""
    reports: list[RangeReport] = []
    options = FitOptions(
        precision="fp16",
        device="cuda",
        steps=50,
        log_interval=50,
        cuda_graph="on",
        range_stats=RangeStatsConfig(),
        on_range_stats=reports.append,
    )
    result = fit(_Hot(None), options)
    assert result.execution.used == "cuda_graph"
    assert reports and reports[0].step == 3
    assert result.ranges is not None and result.ranges.every >= MIN_EVERY
    assert result.ranges.sample_cost is not None
