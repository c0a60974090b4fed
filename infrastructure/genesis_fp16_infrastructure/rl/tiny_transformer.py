"""A tiny causal transformer, small enough to train PPO on a CPU: a policy (vocabulary
logits per position) or a critic (one value per position), by its ``out_dim``.

    >>> import torch
    >>> model = TinyTransformer(vocab=10, seq_len=12, d_model=32, n_heads=2, n_layers=1, out_dim=10)
    >>> init_weights(model, seed=0)
    >>> tuple(model(torch.zeros(3, 12, dtype=torch.long)).shape)
    (3, 12, 10)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``cache``: the keys and values of the positions before ``x`` (one new position a
        call once it holds any), extended by ``x``'s."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        if cache is not None:
            cache[:] = [k, v]
        att = F.scaled_dot_product_attention(q, k, v, is_causal=t == k.shape[2])
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    """A causal transformer with ``out_dim`` outputs per position (vocab logits or a value)."""

    def __init__(
        self, vocab: int, seq_len: int, d_model: int, n_heads: int, n_layers: int, out_dim: int
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, out_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.extend(tokens, [None] * len(self.blocks))

    def extend(self, tokens: torch.Tensor, caches: list[Any]) -> torch.Tensor:
        """``forward`` of ``tokens`` after the positions whose keys and values ``caches``
        (a list per block, empty at first; None: keep none) holds: generation feeds one
        new token a step instead of the whole sequence (4-5x less work at 12 positions)."""
        start = caches[0][0].shape[2] if caches[0] else 0
        x = self.tok(tokens) + self.pos(
            torch.arange(start, start + tokens.shape[1], device=tokens.device)
        )
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache)
        return self.head(self.ln(x))


def init_weights(module: nn.Module, seed: int) -> None:
    """Deterministic small init (std 0.02, as GPT-2), independent of the global RNG."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
