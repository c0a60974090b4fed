"""Range statistics on a captured CUDA-graph step, verified on a task a graph can capture
(guard_faults.CudaFaultTask: fused capturable AdamW, no scheduler, data on the device):
the run replays, samples come from steps after the first replay, and they hold what an
eager run of the same steps measures. On the CPU, the same task and sampling, eagerly."""

from __future__ import annotations

import math

import pytest
import torch
from guard_faults import STEPS, CudaFaultTask, graph_steps, the_runs_steps

from genesis_fp16_infrastructure.training import FitOptions, FitResult, GuardConfig, fit
from genesis_fp16_infrastructure.training.flight.range_stats import RangeReport, RangeStatsConfig

QUIET = GuardConfig(check_interval=5, overflow_rate_limit=None, bf16_needs_native=False)
EVERY = 9


def _sampled(
    device: str, cuda_graph: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[FitResult, list[RangeReport], list[tuple[int, bool]]]:
    """A fault-free fp16 run sampled every ``EVERY`` steps: the run, its reports, and its
    own trainer's steps (step, ran from a graph)."""
    found = graph_steps(monkeypatch)
    reports: list[RangeReport] = []
    options = FitOptions(
        precision="fp16",
        device=device,
        steps=STEPS,
        log_interval=10,
        guard=QUIET,
        cuda_graph=cuda_graph,
        range_stats=RangeStatsConfig(every=EVERY),
        on_range_stats=reports.append,
    )
    result = fit(CudaFaultTask(None, device=device), options)
    return result, reports, the_runs_steps(found)


def _assert_measured(report: RangeReport) -> None:
    """No module saw a non-finite value, its maxima are finite, and the model's layers
    saw values (a headroom is inf where a module has no such value)."""
    assert {"0", "3"} <= set(report.modules), report.modules.keys()
    for name, figures in report.modules.items():
        assert figures["nonfinite"] == 0, name
        assert math.isfinite(figures["activation_max"] + figures["gradient_max"]), name
    assert report.modules["0"]["activation_max"] > 0
    assert report.modules["3"]["gradient_max"] > 0


def test_the_capturable_task_is_sampled_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control flow without a GPU: one report every EVERY steps, each measured."""
    result, reports, steps = _sampled("cpu", "off", monkeypatch)
    assert result.execution.used == "eager" and len(steps) == STEPS
    assert [r.step for r in reports] == list(range(EVERY, STEPS + 1, EVERY))
    for report in reports:
        _assert_measured(report)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_range_stats_sample_replayed_steps_of_a_captured_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A captured run really replays; samples are taken after its first replay, the run
    replays on after them, and each holds what the eager run measures at that step."""
    result, reports, steps = _sampled("cuda", "on", monkeypatch)
    assert result.execution.used == "cuda_graph", result.execution
    graphed = [number for number, from_graph in steps if from_graph]
    assert graphed, f"no step ran from a graph: {steps}"
    later = [r for r in reports if r.step > graphed[0]]
    assert later, f"no sample after the first replay (step {graphed[0]}): {reports}"
    assert any(number > later[0].step for number in graphed)  # replays go on after it
    for report in later:
        _assert_measured(report)
    monkeypatch.undo()
    _, eager, _ = _sampled("cuda", "off", monkeypatch)
    by_step = {r.step: r for r in eager}
    for report in later:
        want = by_step[report.step].modules
        assert set(report.modules) == set(want)
        for name, figures in report.modules.items():
            for key in ("activation_max", "gradient_max"):
                assert figures[key] == pytest.approx(want[name][key], rel=1e-3), (name, key)
