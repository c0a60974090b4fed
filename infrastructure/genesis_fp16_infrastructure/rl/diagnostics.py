"""Precision diagnostics for RL training: trainer-rollout mismatch, resolution, drift.

Every function here is pure torch: tensors in, plain floats out. Inputs are upcast to
float64 before any reduction, so a diagnostic never adds rounding of its own to the
rounding it measures. Masks are boolean (or 0/1) tensors of the same shape as the
per-token inputs; a token outside the mask never counts.

    >>> import torch
    >>> ulp(torch.tensor([1.0]), torch.bfloat16).item()
    0.0078125
"""

from __future__ import annotations

import math

import torch

# Explicit mantissa widths (stored bits) and exponent ranges, so that ulp() does not
# depend on torch.finfo quirks and reads like the IEEE definition.
_FORMATS: dict[torch.dtype, tuple[int, int]] = {
    # dtype: (mantissa bits, minimum normal exponent)
    torch.float64: (52, -1022),
    torch.float32: (23, -126),
    torch.bfloat16: (7, -126),
    torch.float16: (10, -14),
}
FP16_MAX = 65504.0


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The gap between |x| and the next larger number representable in ``dtype`` (float64).

    For a normal number with exponent e it is 2**(e - mantissa_bits); below the
    smallest normal it is the subnormal spacing.

        >>> ulp(torch.tensor([3.0, 1e-9]), torch.float16).tolist()
        [0.001953125, 5.960464477539063e-08]
    """
    if dtype not in _FORMATS:
        raise ValueError(f"ulp: dtype {dtype} is not one of {sorted(map(str, _FORMATS))}")
    mantissa, emin = _FORMATS[dtype]
    mag = x.detach().to(torch.float64).abs()
    # frexp gives mag = m * 2**e with m in [0.5, 1): the IEEE exponent is e - 1.
    _, e = torch.frexp(mag)
    exponent = torch.clamp(e.to(torch.float64) - 1, min=emin)
    return torch.exp2(exponent - mantissa)


def _flat(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    flat = x.detach().to(torch.float64)
    if mask is None:
        return flat.reshape(-1)
    return flat[mask.to(torch.bool)]


def k1_kl(log_ratio: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean of the k1 estimator ``-x`` for samples of ``x = log q/p`` drawn from p."""
    x = _flat(log_ratio, mask)
    return float(-x.mean()) if x.numel() else 0.0


def k3_terms(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator ``expm1(x) - x`` of KL(p||q), ``x = log q/p``, in x's dtype.

    expm1 keeps the small-x regime exact where ``exp(x) - 1`` cancels: at x = 1e-4 in
    fp32, ``exp(x) - 1 - x`` has a relative error near 1 while expm1's is ~1e-7. Pass an
    fp32 tensor for the fp32 KL; a bf16 tensor computes, and rounds, in bf16.
    """
    return torch.expm1(log_ratio) - log_ratio


def k3_kl(log_ratio: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean k3 KL over the mask, evaluated in float64 (the reference value)."""
    x = _flat(log_ratio, mask)
    return float((torch.expm1(x) - x).mean()) if x.numel() else 0.0


def mismatch_metrics(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, clip_eps: float = 0.2
) -> dict[str, float]:
    """How far the trainer's log-probs of the sampled tokens are from the rollout's.

    Both inputs are the log-probabilities of the *same* sampled tokens, one from the
    training forward before any update, one from the rollout engine. The tokens were
    drawn from the rollout distribution, so ``w = p_train / p_rollout`` is the
    importance weight and:

    - ``k1``/``k3``: estimators of KL(rollout || trainer),
    - ``abs_dlogp_mean``/``abs_dlogp_max``: of |log p_train - log p_rollout|,
    - ``prob_pearson``: Pearson correlation of the two token probabilities,
    - ``chi2``: E_rollout[(w - 1)^2], the chi-square divergence of the sampled tokens,
    - ``ess``: (sum w)^2 / (N sum w^2), the normalised effective sample size (1 = none lost),
    - ``phantom_clip_frac``: fraction of tokens with |w - 1| > clip_eps. The weights are
      taken before any optimizer step, so the policy has not changed: any clipping PPO
      does on these tokens is caused by precision alone.
    """
    t = _flat(trainer_logp)
    r = _flat(rollout_logp)
    if t.numel() == 0:
        raise ValueError("mismatch_metrics: no tokens")
    d = t - r
    w = torch.exp(d)
    pt, pr = torch.exp(t), torch.exp(r)
    return {
        "k1": float((-d).mean()),  # x = log p_train/p_rollout under rollout samples: k1 = -x
        "k3": float((torch.expm1(d) - d).mean()),
        "abs_dlogp_mean": float(d.abs().mean()),
        "abs_dlogp_max": float(d.abs().max()),
        "prob_pearson": pearson(pt, pr),
        "chi2": float(((w - 1.0) ** 2).mean()),
        "ess": float(w.sum() ** 2 / (w.numel() * (w**2).sum())),
        "phantom_clip_frac": float(((w - 1.0).abs() > clip_eps).to(torch.float64).mean()),
    }


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two flat samples; 1.0 when both are constant and equal."""
    a = a.to(torch.float64).reshape(-1)
    b = b.to(torch.float64).reshape(-1)
    da, db = a - a.mean(), b - b.mean()
    denom = torch.sqrt((da**2).sum() * (db**2).sum())
    if float(denom) == 0.0:
        return 1.0 if torch.equal(a, b) else 0.0
    return float((da * db).sum() / denom)


def below_resolution_frac(log_ratio: torch.Tensor, logp: torch.Tensor, dtype: torch.dtype) -> float:
    """Fraction of log-ratios smaller than one ulp of |log p| in ``dtype``.

    A log-ratio ``log p - log q`` formed from two log-probs of magnitude |log p| in a
    dtype cannot resolve a difference below ulp(|log p|): such ratios are rounding,
    not signal. Unlike a fixed threshold (the seed's ``|x| < 1e-6``), this scales with
    the magnitude and the dtype.
    """
    x = _flat(log_ratio)
    ref = _flat(logp)
    if x.numel() == 0:
        return 0.0
    return float((x.abs() < ulp(ref, dtype)).to(torch.float64).mean())


def fixed_threshold_frac(log_ratio: torch.Tensor, threshold: float = 1e-6) -> float:
    """Fraction with |x| < threshold: the seed's ``log_ratio_near_zero_frac``, for contrast."""
    x = _flat(log_ratio)
    return float((x.abs() < threshold).to(torch.float64).mean()) if x.numel() else 0.0


def reward_resolution(rewards: torch.Tensor, dtype: torch.dtype) -> dict[str, float]:
    """ulp(|mean reward|) / std(reward) per group, and the number of dead groups.

    ``rewards`` is [groups, samples_per_group] (e.g. several completions per prompt).
    A ratio near or above 1 means the dtype cannot tell the group's rewards apart. A
    group whose rewards are all tied is dead: its advantages are zero and it teaches
    nothing; its ratio is infinite, so it is counted, not averaged.
    """
    if rewards.dim() != 2:
        shape = tuple(rewards.shape)
        raise ValueError(f"reward_resolution: rewards must be [groups, n], got {shape}")
    r = rewards.detach().to(torch.float64)
    std = r.std(dim=1, unbiased=False)
    step = ulp(r.mean(dim=1), dtype)
    dead = std == 0
    live = (step / std)[~dead]
    return {
        "reward_resolution_median": float(live.median()) if live.numel() else math.inf,
        "reward_resolution_max": float(live.max()) if live.numel() else math.inf,
        "reward_dead_groups": float(dead.sum()),
        "reward_groups": float(r.shape[0]),
    }


def value_quantization(
    values: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype
) -> dict[str, float]:
    """Quantization step of the value predictions against the size of their error.

    ``value_quant_ratio`` = median ulp(|V|) in ``dtype`` / median |V - target|: above ~1
    the value head cannot represent the corrections it is asked to learn.
    ``value_fp16_margin_bits`` = log2(65504 / max|V|): how many doublings of the value
    scale fit before fp16 overflows (negative: already overflowed).
    """
    v = _flat(values)
    tgt = _flat(targets)
    err = (v - tgt).abs().median()
    step = ulp(v, dtype).median()
    vmax = float(v.abs().max()) if v.numel() else 0.0
    return {
        "value_quant_ratio": float(step / err) if float(err) > 0 else math.inf,
        "value_abs_median": float(v.abs().median()),
        "value_fp16_margin_bits": math.log2(FP16_MAX / vmax) if vmax > 0 else math.inf,
    }


def sequence_error_growth(low_logp: torch.Tensor, ref_logp: torch.Tensor) -> dict[str, float]:
    """How the summed log-prob error of a sequence grows with its length T.

    ``low_logp`` and ``ref_logp`` are [batch, T] per-token log-probs of the same tokens
    in a low precision and in fp32. With e_t their difference and S_T = sum_{t<=T} e_t,
    ``slope_per_1k`` is the least-squares slope of E|S_T| against T, per 1000 tokens,
    and ``growth_exponent`` is b in E|S_T| ~ T**b, fitted on log-log: b ~ 0.5 is a random
    walk (errors cancel), b ~ 1 a bias (errors pile up).
    """
    e = low_logp.detach().to(torch.float64) - ref_logp.detach().to(torch.float64)
    s = e.cumsum(dim=1).abs().mean(dim=0)
    t = torch.arange(1, s.numel() + 1, dtype=torch.float64, device=s.device)
    slope = _lstsq_slope(t, s)
    pos = s > 0
    b = _lstsq_slope(t[pos].log(), s[pos].log()) if int(pos.sum()) >= 2 else math.nan
    return {
        "slope_per_1k": slope * 1000.0,
        "growth_exponent": b,
        "final_abs_err": float(s[-1]) if s.numel() else 0.0,
    }


def _lstsq_slope(x: torch.Tensor, y: torch.Tensor) -> float:
    if x.numel() < 2:
        return math.nan
    dx = x - x.mean()
    denom = float((dx**2).sum())
    return float((dx * (y - y.mean())).sum()) / denom if denom > 0 else math.nan
