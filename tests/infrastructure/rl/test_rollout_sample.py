"""A rollout whose sampling copy gives non-finite probabilities samples on: those rows'
log-probs are NaN (a non-finite step for the guard), the finite rows' draws unchanged."""

from __future__ import annotations

import torch
from torch import nn

from genesis_fp16_infrastructure.rl.rollout import sample

VOCAB = 5


class _Logits(nn.Module):
    """Next-token logits; rows whose first token is 0 get NaN (the sampler feeds it the
    prompts, then one new token a step: the rows' first tokens are kept in its cache)."""

    blocks = (None,)

    def extend(self, tokens: torch.Tensor, caches: list[list[torch.Tensor]]) -> torch.Tensor:
        if not caches[0]:
            caches[0].append(tokens[:, :1] == 0)
        logits = torch.arange(VOCAB, dtype=torch.float32).expand(*tokens.shape, VOCAB).clone()
        poisoned = caches[0][0].unsqueeze(-1).expand_as(logits)
        return torch.where(poisoned, torch.nan, logits)


def test_non_finite_rows_sample_with_a_nan_log_prob_and_finite_rows_as_before() -> None:
    """Rows 0 and 2 start with token 0 (NaN logits): no exception, NaN log-probs there;
    rows 1 and 3 draw exactly what torch.multinomial draws on their own probabilities."""
    prompts = torch.tensor([[0], [1], [0], [2]])
    seqs, logps = sample(_Logits(), prompts, 3, torch.Generator().manual_seed(7))
    assert seqs.shape == (4, 4) and logps.shape == (4, 3)
    assert torch.isnan(logps[[0, 2]]).all()
    assert torch.isfinite(logps[[1, 3]]).all()
    # The same draws as the unguarded sampler: each step's generator state is consumed the
    # same way (a full batch of rows), and finite rows keep their probabilities.
    generator = torch.Generator().manual_seed(7)
    probs = torch.softmax(torch.arange(VOCAB, dtype=torch.float32), -1).expand(4, VOCAB)
    for step in range(3):
        expected = torch.multinomial(probs, 1, generator=generator)[:, 0]
        assert torch.equal(seqs[[1, 3], 1 + step], expected[[1, 3]])
