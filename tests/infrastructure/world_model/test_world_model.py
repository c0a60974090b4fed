"""The world model's heads, presets, fp32 losses, and the held-out metrics."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from genesis_fp16_infrastructure.world_model.metrics import accuracy, auc, brier, mae
from genesis_fp16_infrastructure.world_model.model import (
    ModelConfig,
    WorldModel,
    world_model_losses,
)


def _targets(n: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    score = torch.rand(n, generator=g)
    success = (score >= 0.7).float()
    outcome = (score >= 0.3).long() + (score >= 0.7).long()
    known = torch.ones(n, dtype=torch.bool)
    return success, score, known, outcome


def test_three_heads_have_the_right_shapes() -> None:
    """One success logit, one score logit and three class logits per attempt."""
    model = WorldModel(ModelConfig.preset("default", in_features=12))
    out = model(torch.randn(5, 12))
    assert out.success_logit.shape == (5,)
    assert out.score_logit.shape == (5,)
    assert out.outcome_logits.shape == (5, 3)


def test_presets_and_overrides() -> None:
    """The large preset is at least 2048 wide; depth and width are configurable; bad names fail."""
    large = ModelConfig.preset("large", in_features=8)
    assert large.hidden >= 2048
    small = ModelConfig.preset("default", in_features=8, hidden=16, depth=3)
    linears = [m for m in WorldModel(small).trunk if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [16, 16, 16]
    assert ModelConfig.from_dict(small.to_dict()) == small
    with pytest.raises(ValueError, match="unknown world-model preset 'huge'"):
        ModelConfig.preset("huge", in_features=8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_losses_are_fp32_under_autocast(dtype: torch.dtype) -> None:
    """Under real CPU autocast the logits are low precision, the losses fp32 and finite."""
    model = WorldModel(ModelConfig.preset("default", in_features=12))
    with torch.autocast("cpu", dtype=dtype):
        out = model(torch.randn(32, 12))
        parts = world_model_losses(out, *_targets(32))
    assert out.outcome_logits.dtype == dtype
    for loss in (parts.total, parts.success, parts.score, parts.outcome):
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
    parts.total.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_score_loss_ignores_unknown_scores() -> None:
    """Records labelled by status alone add nothing to the regression loss."""
    model = WorldModel(ModelConfig.preset("default", in_features=4))
    out = model(torch.randn(6, 4))
    success, score, known, outcome = _targets(6)
    known = torch.tensor([True, True, True, False, False, False])
    a = world_model_losses(out, success, score, known, outcome).score
    score_b = score.clone()
    score_b[3:] = 1.0 - score_b[3:]
    b = world_model_losses(out, success, score_b, known, outcome).score
    assert torch.equal(a, b)
    score_b[0] = 1.0 - score_b[0]
    assert not torch.equal(a, world_model_losses(out, success, score_b, known, outcome).score)


def test_auc_matches_pair_counting_with_ties() -> None:
    """AUC equals the share of correctly ordered positive/negative pairs, ties counting half."""
    scores = torch.tensor([0.1, 0.4, 0.4, 0.8, 0.3, 0.4, 0.9, 0.2])
    labels = torch.tensor([0, 1, 0, 1, 0, 1, 1, 0])
    pairs = [
        1.0 if sp > sn else 0.5 if sp == sn else 0.0
        for (sp, lp), (sn, ln) in itertools.product(zip(scores, labels, strict=True), repeat=2)
        if lp == 1 and ln == 0
    ]
    assert auc(scores, labels) == pytest.approx(sum(pairs) / len(pairs))
    assert auc(torch.tensor([0.2, 0.8]), torch.tensor([1, 0])) == 0.0
    assert math.isnan(auc(torch.tensor([0.2, 0.8]), torch.tensor([1, 1])))


def test_brier_mae_accuracy() -> None:
    """Brier, masked MAE and arg-max accuracy give the hand-computed values."""
    assert brier(torch.tensor([0.9, 0.2]), torch.tensor([1.0, 0.0])) == pytest.approx(0.025)
    mask = torch.tensor([True, False])
    assert mae(torch.tensor([0.5, 0.0]), torch.tensor([0.25, 1.0]), mask) == pytest.approx(0.25)
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert accuracy(logits, torch.tensor([0, 1])) == 0.5
