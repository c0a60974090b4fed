"""The networks of the PPO agent: the policy and critic (the library's tiny causal
transformer, sized by the task) and the reward model of the task's rule.

The task: a prompt of random digits, then ``gen_len`` generated digits; each generated
digit should be its predecessor plus one (mod 10). The reward model scores that rule
with partial credit for near misses, as a fixed (not learned) bilinear network, so that
running it in bf16 really rounds the reward like a low-precision reward model would.

    >>> import torch
    >>> cfg = TaskConfig()
    >>> rm = RewardModel(cfg)
    >>> round(float(rm(torch.tensor([[3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4]]))[0]), 3)
    1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from genesis_fp16_infrastructure.rl.tiny_transformer import TinyTransformer


@dataclass(frozen=True)
class TaskConfig:
    """Sizes of the synthetic task and of the networks (all small enough for a CPU)."""

    vocab: int = 10
    prompt_len: int = 4
    gen_len: int = 8
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 1
    reward_sigma: float = 1.0  # partial-credit width, in digits
    reward_scale: float = 1.0
    reward_offset: float = 0.0

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.gen_len


def _sizes(cfg: TaskConfig) -> tuple[int, int, int, int, int]:
    return cfg.vocab, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers


class Policy(TinyTransformer):
    """Next-token logits [B, T, vocab]."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(*_sizes(cfg), out_dim=cfg.vocab)


class Critic(TinyTransformer):
    """A value per position [B, T]: the expected return after emitting that position's token."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(*_sizes(cfg), out_dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return super().forward(tokens).squeeze(-1)


class RewardModel(nn.Module):
    """Scores a full sequence [B, prompt_len + gen_len] -> [B], in its parameters' dtype.

    ``credit`` holds, for each previous digit i, the credit exp(-d^2 / 2 sigma^2) of each
    next digit j, where d is the circular distance of j from i + 1. The score is the mean
    credit over generated positions, mapped to ``offset + scale * score``.
    """

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__()
        self.cfg = cfg
        v = cfg.vocab
        i = torch.arange(v).unsqueeze(1)
        j = torch.arange(v).unsqueeze(0)
        raw = (j - (i + 1)) % v
        dist = torch.minimum(raw, v - raw).double()
        credit = torch.exp(-(dist**2) / (2 * cfg.reward_sigma**2))
        self.credit = nn.Linear(v, v, bias=False)
        self.affine = nn.Linear(1, 1)
        with torch.no_grad():
            self.credit.weight.copy_(credit.T.float())  # Linear computes x @ W.T
            self.affine.weight.fill_(cfg.reward_scale)
            self.affine.bias.fill_(cfg.reward_offset)
        self.requires_grad_(False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        dtype = self.credit.weight.dtype
        onehot = F.one_hot(tokens, self.cfg.vocab).to(dtype)
        p = self.cfg.prompt_len
        expected = self.credit(onehot[:, p - 1 : -1])  # credit row of each previous digit
        score = (expected * onehot[:, p:]).sum(-1).mean(-1, keepdim=True)
        return self.affine(score).squeeze(-1)


def random_prompts(batch: int, cfg: TaskConfig, gen: torch.Generator) -> torch.Tensor:
    """Uniform random digit prompts [batch, prompt_len]."""
    return torch.randint(0, cfg.vocab, (batch, cfg.prompt_len), generator=gen)
