"""The RL precision diagnostics against float64 references on hand-made inputs."""

from __future__ import annotations

import math

import pytest
import torch

from genesis_fp16_infrastructure.rl import diagnostics as dg

F64 = torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ulp_matches_nextafter(dtype: torch.dtype) -> None:
    """ulp() equals the gap to the next representable number (nextafter) in fp32/fp64."""
    x = torch.tensor([1.0, 3.0, 0.1, 1000.5, 2.0**-130], dtype=dtype)
    gap = torch.nextafter(x, torch.full_like(x, math.inf)) - x
    assert torch.equal(dg.ulp(x, dtype), gap.to(F64))


def test_ulp_of_16_bit_formats_by_hand() -> None:
    """bf16 has 7 stored mantissa bits and fp16 10: ulp(1) = 2^-7 and 2^-10, ulp(3) doubles."""
    x = torch.tensor([1.0, 3.0])
    assert dg.ulp(x, torch.bfloat16).tolist() == [2.0**-7, 2.0**-6]
    assert dg.ulp(x, torch.float16).tolist() == [2.0**-10, 2.0**-9]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ulp_is_the_rounding_step_of_real_16_bit_arithmetic(dtype: torch.dtype) -> None:
    """Adding one ulp changes a 16-bit number; adding a quarter ulp rounds back to it."""
    x = torch.tensor([1.0, 3.0, 100.0, 0.3]).to(dtype).to(F64)
    step = dg.ulp(x, dtype)
    assert torch.all((x + step).to(dtype).to(F64) == x + step)
    assert torch.all((x + step / 4).to(dtype).to(F64) == x)


def test_k1_and_k3_by_hand() -> None:
    """k1 = -mean(x), k3 = mean(expm1(x) - x); the mask drops tokens."""
    x = torch.tensor([0.0, math.log(2.0), 5.0])
    mask = torch.tensor([True, True, False])
    assert dg.k1_kl(x, mask) == pytest.approx(-math.log(2.0) / 2)
    assert dg.k3_kl(x, mask) == pytest.approx((1.0 - math.log(2.0)) / 2)


def test_k3_in_fp32_uses_expm1_and_stays_accurate_for_tiny_ratios() -> None:
    """In fp32, expm1(x) - x keeps ~1e-3 relative error at x = 1e-3 where exp(x) - 1 - x fails."""
    x = torch.tensor([1e-3, -2e-3, 3e-4], dtype=torch.float32)
    exact = torch.expm1(x.to(F64)) - x.to(F64)
    ours = dg.k3_terms(x).to(F64)
    naive = (torch.exp(x) - 1 - x).to(F64)
    assert torch.all((ours - exact).abs() / exact < 1e-3)
    assert torch.any((naive - exact).abs() / exact > 1e-2)
    assert dg.k3_terms(x.bfloat16()).dtype == torch.bfloat16


def test_mismatch_metrics_by_hand() -> None:
    """Trainer probs (0.5, 0.25, 0.1) vs rollout (0.5, 0.5, 0.1): every metric by hand."""
    t = torch.tensor([0.5, 0.25, 0.1]).log()
    r = torch.tensor([0.5, 0.5, 0.1]).log()
    m = dg.mismatch_metrics(t, r, clip_eps=0.2)
    ln2 = math.log(2.0)
    w = [1.0, 0.5, 1.0]
    assert m["k1"] == pytest.approx(ln2 / 3, rel=1e-6)
    assert m["k3"] == pytest.approx((-0.5 + ln2) / 3, rel=1e-6)
    assert m["abs_dlogp_mean"] == pytest.approx(ln2 / 3, rel=1e-6)
    assert m["abs_dlogp_max"] == pytest.approx(ln2, rel=1e-6)
    assert m["chi2"] == pytest.approx(0.25 / 3, rel=1e-6)
    assert m["ess"] == pytest.approx(sum(w) ** 2 / (3 * sum(v * v for v in w)), rel=1e-6)
    assert m["phantom_clip_frac"] == pytest.approx(1 / 3)
    ref = torch.corrcoef(torch.stack([t.exp(), r.exp()]).to(F64))[0, 1]
    assert m["prob_pearson"] == pytest.approx(float(ref), rel=1e-6)


def test_identical_logps_show_no_mismatch() -> None:
    """Equal inputs: zero KL and chi2, ESS 1, no phantom clipping, correlation 1."""
    x = torch.tensor([-0.1, -2.0, -0.7])
    m = dg.mismatch_metrics(x, x.clone())
    assert (m["k1"], m["k3"], m["chi2"], m["phantom_clip_frac"]) == (0.0, 0.0, 0.0, 0.0)
    assert m["ess"] == pytest.approx(1.0) and m["prob_pearson"] == pytest.approx(1.0)


def test_below_resolution_scales_with_dtype_while_a_fixed_threshold_counts_only_zeros() -> None:
    """At |log p| = 2 in bf16 (ulp 2^-6), 0.01 is below resolution; |x| < 1e-6 sees only 0."""
    x = torch.tensor([0.0, 0.01, 0.02, -0.01])
    logp = torch.full_like(x, -2.0)
    assert dg.below_resolution_frac(x, logp, torch.bfloat16) == 0.75
    assert dg.below_resolution_frac(x, logp, torch.float32) == 0.25
    assert dg.fixed_threshold_frac(x, 1e-6) == 0.25


def test_reward_resolution_by_hand() -> None:
    """Group [1,1,1] is dead; group [1,1.5,2] has ulp_bf16(1.5)/std = 2^-7/0.40825."""
    r = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.5, 2.0]])
    out = dg.reward_resolution(r, torch.bfloat16)
    std = math.sqrt(0.5 / 3)
    assert out["reward_dead_groups"] == 1.0
    assert out["reward_resolution_median"] == pytest.approx(2.0**-7 / std)
    with pytest.raises(ValueError, match=r"\[groups, n\]"):
        dg.reward_resolution(r.reshape(-1), torch.bfloat16)


def test_value_quantization_by_hand() -> None:
    """|V| ~ 100 in fp16: ulp 2^-4, median error 0.5, overflow margin log2(65504/100.5)."""
    v = torch.tensor([100.0, 100.5, 99.0])
    tgt = torch.tensor([101.0, 100.0, 99.25])
    out = dg.value_quantization(v, tgt, torch.float16)
    assert out["value_quant_ratio"] == pytest.approx(2.0**-4 / 0.5)
    assert out["value_fp16_margin_bits"] == pytest.approx(math.log2(65504 / 100.5))


def test_sequence_error_growth_recovers_bias_and_random_walk_exponents() -> None:
    """A constant per-token error gives b = 1 and slope c*1000; S_T = sqrt(T) gives b = 0.5."""
    c = 1e-3
    zero = torch.zeros(4, 64, dtype=F64)
    bias = dg.sequence_error_growth(zero + c, zero)
    assert bias["growth_exponent"] == pytest.approx(1.0)
    assert bias["slope_per_1k"] == pytest.approx(c * 1000)
    t = torch.arange(1, 65, dtype=F64)
    steps = (t.sqrt() - (t - 1).sqrt()).expand(4, 64)
    walk = dg.sequence_error_growth(steps, zero)
    assert walk["growth_exponent"] == pytest.approx(0.5)
    assert walk["final_abs_err"] == pytest.approx(8.0)
