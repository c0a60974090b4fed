"""Per-layer range statistics: real fp16 steps on the CPU, sampled; the captured
CUDA-graph path runs on a GPU only (Prometheus:
tests/genesis_fp16/metrics/test_range_metrics.py)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest
import torch
from guard_faults import STEPS, FaultTask
from torch import nn

from genesis_fp16_infrastructure.training import FitOptions, GuardConfig, fit
from genesis_fp16_infrastructure.training.flight.range_stats import (
    RangeReport,
    RangeStatsConfig,
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
