"""Per-layer range statistics: real fp16 steps on the CPU, sampled; the captured
CUDA-graph path runs on a GPU only (Prometheus:
tests/genesis_fp16/metrics/test_range_metrics.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from guard_faults import STEPS, FaultTask
from op_counter import OpCounter
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.training import (
    FitOptions,
    FitResult,
    GuardConfig,
    PrecisionPolicy,
    Trainer,
    fit,
)
from genesis_fp16_infrastructure.training.flight.range_stats import (
    MIN_EVERY,
    TOTAL,
    RangeReport,
    RangeStats,
    RangeStatsConfig,
    SampleClock,
    headrooms,
)
from genesis_fp16_infrastructure.training.step.cuda_graph import StepGraphs

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


def test_an_overflow_shows_as_nonfinite_and_overflow_fraction() -> None:
    """The step whose loss gradient overflows fp16 reports non-finite values and an
    overflow fraction of 1 for the last layer's scaled gradients."""
    reports = _reports(FaultTask("overflow", fault_step=8, until=9), every=9)
    hot = reports[0].modules["3"]
    assert hot["overflow"] == 1.0 and hot["nonfinite"] > 0
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
    steps later (3 plain steps / 1%); the clock is read only around the sample."""
    now, reads = [0.0], [0]

    def clock() -> float:
        reads[0] += 1
        return now[0]

    sampler = SampleClock(RangeStatsConfig(budget=0.01), clock=clock)
    sampler.start(0)
    assert sampler.next == 3
    armed = False
    for step in range(1, 9):
        now[0] += 1.0 + (3.0 if step == 3 else 0.0)  # the step (and its sample's extra work)
        if sampler.closes(step):
            sampler.close(step)
        if armed and step == sampler.next:
            sampler.sampled(step)
            armed = False
        if not armed and step == sampler.next - 1:
            sampler.open(step)
            armed = True
    assert sampler.cost() == pytest.approx(3.0)
    assert sampler.every == 300 and sampler.next == 303
    assert list(sampler.plain) == [1.0]  # steps 1-2, before the window opened
    assert reads[0] == 3  # start, open (after step 2), close (after step 4)


# ---------------------------------------------------------------- the captured path, faked


class _FakeGraphs:
    """StepGraphs' surface on the CPU: 3 warm-ups, a capture, then replays, each running
    the body eagerly. It logs each step it runs: (step, how, whether the model had hooks)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.captured_steps = self.eager_steps = self.warmup_steps = 0
        self.log: list[tuple[int, str, bool]] = []

    def bind(self, loss_fn: object) -> None:
        pass

    def captures(self, key: object) -> bool:
        return self.warmup_steps == 3 and self.captured_steps == 0

    def run(self, body: Callable[[object], object], micro_batches: object, key: object) -> str:
        if self.warmup_steps < 3:
            how = "warmup"
            self.warmup_steps += 1
        else:
            how = "captured" if self.captured_steps == 0 else "replayed"
            self.captured_steps += 1
        self.log.append((self.trainer.step_count + 1, how, _hooked(self.trainer.model)))
        body(micro_batches)
        return how


def _hooked(model: nn.Module) -> bool:
    return any(m._forward_hooks for m in model.modules()) or any(
        p._backward_hooks for p in model.parameters()
    )


def _faked_run(
    steps: int, config: RangeStatsConfig | None
) -> tuple[_FakeGraphs, list[RangeReport], list[int]]:
    """A CPU trainer on faked graphs, ``steps`` steps; its graphs, reports and the aten
    ops each step (and its after_step) ran."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    trainer = Trainer(model, [optimizer], PrecisionPolicy.create("fp32", "cpu"))
    graphs = _FakeGraphs(trainer)
    trainer.graphs = graphs  # type: ignore[assignment]
    reports: list[RangeReport] = []
    stats = RangeStats(config, reports.append) if config is not None else None
    if stats is not None:
        stats.follow(trainer)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    ops = []
    for _ in range(steps):
        with OpCounter() as counter:
            trainer.step([(x, y)], _mse, 16)
            if stats is not None:
                stats.after_step(trainer)
        ops.append(counter.count)
    return graphs, reports, ops


def _mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.mse_loss(model(batch[0]), batch[1])


def test_on_a_captured_path_the_first_sample_follows_the_first_replay() -> None:
    """Faked graphs: the first sample comes after the capture-and-replay (not in the
    warm-up); sampled steps bypass the graphs, and no step the graphs ran had hooks in."""
    graphs, reports, _ = _faked_run(40, RangeStatsConfig())
    captured = next(step for step, how, _ in graphs.log if how == "captured")
    assert captured == 4 and reports and reports[0].step > captured
    sampled = {r.step for r in reports}
    assert sampled.isdisjoint(step for step, _, _ in graphs.log)
    assert len(graphs.log) == 40 - len(sampled)
    assert not any(hooked for _, _, hooked in graphs.log)
    assert reports[0].modules["0"]["activation_max"] > 0  # the eager step's hooks ran


def test_a_plain_step_runs_the_same_ops_with_range_stats_on() -> None:
    """Counted with a TorchDispatchMode, on faked graphs: every step but a sample's
    window runs exactly the aten ops it runs with range statistics off; the sampled
    step runs more (the counter sees the hooks)."""
    _, reports, on = _faked_run(30, RangeStatsConfig(every=10))
    _, _, off = _faked_run(30, None)
    sampled = [r.step for r in reports]
    assert sampled == [10, 20, 30]
    for step in range(1, 31):
        if step in sampled:
            assert on[step - 1] > off[step - 1]
        else:
            assert on[step - 1] == off[step - 1], f"step {step}"


def test_a_validation_between_the_hooks_and_the_sample_is_not_recorded() -> None:
    """The hooks go in after the step before a sampled one; a forward in eval mode then
    (a validation) leaves the sampled step's activations alone."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trainer = Trainer(model, [optimizer], PrecisionPolicy.create("fp32", "cpu"))
    reports: list[RangeReport] = []
    stats = RangeStats(RangeStatsConfig(every=2), reports.append)
    stats.follow(trainer)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    trainer.step([(x, y)], _mse, 16)
    stats.after_step(trainer)  # hooks in for step 2
    model.eval()
    with torch.no_grad():
        model(x * 1e4)  # a validation far larger than any training activation
    trainer.step([(x, y)], _mse, 16)
    stats.after_step(trainer)
    assert [r.step for r in reports] == [2]
    assert reports[0].modules["0"]["activation_max"] < 100.0


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class _CapturableTask:
    """A tiny regression a CUDA graph can capture: data on the device, fused capturable
    AdamW, no scheduler, batches of tensors only."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(128, 4, generator=g).cuda()
        self.y = torch.tanh(self.x.sum(dim=1, keepdim=True)) + 0.1

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def build_optimizers(self, model: nn.Module) -> Sequence[Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True, capturable=True)]

    def build_schedulers(self, optimizers: Sequence[Optimizer]) -> Sequence[LRScheduler]:
        return []

    def train_batches(
        self, epoch: int, seed: int
    ) -> Iterator[tuple[tuple[torch.Tensor, torch.Tensor], int]]:
        for i in range(8):
            yield (self.x[i * 16 : (i + 1) * 16], self.y[i * 16 : (i + 1) * 16]), 16

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(model(batch[0]).float(), batch[1])

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": float(F.mse_loss(model(self.x).float(), self.y))}

    def extra_state(self) -> dict[str, object]:
        return {}


def _captured_run(
    monkeypatch: pytest.MonkeyPatch, steps: int, config: RangeStatsConfig | None
) -> tuple[FitResult, list[RangeReport], list[tuple[str, bool]]]:
    """fit() of the capturable task on CUDA, cuda_graph on; each step the run's graphs
    ran logged as (how it ran, whether the run's model had hooks then). The copies that
    verify the capture before the run have graphs of their own, left out."""
    log: list[tuple[int, str, bool]] = []
    models: list[nn.Module] = []
    original = StepGraphs.run

    def logged(self: StepGraphs, body: Any, micro_batches: Any) -> str:
        how = original(self, body, micro_batches)
        log.append((id(self), how, _hooked(models[-1])))
        return how

    task = _CapturableTask()
    build = task.build_model

    def built() -> nn.Module:
        models.append(build())
        return models[-1]

    task.build_model = built  # type: ignore[method-assign]
    monkeypatch.setattr(StepGraphs, "run", logged)
    reports: list[RangeReport] = []
    options = FitOptions(
        precision="fp16",
        device="cuda",
        steps=steps,
        log_interval=steps,
        cuda_graph="on",
        range_stats=config,
        on_range_stats=reports.append,
    )
    result = fit(task, options)
    run = log[-1][0]  # the run's own graphs step last
    return result, reports, [(how, hooked) for graphs, how, hooked in log if graphs == run]


@pytest.mark.gpu
@needs_cuda
def test_captured_run_samples_eagerly_and_replays_the_plain_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a captured run: samples come after the first replay, from steps that bypass
    the graphs; the graph was captured and replayed with no hook on the model."""
    result, reports, log = _captured_run(monkeypatch, 60, RangeStatsConfig(every=9))
    assert result.execution.used == "cuda_graph"
    assert "captured" in [how for how, _ in log] and log.count(("replayed", False)) >= 40
    assert not any(hooked for _, hooked in log)
    assert [r.step for r in reports] == [9, 18, 27, 36, 45, 54]
    assert len(log) == 60 - len(reports)  # the sampled steps ran outside the graphs
    assert reports[0].modules["0"]["activation_max"] > 0


@pytest.mark.gpu
@needs_cuda
def test_cost_chosen_sampling_on_the_captured_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default config on a captured step: a first sample after the first replay
    (the capture is step 4), with its cost measured and an interval chosen."""
    result, reports, log = _captured_run(monkeypatch, 50, RangeStatsConfig())
    assert result.execution.used == "cuda_graph"
    assert reports and reports[0].step >= 5
    assert result.ranges is not None and result.ranges.every >= MIN_EVERY
    assert result.ranges.sample_cost is not None
    assert not any(hooked for _, hooked in log)
