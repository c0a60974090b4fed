"""The tiny networks of the PPO agent: a causal transformer (policy, critic) and the reward model.

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


class Block(nn.Module):
    """Pre-norm causal self-attention plus MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    """A causal transformer with ``out_dim`` outputs per position (vocab logits or a value)."""

    def __init__(self, cfg: TaskConfig, out_dim: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, out_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Policy(TinyTransformer):
    """Next-token logits [B, T, vocab]."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(cfg, cfg.vocab)


class Critic(TinyTransformer):
    """A value per position [B, T]: the expected return after emitting that position's token."""

    def __init__(self, cfg: TaskConfig) -> None:
        super().__init__(cfg, 1)

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


def init_weights(module: nn.Module, seed: int) -> None:
    """Deterministic small init (std 0.02, as GPT-2), independent of the global RNG."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()


def random_prompts(batch: int, cfg: TaskConfig, gen: torch.Generator) -> torch.Tensor:
    """Uniform random digit prompts [batch, prompt_len]."""
    return torch.randint(0, cfg.vocab, (batch, cfg.prompt_len), generator=gen)
