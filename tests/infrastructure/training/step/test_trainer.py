"""The Trainer's step: skip on overflow, clip unscaled grads, accumulate, schedulers, stats."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
import torch
from op_counter import OpCounter
from torch import nn
from torch.nn import functional as F

from genesis_fp16_infrastructure.training import (
    PrecisionPolicy,
    ScalerConfig,
    Trainer,
    TrainerConfig,
    TrainingSummary,
)
from genesis_fp16_infrastructure.training.step import cuda_graph
from genesis_fp16_infrastructure.training.step import trainer as trainer_module
from genesis_fp16_infrastructure.training.step.cuda_graph import StepGraphs

Batch = tuple[torch.Tensor, torch.Tensor]


def _mlp(seed: int = 0, width: int = 16) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 1))


def _batch(seed: int = 1, n: int = 32) -> Batch:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.1


def _mse(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.mse_loss(model(batch[0]).float(), batch[1])


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _param(model: nn.Module, index: int) -> nn.Parameter:
    """The index-th parameter: 0/1 first layer weight/bias, 2/3 second layer."""
    return list(model.parameters())[index]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _inject_inf(param: torch.Tensor, bad_steps: set[int]) -> Callable[[], None]:
    """Make ``param``'s gradient inf on the given steps; returns a function to call per step."""
    state = {"step": -1}

    def hook(grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, math.inf) if state["step"] in bad_steps else grad

    param.register_hook(hook)

    def next_step() -> None:
        state["step"] += 1

    return next_step


def _expected_scales(
    init: float, steps: int, bad: set[int], interval: int, floor: float = 1.0
) -> list[float]:
    scale, tracker, out = init, 0, []
    for i in range(steps):
        if i in bad:
            scale, tracker = max(scale * 0.5, floor), 0
        else:
            tracker += 1
            if tracker == interval:
                scale, tracker = scale * 2.0, 0
        out.append(scale)
    return out


@pytest.mark.parametrize("fused", [False, True])
def test_injected_overflow_skips_exactly_those_steps(fused: bool) -> None:
    """fp16: inf grads on chosen steps skip exactly those steps; scale backs off and regrows."""
    model = _mlp()
    config = ScalerConfig(init_scale=1024.0, growth_interval=2)
    policy = PrecisionPolicy.create("fp16", "cpu", config)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=fused)
    trainer = Trainer(model, [optimizer], policy, TrainerConfig(overflow_window=4))
    bad = {1, 2, 6}
    tick = _inject_inf(_param(model, 0), bad)
    scales = []
    for i in range(10):
        before = _params(model)
        tick()
        trainer.step([_batch(i)], _mse, 32)
        assert _same(before, _params(model)) == (i in bad), f"step {i}"
        assert all(p.grad is None for p in model.parameters())
        scales.append(policy.scaler.get_scale())
    assert scales == _expected_scales(1024.0, 10, bad, interval=2)
    s = trainer.summary()
    assert (s.step, s.skipped_steps, s.optimizer_steps) == (10, 3, 7)
    assert s.overflow_rate == pytest.approx(0.3)
    assert s.overflow_rate_window == pytest.approx(0.25)  # steps 6..9: one overflow
    assert s.loss_scale == scales[-1] and math.isfinite(s.grad_norm)


def test_counters_resume_and_a_new_trainer_on_a_used_scaler_starts_from_zero() -> None:
    """fp16: skipped steps, non-finite losses and the overflow window load from a state and
    count on; a trainer built on a scaler that already overflowed counts only its own."""
    factors = iter([1.0, math.nan, 1.0, 1.0, 1.0, 1.0, math.inf])

    def loss(m: nn.Module, b: Batch) -> torch.Tensor:
        return _mse(m, b) * next(factors)  # a non-finite loss, non-finite gradients

    def fresh(policy: PrecisionPolicy | None = None) -> Trainer:
        model = _mlp()
        policy = policy or PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=64.0))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return Trainer(model, [opt], policy, TrainerConfig(overflow_window=4))

    first, b = fresh(), _batch()
    for micro_batches in ([b], [b, b], [b], [b]):
        first.step(micro_batches, loss, 32)
    resumed = fresh()
    resumed.load_state_dict(first.state_dict())
    for s in (first.summary(), resumed.summary()):
        assert (s.skipped_steps, s.nonfinite_losses, s.overflow_rate_window) == (1, 1, 0.25)
    resumed.step([b, b], loss, 32)
    s = resumed.summary()
    assert (s.step, s.skipped_steps, s.nonfinite_losses, s.overflow_rate_window) == (5, 2, 2, 0.5)
    assert fresh(resumed.policy).summary().skipped_steps == 0


class _StandInGraphs(StepGraphs):
    """StepGraphs whose run is eager (bind and reset are its own): the trainer takes its
    captured-step code paths on the CPU."""

    def run(
        self, body: Callable[[Sequence[Any]], object], micro_batches: Sequence[Any], key: Any = None
    ) -> str:
        body(micro_batches)
        return "eager"


def test_the_step_a_graph_captures_keeps_the_eager_statistics() -> None:
    """The step a CUDA graph would capture (overflow window slot and norm kept on the device)
    reports what the eager step reports, run on the CPU through a stand-in for StepGraphs."""

    def run(captured: bool) -> TrainingSummary:
        model = _mlp()
        config = ScalerConfig(init_scale=1024.0, growth_interval=2)
        policy = PrecisionPolicy.create("fp16", "cpu", config)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        trainer = Trainer(model, [opt], policy, TrainerConfig(overflow_window=3))
        if captured:
            trainer.graphs = _StandInGraphs(torch.device("cpu"))
        tick = _inject_inf(_param(model, 0), {1, 2, 6})
        for i in range(8):
            tick()
            trainer.step([_batch(i)], _mse, 32)
        return replace(trainer.summary(), samples_per_second=0.0, wall_seconds=0.0)

    eager, captured = run(False), run(True)
    assert captured == eager
    assert (eager.skipped_steps, eager.overflow_rate_window) == (3, pytest.approx(1 / 3))


def test_the_captured_path_refuses_another_loss_fn_and_the_eager_path_takes_any() -> None:
    """A replay runs the captured loss, so on the graph path a second loss_fn raises before
    the step runs (graphs.reset() lets it in); eager steps take a new one each step."""

    def half(model: nn.Module, batch: Batch) -> torch.Tensor:
        return 0.5 * _mse(model, batch)

    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=1024.0))
    model = _mlp()
    trainer = Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy)
    for loss_fn in (_mse, half, _mse):
        trainer.step([_batch()], loss_fn, 32)
    graphs = trainer.graphs = _StandInGraphs(torch.device("cpu"))
    trainer.step([_batch()], _mse, 32)
    before = _params(model)
    with pytest.raises(ValueError, match=r"loss_fn=<function .*half.* is not the loss function"):
        trainer.step([_batch()], half, 32)
    assert trainer.step_count == 4 and all(map(torch.equal, _params(model), before))
    graphs.reset()
    trainer.step([_batch()], half, 32)
    assert trainer.step_count == 5 and math.isfinite(trainer.summary().train_loss)


def test_a_graphed_step_takes_the_batch_signature_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the captured path a step walks its batch for a signature once (whether it captures,
    then how it runs), through the real StepGraphs run eagerly on the CPU (no graph slot);
    run() without a key still takes one itself."""
    walks, real, depth = [], cuda_graph.signature, [0]

    def counted(value: Any) -> Any:  # signature() recurses through the module's name
        walks.extend([value] if depth[0] == 0 else [])
        depth[0] += 1
        try:
            return real(value)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(trainer_module, "signature", counted, raising=False)
    monkeypatch.setattr(cuda_graph, "signature", counted)
    model = _mlp()
    policy = PrecisionPolicy.create("fp32", "cpu", ScalerConfig())
    trainer = Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy)
    graphs = trainer.graphs = StepGraphs(torch.device("cpu"), warmup=0, max_graphs=0)
    for i in range(4):
        trainer.step([_batch(i)], _mse, 32)
    assert len(walks) == 4 and graphs.eager_steps == 4
    assert graphs.run(lambda batches: None, [_batch()]) == "eager" and len(walks) == 5


def test_a_step_switches_the_model_to_training_only_when_it_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Steps leave a model in training mode alone (no walk of its modules each step); after
    model.eval() the next step puts every module back in training mode, on the eager and
    the captured path alike."""
    original, calls = nn.Module.train, []

    def counted(module: nn.Module, mode: bool = True) -> nn.Module:
        calls.append((module, mode))
        return original(module, mode)

    for captured in (False, True):
        model = _mlp()
        policy = PrecisionPolicy.create("fp32", "cpu", ScalerConfig())
        trainer = Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy)
        if captured:
            trainer.graphs = _StandInGraphs(torch.device("cpu"))
        calls.clear()
        with monkeypatch.context() as patch:
            patch.setattr(nn.Module, "train", counted)
            for i in range(3):
                trainer.step([_batch(i)], _mse, 32)
            assert calls == []
            model.eval()
            trainer.step([_batch()], _mse, 32)
            trainer.step([_batch()], _mse, 32)
        assert [mode for m, mode in calls if m is model] == [False, True]
        assert all(m.training for m in model.modules())


def _unscaled_grad(model: nn.Module, batch: Batch) -> list[torch.Tensor]:
    with torch.autocast("cpu", dtype=torch.float16):
        loss = _mse(model, batch)
    grads = torch.autograd.grad(loss.float(), list(model.parameters()))
    return [g.detach().clone() for g in grads]


@pytest.mark.parametrize("factor", [8.0, 0.5])
def test_clipping_acts_on_unscaled_gradients(factor: float) -> None:
    """max_grad_norm between the unscaled and the scaled norm: only unscaled clipping matches."""
    model = _mlp()
    batch = _batch()
    grads = _unscaled_grad(model, batch)
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
    scale = 1024.0  # the scaled norm, 1024 * norm, is far above norm * 8
    max_norm = norm * factor
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=scale))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = Trainer(model, [optimizer], policy, TrainerConfig(max_grad_norm=max_norm))
    before = _params(model)
    trainer.step([batch], _mse, 32)
    coef = min(1.0, max_norm / norm)
    for b, a, g in zip(before, _params(model), grads, strict=True):
        torch.testing.assert_close(b - a, g * coef, rtol=2e-2, atol=1e-4)
    assert trainer.summary().grad_norm == pytest.approx(norm, rel=1e-2)


def test_gradient_accumulation_equals_one_big_batch() -> None:
    """Four micro-batches of 8 give the same update as one batch of 32 (fp32)."""
    big = _batch(n=32)
    micro = [(big[0][i : i + 8], big[1][i : i + 8]) for i in range(0, 32, 8)]
    results = []
    for batches in ([big], micro):
        model = _mlp()
        policy = PrecisionPolicy.create("fp32", "cpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        Trainer(model, [opt], policy, TrainerConfig(max_grad_norm=None)).step(batches, _mse, 32)
        results.append(_params(model))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_two_optimizers_one_update_and_a_shared_skip() -> None:
    """Two optimizers: one scaler.update per step; an overflow in one skips both."""
    model = _mlp()
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=256.0))
    first = torch.optim.SGD(model[0].parameters(), lr=0.1)
    second = torch.optim.AdamW(model[2].parameters(), lr=0.01, fused=True)
    trainer = Trainer(model, [first, second], policy)
    updates: list[int] = []
    original = policy.scaler.update

    def counted_update(new_scale: Any = None) -> None:
        updates.append(1)
        original(new_scale)

    policy.scaler.update = counted_update  # type: ignore[method-assign]
    tick = _inject_inf(_param(model, 2), {1})
    for i in range(3):
        before = _params(model)
        tick()
        trainer.step([_batch(i)], _mse, 32)
        changed = [not torch.equal(b, a) for b, a in zip(before, _params(model), strict=True)]
        assert all(changed) if i != 1 else not any(changed), f"step {i}: {changed}"
    assert len(updates) == 3
    assert trainer.summary().skipped_steps == 1


def test_scheduler_does_not_advance_on_a_skipped_step() -> None:
    """An LR scheduler steps only on taken steps: one skip in four leaves last_epoch at 3."""
    model = _mlp()
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=256.0))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 0.5**n)
    trainer = Trainer(model, [opt], policy, schedulers=[sched])
    tick = _inject_inf(_param(model, 1), {2})
    lrs = []
    for i in range(4):
        tick()
        trainer.step([_batch(i)], _mse, 32)
        lrs.append(opt.param_groups[0]["lr"])
    assert sched.last_epoch == 3
    assert lrs == pytest.approx([0.05, 0.025, 0.025, 0.0125])
    assert trainer.host_sync_per_step


def _nan_gradient_on(steps: set[int]) -> Callable[[nn.Module, Batch], torch.Tensor]:
    """A loss that stays finite but whose gradient is NaN on the given steps (counted from 0):
    torch.where picks 0 over a sqrt of a negative number, whose gradient is still NaN."""
    state = {"step": -1}

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        state["step"] += 1
        if state["step"] not in steps:
            return _mse(model, batch)
        weight = _param(model, 0).float()
        negative = -(weight * weight).sum() - 1.0
        return _mse(model, batch) + torch.where(torch.tensor(True), 0.0, negative.sqrt())

    return loss


def _adam_state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [t.clone() for s in opt.state.values() for t in s.values()]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_nonfinite_gradient_skips_the_step_in_every_precision(
    precision: str, fused: bool
) -> None:
    """fp32/bf16: a finite loss with a NaN gradient skips the step (weights and Adam state
    unchanged), is counted in skipped_steps, and the count survives a resume."""
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
    trainer = Trainer(model, [opt], PrecisionPolicy.create(precision, "cpu"))
    loss = _nan_gradient_on({3})
    for i in range(6):
        before, state = _params(model), _adam_state(opt)
        trainer.step([_batch(i)], loss, 32)
        assert _same(before, _params(model)) == (i == 3), f"step {i}"
        if i == 3:
            assert _same(state, _adam_state(opt))
        assert all(torch.isfinite(p).all() for p in model.parameters())
    s = trainer.summary()
    assert (s.step, s.skipped_steps, s.optimizer_steps, s.nonfinite_losses) == (6, 1, 5, 0)
    assert math.isfinite(s.train_loss)
    resumed_model = _mlp()
    resumed_opt = torch.optim.AdamW(resumed_model.parameters(), lr=1e-2, fused=fused)
    resumed = Trainer(resumed_model, [resumed_opt], PrecisionPolicy.create(precision, "cpu"))
    resumed.load_state_dict(trainer.state_dict())
    resumed.step([_batch(9)], _nan_gradient_on({0}), 32)
    assert resumed.summary().skipped_steps == 2


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fused_adamw_matches_the_unfused_one(precision: str) -> None:
    """fused=True AdamW trains, skips on overflow and matches foreach AdamW closely."""
    results = []
    for fused in (True, False):
        model = _mlp()
        policy = PrecisionPolicy.create(precision, "cpu", ScalerConfig(init_scale=512.0))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused, foreach=not fused)
        trainer = Trainer(model, [opt], policy)
        tick = _inject_inf(_param(model, 0), {3})
        for i in range(6):
            tick()
            trainer.step([_batch(i)], _mse, 32)
        assert trainer.summary().skipped_steps == 1
        assert trainer.host_sync_per_step is not fused
        results.append(_params(model))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class _ReadCounter:
    """Counts Python-level reads of tensor values (.item(), bool(), float(), ...)."""

    NAMES = ("item", "tolist", "__bool__", "__float__", "__int__")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in self.NAMES:
            monkeypatch.setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(tensor, *args, **kwargs)

        return counted


def _steady_state_reads(monkeypatch: pytest.MonkeyPatch, fused: bool) -> list[str]:
    model = _mlp()
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=256.0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
    trainer = Trainer(model, [opt], policy, TrainerConfig(log_interval=1000))
    batches = [_batch(i) for i in range(8)]
    for b in batches[:2]:  # warm-up: optimizer state is created lazily
        trainer.step([b], _mse, 32)
    with monkeypatch.context() as patch:
        counter = _ReadCounter(patch)
        for b in batches[2:]:
            trainer.step([b], _mse, 32)
    return counter.calls


def test_steady_state_step_reads_no_tensor_values_with_a_fused_optimizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPU proxy for 'no host sync': fp16 steps with fused AdamW read no tensor value.

    On CPU a read costs no device wait, but every host sync on CUDA is one of these
    Python-level reads; the CUDA test in test_cuda.py checks the real thing. The
    non-fused run shows that the counter does see the one read that path needs.
    """
    assert _steady_state_reads(monkeypatch, fused=True) == []
    assert len(_steady_state_reads(monkeypatch, fused=False)) >= 6


def _ops_per_step(step: Callable[[Batch], None]) -> int:
    batch = _batch()
    step(batch)
    step(batch)  # warm-up: optimizer state is created lazily
    with OpCounter() as counter:
        step(batch)
    return counter.count


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_adds_few_tensor_ops_to_a_hand_written_loop(precision: str) -> None:
    """The step's bookkeeping and its skip of a non-finite gradient are at most 5 aten ops
    over a bare torch loop (5 on torch 2.13, 3 before the skip)."""

    def build() -> tuple[nn.Module, torch.optim.Optimizer, PrecisionPolicy]:
        model = _mlp()
        return (
            model,
            torch.optim.AdamW(model.parameters()),
            PrecisionPolicy.create(precision, "cpu"),
        )

    model, opt, policy = build()

    def hand(batch: Batch) -> None:
        with policy.autocast():
            loss = _mse(model, batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ours, ours_opt, ours_policy = build()
    trainer = Trainer(ours, [ours_opt], ours_policy)
    extra = _ops_per_step(lambda b: trainer.step([b], _mse, 32)) - _ops_per_step(hand)
    assert 0 < extra <= 5


def test_without_loss_scaling_finite_steps_are_averaged_and_nonfinite_losses_counted() -> None:
    """fp32: train_loss averages finite steps, inf/NaN micro-batches are counted and saved."""
    values = iter([1.0, math.nan, 3.0, 5.0, math.inf, 2.0, 4.0])

    def loss(m: nn.Module, b: Batch) -> torch.Tensor:
        return (m(b[0]) * 0.0).sum() + next(values)  # zero gradients, a known loss

    def fresh() -> Trainer:
        model = _mlp()
        return Trainer(
            model, [torch.optim.SGD(model.parameters())], PrecisionPolicy.create("fp32", "cpu")
        )

    trainer, b = fresh(), _batch()
    for micro_batches in ([b], [b], [b, b], [b, b], [b]):
        trainer.step(micro_batches, loss, 32)
    s = trainer.summary()
    assert (s.step, s.train_loss, s.nonfinite_losses, s.skipped_steps) == (5, 3.0, 2, 0)
    assert (s.overflow_rate_window, s.grad_norm) == (0.0, 0.0)
    resumed = fresh()
    resumed.load_state_dict(trainer.state_dict())
    assert (resumed.summary().nonfinite_losses, resumed.summary().grad_norm) == (2, 0.0)


def test_on_log_gets_a_summary_every_interval_and_nonfinite_losses_are_counted() -> None:
    """on_log fires every log_interval steps; a NaN loss is counted and its step skipped."""
    model = _mlp()
    policy = PrecisionPolicy.create("fp16", "cpu", ScalerConfig(init_scale=256.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    logs: list[TrainingSummary] = []
    trainer = Trainer(model, [opt], policy, TrainerConfig(log_interval=3), on_log=logs.append)
    steps: Iterator[int] = iter(range(100))

    def loss(m: nn.Module, b: Batch) -> torch.Tensor:
        value = _mse(m, b)
        return value * math.nan if next(steps) == 4 else value

    for i in range(7):
        trainer.step([_batch(i)], loss, 32)
    assert [s.step for s in logs] == [3, 6]
    assert all(s.precision == "fp16" and math.isfinite(s.train_loss) for s in logs)
    final = trainer.summary()
    assert (final.nonfinite_losses, final.skipped_steps, final.samples) == (1, 1, 224)
    assert final.samples_per_second > 0 and not final.unstable


def test_trainer_config_rejects_bad_values() -> None:
    """TrainerConfig names the bad value and the rule."""
    with pytest.raises(ValueError, match="max_grad_norm=0"):
        TrainerConfig(max_grad_norm=0)
    with pytest.raises(ValueError, match="log_interval=0"):
        TrainerConfig(log_interval=0)


def test_an_fp16_step_adds_few_tensor_ops_to_the_gradscaler_loop() -> None:
    """fp16: loss scaling with floor, ceiling and unstable flag plus our counters costs at
    most 5 aten ops over torch.amp.GradScaler's loop (4 on torch 2.13; it was 59, then 22)."""
    scaler_config = ScalerConfig(init_scale=1024.0)  # no overflow on the first steps

    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def hand(batch: Batch) -> None:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _mse(model, batch)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    ours = _mlp()
    ours_opt = torch.optim.AdamW(ours.parameters(), fused=True)
    trainer = Trainer(ours, [ours_opt], PrecisionPolicy.create("fp16", "cpu", scaler_config))
    extra = _ops_per_step(lambda b: trainer.step([b], _mse, 32)) - _ops_per_step(hand)
    assert 0 < extra <= 5


def test_a_cpu_trainers_execution_line_is_debug(caplog: pytest.LogCaptureFixture) -> None:
    """On a CPU a trainer can only step eagerly: its "execution eager (...)" line is DEBUG,
    not INFO at every calibration trainer and again for the run."""
    model = _mlp()
    policy = PrecisionPolicy.create("fp32", "cpu")
    with caplog.at_level("DEBUG", logger="genesis_fp16_infrastructure.training.step.trainer"):
        Trainer(model, [torch.optim.SGD(model.parameters(), lr=0.1)], policy, TrainerConfig())
    (record,) = [r for r in caplog.records if r.getMessage().startswith("execution eager")]
    assert record.levelname == "DEBUG"
