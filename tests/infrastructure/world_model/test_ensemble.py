"""The world-model ensemble as one network: stacked weights, one batched matmul per layer,
each member computing (and learning) what it would alone, loop-layout states loading."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from benchmarks.ensemble_step import LoopEnsemble  # the loop layout, the bench's reference
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    WorldModelEnsemble,
    WorldModelOutput,
    stack_loop_optimizer_state,
    world_model_losses,
)

CONFIG = ModelConfig(in_features=12, hidden=16, depth=2, members=5)


def _pair(seed: int = 0) -> tuple[WorldModelEnsemble, LoopEnsemble]:
    torch.manual_seed(seed)
    stacked = WorldModelEnsemble(CONFIG)
    torch.manual_seed(seed)
    return stacked, LoopEnsemble(CONFIG)


def _targets(n: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    score = torch.rand(n, generator=g)
    outcome = (score >= 0.3).long() + (score >= 0.7).long()
    return (score >= 0.7).float(), score, torch.rand(n, generator=g) > 0.2, outcome


def _assert_close(a: WorldModelOutput, b: WorldModelOutput, atol: float = 1e-6) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert torch.allclose(x.float(), y.float(), atol=atol), (x - y).abs().max()


def test_weights_are_stacked_per_layer_under_a_world_models_keys() -> None:
    """One parameter per layer with a leading member dimension, named as in a WorldModel."""
    stacked = WorldModelEnsemble(CONFIG)
    single = WorldModel(replace(CONFIG, members=1)).state_dict()
    state = stacked.state_dict()
    assert state.keys() == single.keys()
    assert all(state[k].shape == (5, *single[k].shape) for k in single)


def test_the_stacked_ensemble_starts_as_the_loop_layouts_members_and_serves_their_mean() -> None:
    """Built after the same seed, member k has the loop layout's member k's weights (bit
    for bit), gives its outputs, and the served output is the members' mean."""
    stacked, loop = _pair()
    for k, member in enumerate(loop.members):
        assert all(
            torch.equal(t, member.state_dict()[n]) for n, t in stacked.member_state_dict(k).items()
        )
    x = torch.randn(40, 12)
    with torch.no_grad():
        _assert_close(stacked(x, per_member=True), loop(x, per_member=True))
        _assert_close(stacked(x), loop(x))
        per_member = stacked(x, per_member=True)
        assert torch.equal(stacked(x).outcome_logits, per_member.outcome_logits.mean(0))
        assert torch.equal(stacked.member(3)(x).score_logit, loop.members[3](x).score_logit)


def test_scoring_on_a_cpu_gives_the_training_forwards_bits() -> None:
    """Without gradients a CPU's LayerNorms run one kernel a member (affine fused), and
    every output, per member and served, is bit for bit the training forward's (two
    kernels: the normalisation, then each member's affine)."""
    torch.manual_seed(3)
    stacked = WorldModelEnsemble(replace(CONFIG, hidden=64))
    x = torch.randn(3000, 12)
    trained = stacked(x, per_member=True)  # with gradients: the two kernels
    assert trained.success_logit.requires_grad
    with torch.no_grad():
        scored = stacked(x, per_member=True)
        served = stacked(x)
    for a, b in zip(scored, trained, strict=True):
        assert torch.equal(a, b.detach())
    for a, b in zip(served, trained, strict=True):
        assert torch.equal(a, b.detach().mean(0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_batched_matmuls_run_in_low_precision(dtype: torch.dtype) -> None:
    """Under real CPU autocast every member's logits come out of bf16/fp16 matmuls, close to
    the loop layout's, and the losses stay fp32 with a gradient for every stacked weight."""
    stacked, loop = _pair()
    x = torch.randn(32, 12)
    with torch.autocast("cpu", dtype=dtype):
        out = stacked(x, per_member=True)
        _assert_close(out, loop(x, per_member=True), atol=2e-2)
        parts = world_model_losses(WorldModelOutput(*(p[0] for p in out)), *_targets(32))
    assert out.outcome_logits.dtype == dtype and out.success_logit.dtype == dtype
    assert parts.total.dtype == torch.float32 and torch.isfinite(parts.total)
    parts.total.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in stacked.parameters())


def test_each_members_gradient_and_adamw_steps_are_its_solo_ones() -> None:
    """A different loss per member: each member's slice of every gradient is what that
    member gets alone, and 5 fused AdamW steps land where the loop layout's do."""
    stacked, loop = _pair()
    x = torch.randn(48, 12)
    labels = _targets(48)
    weights = [torch.arange(48) % 5 != k for k in range(5)]  # each member skips a fold

    def loss(model: nn.Module) -> torch.Tensor:
        out = model(x, per_member=True)
        total = torch.zeros(())
        for k in range(5):
            own = WorldModelOutput(*(p[k] for p in out))
            total = total + world_model_losses(own, *labels, weight=weights[k]).total
        return total

    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True) for m in (stacked, loop)]
    for step in range(5):
        for model, optimizer in zip((stacked, loop), optimizers, strict=True):
            optimizer.zero_grad()
            loss(model).backward()
        if step == 0:
            for k, member in enumerate(loop.members):
                for name, p in member.named_parameters():
                    got = stacked.get_parameter(name).grad[k]  # type: ignore[index]
                    assert torch.allclose(got, p.grad, atol=1e-6), name  # type: ignore[arg-type]
        for optimizer in optimizers:
            optimizer.step()
    for k, member in enumerate(loop.members):
        for name, t in stacked.member_state_dict(k).items():
            assert torch.allclose(t, member.state_dict()[name], atol=1e-5), (k, name)


def test_a_loop_layout_state_dict_loads_and_gives_the_same_outputs() -> None:
    """A state dict with the loop layout's keys (members.K.trunk.0.weight, ...), saved and
    read back as a checkpoint is, loads into a fresh ensemble: the same outputs."""
    _, loop = _pair(seed=7)
    old = loop.state_dict()
    assert "members.4.outcome_head.bias" in old and "trunk.0.weight" not in old
    fresh = WorldModelEnsemble(CONFIG)  # other initial weights
    x = torch.randn(20, 12)
    with torch.no_grad():
        assert not torch.allclose(fresh(x).success_logit, loop(x).success_logit)
        fresh.load_state_dict(old)
        _assert_close(fresh(x, per_member=True), loop(x, per_member=True))
    with pytest.raises(RuntimeError, match=r"size mismatch for trunk\.0\.weight"):
        WorldModelEnsemble(replace(CONFIG, members=3)).load_state_dict(old)


def test_a_loop_layout_optimizer_state_is_stacked_as_the_weights_are() -> None:
    """AdamW's state from the loop layout (one entry per member's parameter) loads into the
    stacked ensemble's optimizer: the next step matches the loop layout's next step."""
    stacked, loop = _pair()
    x = torch.randn(16, 12)
    optimizer = torch.optim.AdamW(loop.parameters(), lr=1e-2, fused=True)
    for _ in range(3):
        optimizer.zero_grad()
        world_model_losses(loop(x), *_targets(16)).total.backward()
        optimizer.step()
    resumed = torch.optim.AdamW(stacked.parameters(), lr=1e-2, fused=True)
    resumed.register_load_state_dict_pre_hook(stack_loop_optimizer_state)
    stacked.load_state_dict(loop.state_dict())
    resumed.load_state_dict(optimizer.state_dict())
    assert len(resumed.state) == len(list(stacked.parameters()))
    for model, opt in ((loop, optimizer), (stacked, resumed)):
        opt.zero_grad()
        world_model_losses(model(x), *_targets(16)).total.backward()
        opt.step()
    for k, member in enumerate(loop.members):
        for name, t in stacked.member_state_dict(k).items():
            assert torch.allclose(t, member.state_dict()[name], atol=1e-6), (k, name)


def test_a_stacked_or_single_networks_optimizer_state_is_left_alone() -> None:
    """The hook changes nothing when the saved state already fits the optimizer."""
    single = WorldModel(replace(CONFIG, members=1))
    optimizer = torch.optim.AdamW(single.parameters())
    state = optimizer.state_dict()
    assert stack_loop_optimizer_state(optimizer, state) is None
