"""Grading, the recommendation rule, and the measures on hand-made tensors."""

from __future__ import annotations

import math

import torch

from genesis_fp16_infrastructure.probe.measures import (
    Measures,
    cosine,
    flushed_fraction,
    parameter_drift,
    sign_flip_fraction,
    worst_layer_cosine,
)
from genesis_fp16_infrastructure.probe.verdict import (
    Candidate,
    Thresholds,
    grade_measures,
    recommend,
)


def _cand(name: str, rank: int, overall: str = "green", seconds: float = 1.0) -> Candidate:
    problems = () if overall == "green" else (f"{overall}: something in 'head'",)
    return Candidate(name, rank, overall, seconds, problems, ("head",) if problems else ())


def test_recommend_takes_the_cheapest_green_variant_not_slower_than_fp32() -> None:
    """pure (red) and fp16 (slower) are passed over with reasons; bf16 autocast is chosen."""
    choice = recommend(
        [
            _cand("bf16_autocast", 1, seconds=0.5),
            _cand("bf16_pure", 0, "red", 0.4),
            _cand("fp16_autocast", 1, seconds=20.0),
            _cand("bf16_autocast+fp32[loss]", 2, seconds=0.6),
        ],
        fp32_seconds=1.0,
    )
    assert choice.variant == "bf16_autocast"
    assert set(choice.reasons) == {"bf16_pure"}  # fp16 sorts after bf16 by time
    assert choice.blocking_modules["bf16_pure"] == ("head",)


def test_recommend_falls_back_to_fp32_and_says_why_for_each_variant() -> None:
    """When every variant is slower or not green, fp32 is recommended and all are explained."""
    choice = recommend(
        [_cand("fp16_autocast", 1, seconds=30.0), _cand("bf16_pure", 0, "amber", 0.1)],
        fp32_seconds=1.0,
    )
    assert choice.variant == "fp32"
    assert "slower than fp32 on this device (30.0x per step)" in choice.reasons["fp16_autocast"]
    assert choice.reasons["bf16_pure"] == ("amber: something in 'head'",)


def test_loss_tolerance_follows_torch_testing_per_dtype() -> None:
    """A 5e-3 loss error is green for bf16 (rtol 1.6e-2) and amber for fp16 (rtol 1e-3)."""
    m = Measures(loss_rel_err=5e-3)
    assert grade_measures(m, "bf16", Thresholds())[0]["loss"] == "green"
    assert grade_measures(m, "fp16", Thresholds())[0]["loss"] == "amber"
    assert grade_measures(Measures(loss_rel_err=math.inf), "fp16", Thresholds())[0]["loss"] == "red"


def test_grades_name_the_module_behind_each_problem() -> None:
    """Red headroom names its module; a low layer cosine names the layer's module."""
    m = Measures(
        activation_max=1e5,
        activation_module="net.amp",
        worst_layer_cosine=0.5,
        worst_cosine_layer="net.head.weight",
    )
    colours, problems, modules = grade_measures(m, "fp16", Thresholds())
    assert colours["headroom"] == "red" and colours["layer_cosine"] == "red"
    assert colours["drift"] == "n/a"
    assert modules == ("net.head", "net.amp")
    assert any("'net.amp'" in p and "65504" in p for p in problems)


def test_measures_on_known_tensors() -> None:
    """Flush, sign-flip, cosine and drift fractions come out as counted by hand."""
    ref = {"a": torch.tensor([1.0, -1.0, 2.0, 0.0]), "b": torch.tensor([3.0])}
    got = {"a": torch.tensor([0.0, 1.0, 2.0, 5.0]), "b": torch.tensor([3.0])}
    assert flushed_fraction(got, ref) == 1 / 4  # 4 non-zero in ref, one became zero
    assert sign_flip_fraction(got, ref) == 1 / 3  # 3 non-zero in both, one flipped
    assert worst_layer_cosine(got, ref)[0] == "a"
    assert cosine(torch.tensor([float("inf")]), torch.tensor([1.0])) == -1.0
    start = {"w": torch.zeros(2)}
    assert (
        parameter_drift({"w": torch.tensor([1.0, 1.0])}, {"w": torch.tensor([1.0, 0.0])}, start)
        == 1.0
    )
    assert math.isnan(parameter_drift(start, start, start))
