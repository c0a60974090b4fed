"""The arithmetic of PPO, with the precision of each step made explicit.

>>> import torch
>>> logits = torch.zeros(1, 2, 4)
>>> token_logprobs(logits, torch.tensor([[0, 3]])).tolist()  # log(1/4) each
[[-1.3862943649291992, -1.3862943649291992]]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) from ``logits`` [B, T, V] via log_softmax in fp32, whatever the input dtype.

    log_softmax subtracts the max and works in log space; ``log(softmax(x))`` instead
    underflows to -inf for unlikely tokens in 16 bits and loses their gradient.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over [B, T] rewards and values; returns (adv, returns).

    The episode ends after the last token (its bootstrap value is 0). Computed in fp32
    (or the inputs' wider dtype): a 16-bit running sum would round every step.
    """
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, values.dtype), torch.float32)
    r, v = rewards.to(dtype), values.detach().to(dtype)
    adv = torch.zeros_like(r)
    last = torch.zeros_like(r[:, 0])
    for t in reversed(range(r.shape[1])):
        next_v = v[:, t + 1] if t + 1 < r.shape[1] else torch.zeros_like(last)
        delta = r[:, t] + gamma * next_v - v[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + v


def whiten(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit variance over all elements (fp32 or wider)."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return (x - x.mean()) / (x.std(unbiased=False) + eps)


def clipped_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (to minimise) and the fraction of tokens clipped.

    A token counts as clipped when the clipped branch is the one taken, i.e. when
    clipping removed its gradient.
    """
    ratio = torch.exp(logp.float() - old_logp.float())
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -torch.minimum(unclipped, clipped).mean()
    frac = (clipped < unclipped).float().mean()
    return loss, frac.detach()


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Half mean squared error, in fp32 whatever the value head's output dtype."""
    return 0.5 * ((values.float() - returns.float()) ** 2).mean()
