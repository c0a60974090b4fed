"""The captured whole step on CUDA computes what the eager step computes, bit for bit.

GPU-only, but for one CPU test of the fp16 bookkeeping: each GPU test compares a run with
``cuda_graph="on"`` against the same run with ``cuda_graph="off"`` (same seed, same
batches) and asserts identical per-step losses, loss-scale sequence, skipped steps and
final weights. The forced fp16 overflows come from the data (a per-batch gradient boost
tensor), not from Python state, so the graph sees them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import (
    FitOptions,
    GuardConfig,
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
    TrainerConfig,
    fit,
)
from genesis_fp16_infrastructure.training.step.cuda_graph import StepGraphs, pool_leftovers

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x, y, gradient boost (0-dim)
BOOSTED = (50, 120)  # steps whose gradients are multiplied by 1e9: fp16 overflows there


def _model(device: str = "cuda") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 256), nn.LayerNorm(256), nn.GELU(), nn.Dropout(0.1), nn.Linear(256, 1)
    ).to(device)


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y, boost = batch
    loss = F.mse_loss(model(x).float(), y)
    # Value unchanged, gradient times (1 + boost): data-driven, so a replayed graph sees it.
    return loss + (boost * loss - (boost * loss).detach())


def _batches(
    count: int, size: int = 64, last: int | None = None, device: str = "cuda"
) -> list[Batch]:
    g = torch.Generator(device=device).manual_seed(1)
    out = []
    for i in range(count):
        rows = last if last is not None and i % 4 == 3 else size
        x = torch.randn(rows, 32, device=device, generator=g)
        boost = torch.tensor(1e9 if i in BOOSTED else 0.0, device=device)
        out.append((x, x[:, :1].tanh(), boost))
    return out


@dataclass
class Trace:
    losses: list[float]
    scales: list[float]
    skipped: list[int]
    weights: dict[str, torch.Tensor]
    trainer: Trainer


def _train(
    precision: str,
    mode: str,
    batches: Sequence[Batch],
    trainer: Trainer | None = None,
    device: str = "cuda",
) -> Trace:
    if trainer is None:
        model = _model(device)
        # A captured step needs the capturable (device-side) optimizer; the CPU has none.
        on_cuda = device == "cuda"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=on_cuda, capturable=on_cuda)
        policy = PrecisionPolicy.create(
            precision, device, ScalerConfig(init_scale=2.0**16, growth_interval=20)
        )
        config = TrainerConfig(log_interval=10**9, cuda_graph=mode)
        trainer = Trainer(model, [opt], policy, config)
    trace = Trace([], [], [], {}, trainer)
    for batch in batches:
        trainer.step([batch], _loss, num_samples=len(batch[0]))
        summary = trainer.summary(reset_interval=True)  # a host read per step: tests only
        trace.losses.append(summary.train_loss)
        trace.scales.append(summary.loss_scale)
        trace.skipped.append(summary.skipped_steps)
    trace.weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return trace


def _skipped_steps(cumulative: Sequence[int]) -> list[int]:
    """The steps that were skipped, from the run's skip count after each step."""
    before = [0, *cumulative[:-1]]
    return [step for step, (a, b) in enumerate(zip(before, cumulative, strict=True)) if b > a]


def _assert_same(graphed: Trace, eager: Trace) -> None:
    assert len(graphed.losses) == len(eager.losses)
    for step, (a, b) in enumerate(zip(graphed.losses, eager.losses, strict=True)):
        assert a == b or (math.isnan(a) and math.isnan(b)), f"loss differs at step {step}"
    assert graphed.scales == eager.scales
    assert graphed.skipped == eager.skipped
    for name, tensor in eager.weights.items():
        assert torch.equal(graphed.weights[name], tensor), name


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_200_graphed_steps_equal_eager_bit_for_bit(precision: str) -> None:
    """Losses, scale sequence, skipped steps and weights: identical to eager over 200 steps."""
    batches = _batches(200)
    graphed = _train(precision, "on", batches)
    eager = _train(precision, "off", batches)
    _assert_same(graphed, eager)
    assert graphed.trainer.execution.used == "cuda_graph"
    assert eager.trainer.execution.used == "eager"
    graphs = graphed.trainer.graphs
    assert graphs is not None and graphs.graph_count == 1
    assert graphs.captured_steps == 200 - graphs.warmup_steps
    if precision == "fp16":
        # The initial scale overflows too (4 times from 2**16 on the H100, 2026-11-23): the
        # forced overflows are among the skipped steps, and the count is eager's.
        skipped = _skipped_steps(graphed.skipped)
        assert set(BOOSTED) <= set(skipped), skipped
        assert len(skipped) == eager.skipped[-1]
        assert min(graphed.scales) < 2.0**16 <= max(graphed.scales)  # backed off, then grew


@pytest.mark.gpu
@needs_cuda
def test_a_partial_last_batch_gets_its_own_graph() -> None:
    """Every 4th batch has 17 rows: two graphs, and still identical to eager."""
    batches = _batches(40, last=17)
    graphed = _train("bf16", "on", batches)
    _assert_same(graphed, _train("bf16", "off", batches))
    graphs = graphed.trainer.graphs
    assert graphs is not None and graphs.graph_count == 2 and graphs.eager_steps == 0


@pytest.mark.gpu
@needs_cuda
def test_resume_into_a_graphed_trainer_continues_exactly() -> None:
    """60 graphed steps, a checkpoint, a fresh graphed trainer for 40 more == 100 at once."""
    batches = _batches(100)
    whole = _train("fp16", "on", batches)
    first = _train("fp16", "on", batches[:60])
    state = first.trainer.state_dict()
    resumed = _train("fp16", "on", [], None)
    resumed.trainer.load_state_dict(state)
    rest = _train("fp16", "on", batches[60:], resumed.trainer)
    for name, tensor in whole.weights.items():
        assert torch.equal(rest.weights[name], tensor), name
    assert rest.scales[-1] == whole.scales[-1] and rest.skipped[-1] == whole.skipped[-1]


@pytest.mark.gpu
@needs_cuda
def test_loading_state_into_a_trainer_that_has_graphs_recaptures() -> None:
    """load_state_dict replaces optimizer state: the old graphs are dropped, not replayed."""
    batches = _batches(30)
    trace = _train("bf16", "on", batches)
    graphs = trace.trainer.graphs
    assert graphs is not None and graphs.graph_count == 1
    trace.trainer.load_state_dict(trace.trainer.state_dict())
    assert graphs.graph_count == 0
    again = _train("bf16", "on", batches[:10], trace.trainer)
    assert graphs.graph_count == 1 and all(math.isfinite(v) for v in again.losses)


@pytest.mark.gpu
@needs_cuda
def test_steady_state_replays_do_not_sync_the_host() -> None:
    """After warm-up and capture, a step is a copy and a replay: no host synchronisation."""
    batches = _batches(20)
    trace = _train("fp16", "on", batches[:10])
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches[10:]:
            trace.trainer.step([batch], _loss, num_samples=64)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()


class _GuardTask:
    """A regression whose fp16 gradients overflow from step 12 on (data-driven boost)."""

    def __init__(self) -> None:
        self.batches = _batches(8)  # no boost: BOOSTED lies beyond them
        self.boosted = [(x, y, torch.tensor(1e9, device="cuda")) for x, y, _ in self.batches]

    def build_model(self) -> nn.Module:
        return _model()

    def build_optimizers(self, model: nn.Module) -> Sequence[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)]

    def build_schedulers(self, optimizers: Sequence[torch.optim.Optimizer]) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> Iterator[tuple[Batch, int]]:
        for i in range(8):  # from epoch 1, batch 4 on (step 12): fp16 overflows every step
            yield (self.boosted[i] if epoch >= 1 and i >= 4 else self.batches[i]), 64

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return _loss(model, batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"loss": 0.0}

    def extra_state(self) -> dict[str, Any]:
        return {}


@pytest.mark.gpu
@needs_cuda
def test_guard_rollback_with_graphs_equals_the_eager_guarded_run(tmp_path: Any) -> None:
    """fp16 overflows demote to bf16 with a rollback; graphed and eager runs end identical."""
    guard = GuardConfig(check_interval=4, overflow_window=4, overflow_warmup=0)
    results = {}
    for mode in ("on", "off"):
        options = FitOptions(
            precision="fp16",
            device="cuda",
            steps=32,
            cuda_graph=mode,
            guard=guard,
            checkpoint_dir=tmp_path / mode,
        )
        results[mode] = fit(_GuardTask(), options)
    graphed, eager = results["on"], results["off"]
    assert graphed.execution.used == "cuda_graph" and eager.execution.used == "eager"
    assert [d.to for d in graphed.demotions] == [d.to for d in eager.demotions] == ["bf16"]
    assert graphed.summary.train_loss == eager.summary.train_loss
    a = torch.load(graphed.checkpoint, weights_only=True)["model"]
    b = torch.load(eager.checkpoint, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in b)


@pytest.mark.slow
def test_skipped_steps_hold_the_forced_fp16_overflows_on_the_cpu() -> None:
    """The fp16 check's bookkeeping, eager on the CPU: both boosted steps are skipped ones."""
    # fp16 matmuls are slow on most CPUs: 121 small batches reach the second boosted step.
    trace = _train("fp16", "off", _batches(121, size=8, device="cpu"), device="cpu")
    skipped = _skipped_steps(trace.skipped)
    assert set(BOOSTED) <= set(skipped), skipped
    assert len(skipped) == trace.skipped[-1]  # at most one skip per step


class _LossTask:
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return _loss(model, batch)


def test_graphs_are_bound_to_one_loss_function_until_reset() -> None:
    """bind: the same loss (a re-accessed bound method too) passes, another one raises,
    and reset() unbinds (the CPU: binding touches no device)."""
    task = _LossTask()
    graphs = StepGraphs(torch.device("cpu"))
    graphs.bind(task.loss)
    graphs.bind(task.loss)  # a new bound-method object each access, equal to the first
    with pytest.raises(ValueError, match=r"loss_fn=<function _loss .*graphs\.reset\(\)"):
        graphs.bind(_loss)
    graphs.reset()
    graphs.bind(_loss)
    with pytest.raises(ValueError, match="is not the loss function"):
        graphs.bind(lambda model, batch: _loss(model, batch))


@pytest.mark.gpu
@needs_cuda
def test_a_different_loss_fn_after_capture_is_refused_not_replayed() -> None:
    """After capture a step with another loss_fn raises before it runs (a replay would run
    the captured loss); after graphs.reset() the new loss is warmed up and captured."""
    batches = _batches(12)
    trace = _train("fp16", "on", batches[:5])  # 3 warm-up steps, a capture, a replay
    trainer, graphs = trace.trainer, trace.trainer.graphs
    assert graphs is not None and graphs.graph_count == 1

    def doubled(model: nn.Module, batch: Batch) -> torch.Tensor:
        return 2.0 * _loss(model, batch)

    with pytest.raises(ValueError, match="is not the loss function this trainer's CUDA graphs"):
        trainer.step([batches[5]], doubled, num_samples=64)
    assert trainer.step_count == 5 and graphs.captured_steps == 2  # nothing ran
    graphs.reset()
    for batch in batches[5:]:
        trainer.step([batch], doubled, num_samples=64)
    assert graphs.graph_count == 1 and graphs.captured_steps == 2 + 4  # capture + 3 replays
    with pytest.raises(ValueError, match="is not the loss function"):
        trainer.step([batches[0]], _loss, num_samples=64)


def test_pool_leftovers_counts_the_live_blocks_of_one_pool_only() -> None:
    """The capture check reads the allocator snapshot: live blocks of the graphs' pool
    count; freed blocks and other pools (the default one, another graph's) do not."""
    segments = [
        {"segment_pool_id": (7, 0), "blocks": [
            {"size": 1024, "state": "active_allocated"},
            {"size": 4096, "state": "inactive"},
            {"size": 512, "state": "active_allocated"},
        ]},
        {"segment_pool_id": [7, 0], "blocks": [{"size": 256, "state": "active_allocated"}]},
        {"segment_pool_id": (0, 0), "blocks": [{"size": 9999, "state": "active_allocated"}]},
        {"segment_pool_id": (8, 0), "blocks": [{"size": 9999, "state": "active_allocated"}]},
    ]  # fmt: skip
    assert pool_leftovers(segments, (7, 0)) == (1024 + 512 + 256, 3)
    assert pool_leftovers(segments, (9, 0)) == (0, 0)
    unnamed = [{"blocks": [{"size": 1, "state": "active_allocated"}]}]
    assert pool_leftovers(unnamed, (7, 0)) == (0, 0)  # a snapshot naming no pool: unchecked


@pytest.mark.gpu
@needs_cuda
def test_a_tensor_made_inside_the_step_and_kept_fails_the_capture() -> None:
    """The one-pool invariant, enforced: a step that keeps a tensor it made raises at capture
    (another graph could overwrite it); the same step written in place captures."""
    x = torch.randn(4096, device="cuda")
    kept: list[torch.Tensor] = []
    leaky = StepGraphs(torch.device("cuda"), warmup=1)
    leaky.run(lambda batches: kept.append(batches[0].half() * 2), [x])  # warm-up: eager
    with pytest.raises(RuntimeError, match=r"left \d+ bytes in 1 block\(s\) allocated"):
        leaky.run(lambda batches: kept.append(batches[0].half() * 2), [x])
    assert leaky.graph_count == 0

    out = torch.zeros(4096, dtype=torch.float16, device="cuda")
    tidy = StepGraphs(torch.device("cuda"), warmup=1)
    for _ in range(3):  # warm-up, capture, replay
        tidy.run(lambda batches: out.copy_(batches[0].half() * 2), [x])
    assert tidy.graph_count == 1 and torch.equal(out, x.half() * 2)


@pytest.mark.gpu
@needs_cuda
def test_two_optimizers_and_two_graphs_replayed_out_of_capture_order_equal_eager() -> None:
    """fp16, two fused optimizers (the combined overflow flag), two graphs in one pool
    replayed interleaved (full, full, full, partial): bit for bit the eager run."""
    batches = _batches(40, last=17)

    def trainer(mode: str) -> Trainer:
        model = _model()
        first, second = list(model.parameters())[:2], list(model.parameters())[2:]
        opts = [
            torch.optim.AdamW(group, lr=1e-3, fused=True, capturable=True)
            for group in (first, second)
        ]
        policy = PrecisionPolicy.create(
            "fp16", "cuda", ScalerConfig(init_scale=2.0**16, growth_interval=20)
        )
        return Trainer(model, opts, policy, TrainerConfig(log_interval=10**9, cuda_graph=mode))

    graphed = _train("fp16", "on", batches, trainer("on"))
    _assert_same(graphed, _train("fp16", "off", batches, trainer("off")))
    graphs = graphed.trainer.graphs
    assert graphs is not None and graphs.graph_count == 2 and graphs.eager_steps == 0


def test_a_cpu_generator_cannot_be_registered_with_the_graphs() -> None:
    """Only a CUDA generator can be registered: a CPU one is refused when the graphs are made."""
    with pytest.raises(ValueError, match="generator on cpu: only a CUDA generator"):
        StepGraphs(torch.device("cuda"), generators=(torch.Generator(),))


def _noisy_trainer(mode: str, generator: torch.Generator, listed: bool) -> Trainer:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)
    policy = PrecisionPolicy.create("bf16", "cuda")
    config = TrainerConfig(log_interval=10**9, cuda_graph=mode)
    return Trainer(model, [opt], policy, config, generators=(generator,) if listed else ())


def _noisy_loss(generator: torch.Generator) -> Callable[[nn.Module, Batch], torch.Tensor]:
    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y, _ = batch  # input noise from the task's own CUDA generator
        noise = torch.randn(x.shape, device=x.device, generator=generator)
        return F.mse_loss(model(x + 0.1 * noise).float(), y)

    return loss


@pytest.mark.gpu
@needs_cuda
def test_a_listed_task_generator_draws_fresh_numbers_on_every_replay() -> None:
    """A loss drawing from its own CUDA generator, listed: 30 graphed steps equal 30 eager
    ones bit for bit (a replay that repeated its noise would not), the generator as far on."""
    batches = _batches(30)
    runs = {}
    for mode in ("on", "off"):
        generator = torch.Generator(device="cuda").manual_seed(7)
        trainer = _noisy_trainer(mode, generator, listed=True)
        loss = _noisy_loss(generator)
        losses = []
        for batch in batches:
            trainer.step([batch], loss, num_samples=64)
            losses.append(trainer.summary(reset_interval=True).train_loss)
        runs[mode] = (losses, trainer.model.state_dict(), generator.get_offset(), trainer)
    (graphed, g_weights, g_offset, g_trainer), (eager, e_weights, e_offset, _) = runs.values()
    assert g_trainer.graphs is not None and g_trainer.graphs.captured_steps == 27
    assert graphed == eager and g_offset == e_offset > 0
    assert all(torch.equal(g_weights[k], e_weights[k]) for k in e_weights)


@pytest.mark.gpu
@needs_cuda
def test_an_unlisted_task_generator_never_repeats_and_host_randomness_fails_the_capture() -> None:
    """No replay repeats numbers in silence: an unlisted CUDA generator fails the capture
    with an error saying what to do, and the run goes on eagerly from the step before it
    (or, where torch registers it lazily, the graphed run equals the eager one); a step
    that moves the CPU's default generator is refused before capturing, with the reason.
    (The trainer falls back instead of raising: on the H200 the old test expected a raise
    and saw none, although the log named the host randomness.)"""
    batches = _batches(8)
    runs = {}
    for mode in ("on", "off"):
        generator = torch.Generator(device="cuda").manual_seed(7)
        trainer = _noisy_trainer(mode, generator, listed=False)
        loss = _noisy_loss(generator)
        for batch in batches:
            trainer.step([batch], loss, num_samples=64)
        runs[mode] = trainer
    graphed, eager = runs["on"], runs["off"]
    if graphed.execution.fallback is not None:  # registration needed: the capture failed
        assert graphed.execution.fallback == "capture_failed"
        assert "not registered with its CUDA graph" in graphed.execution.reason
        assert "cuda_generators" in graphed.execution.reason
    else:  # lazily registered by torch: fresh numbers, as eagerly
        assert graphed.execution.used == "cuda_graph"
    e_weights, g_weights = eager.model.state_dict(), graphed.model.state_dict()
    assert all(torch.equal(g_weights[k], e_weights[k]) for k in e_weights)

    def host_choice(model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y, _ = batch
        k = int(torch.randint(0, x.shape[1], ()))  # drawn on the host: baked into a graph
        dropped = x.clone()
        dropped[:, k] = 0.0  # one input column dropped at random (a fill: no host copy)
        return F.mse_loss(model(dropped).float(), y)

    trainer = _noisy_trainer("on", torch.Generator(device="cuda"), listed=False)
    for batch in batches[:4]:
        trainer.step([batch], host_choice, num_samples=64)
    assert trainer.step_count == 4 and trainer.execution.fallback == "capture_failed"
    assert "refused before capturing" in trainer.execution.reason
    assert "drew random numbers on the host" in trainer.execution.reason
