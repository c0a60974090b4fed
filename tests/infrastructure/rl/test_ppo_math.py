"""PPO arithmetic (log-probs, GAE, clipped surrogate) against hand-computed float64 values."""

from __future__ import annotations

import math

import pytest
import torch

from genesis_fp16_infrastructure.rl.ppo_math import (
    clipped_policy_loss,
    gae,
    token_logprobs,
    value_loss,
)


def test_token_logprobs_match_float64_log_softmax() -> None:
    """Gathered fp32 log_softmax equals the float64 reference on random logits."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g)
    tokens = torch.randint(0, 7, (3, 5), generator=g)
    ref = torch.log_softmax(logits.double(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    out = token_logprobs(logits, tokens)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), ref, atol=1e-6)


def test_token_logprobs_of_bf16_logits_stay_finite_where_log_softmax_prob_underflows() -> None:
    """An unlikely token (logit gap 120) has log p = -120 in fp32; log(softmax) in bf16 is -inf."""
    logits = torch.tensor([[[120.0, 0.0]]], dtype=torch.bfloat16)
    tokens = torch.tensor([[1]])
    assert token_logprobs(logits, tokens).item() == pytest.approx(-120.0)
    naive = torch.log(torch.softmax(logits, -1))[..., 1]
    assert math.isinf(naive.item())


def test_gae_by_hand() -> None:
    """gamma=lam=1: advantage = future reward sum - V; lam=0: one-step TD errors."""
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.5]])
    adv, ret = gae(rewards, values, gamma=1.0, lam=1.0)
    assert adv.tolist() == [[0.5, 0.75, 0.5]]
    assert ret.tolist() == [[1.0, 1.0, 1.0]]
    adv0, _ = gae(rewards, values, gamma=1.0, lam=0.0)
    assert adv0.tolist() == [[-0.25, 0.25, 0.5]]


def test_gae_runs_in_fp32_for_bf16_values() -> None:
    """bf16 value predictions are upcast: GAE's running sum is fp32."""
    adv, _ = gae(torch.zeros(2, 4), torch.ones(2, 4, dtype=torch.bfloat16), 1.0, 0.95)
    assert adv.dtype == torch.float32


def test_clipped_policy_loss_by_hand() -> None:
    """Ratios 1.5 (adv +1) and 0.5 (adv -1) with eps 0.2: both clipped, loss -(1.2 - 0.8)/2."""
    old = torch.zeros(2)
    logp = torch.tensor([math.log(1.5), math.log(0.5)])
    loss, frac = clipped_policy_loss(logp, old, torch.tensor([1.0, -1.0]), 0.2)
    assert loss.item() == pytest.approx(-0.2)
    assert frac.item() == 1.0
    loss_in, frac_in = clipped_policy_loss(torch.tensor([0.1]), torch.zeros(1), torch.ones(1), 0.2)
    assert loss_in.item() == pytest.approx(-math.exp(0.1))
    assert frac_in.item() == 0.0


def test_value_loss_is_half_mse_in_fp32() -> None:
    """0.5 * mean((V - R)^2), computed in fp32 from bf16 predictions."""
    out = value_loss(torch.tensor([1.0, 3.0], dtype=torch.bfloat16), torch.tensor([0.0, 1.0]))
    assert out.dtype == torch.float32
    assert out.item() == pytest.approx(0.5 * (1 + 4) / 2)
