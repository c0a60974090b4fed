"""A PPO rollout of a causal language model: sample with an inference copy of the policy,
score against a frozen reference and reward model, shape the reward with the KL, GAE;
and the :func:`report` of one rollout, what each component's dtype did to it.

The frozen models (:class:`Frozen`) compute in their *weights'* dtype, autocast off, as
an inference engine or a low-precision reward model would, and each low-precision one
has an fp32 twin that measures its rounding. The trained policy's log-probs and the
critic's values come from the caller, computed in their own autocast dtypes. The KL's
log-ratio ``log ref - log policy`` and k3 = expm1(x) - x are computed in the KL dtype.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.rl.diagnostics import (
    below_resolution_frac,
    fixed_threshold_frac,
    k1_kl,
    k3_kl,
    k3_terms,
    mismatch_metrics,
    reward_resolution,
    sequence_error_growth,
    value_quantization,
)
from genesis_fp16_infrastructure.rl.ppo_math import gae, token_logprobs, whiten
from genesis_fp16_infrastructure.rl.tiny_transformer import TinyTransformer
from genesis_fp16_infrastructure.training.precision.precision import autocast_to


def frozen_copy(module: TinyTransformer, dtype: torch.dtype) -> TinyTransformer:
    """A copy of ``module`` with its weights in ``dtype``, in eval mode, without grads."""
    return copy.deepcopy(module).to(dtype).requires_grad_(False).eval()


def gen_logp(model: nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probs of the generated tokens, from the positions that predict them."""
    return token_logprobs(model(seqs)[:, prompt_len - 1 : -1], seqs[:, prompt_len:])


@torch.no_grad()
def sample(
    model: TinyTransformer, prompts: torch.Tensor, gen_len: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``gen_len`` tokens after each row of ``prompts``, drawn from ``model``'s next-token
    probabilities with ``generator`` (on the prompts' device: sampling draws there), or
    each row's most likely token where ``generator`` is None: (sequences, the tokens'
    log-probs in float32). The model computes in its weights' dtype, autocast off, and
    keeps its keys and values: one new token a step, not the whole sequence.

    A row whose probabilities are not finite (weights that overflowed the rollout's
    dtype) draws from a uniform stand-in and its log-prob is NaN: the rollout's loss
    is then not finite, a non-finite step the precision guard counts, where
    ``torch.multinomial`` would raise out of the run. No host read decides it."""
    caches: list[Any] = [[] for _ in model.blocks]
    seqs, nxt, logps = prompts, prompts, []
    with autocast_to(torch.float32, prompts.device.type):  # off, inside a run's too
        for _ in range(gen_len):
            logits = model.extend(nxt, caches)[:, -1].float()
            logp_all = torch.log_softmax(logits, dim=-1)
            probs = logp_all.exp()
            finite = torch.isfinite(probs).all(dim=-1, keepdim=True)
            if generator is None:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                drawn = torch.where(finite, probs, torch.ones_like(probs))
                nxt = torch.multinomial(drawn, 1, generator=generator)
            logp = logp_all.gather(-1, nxt)
            logps.append(torch.where(finite, logp, torch.full_like(logp, torch.nan)))
            seqs = torch.cat([seqs, nxt], dim=1)
    return seqs, torch.cat(logps, dim=1)


@dataclass(frozen=True)
class Frozen:
    """The frozen models of a rollout: the sampling copy of the policy, the reference and
    the reward model in their dtypes, and the fp32 twins of the last two."""

    rollout: TinyTransformer
    reference: TinyTransformer
    reference_fp32: TinyTransformer
    reward: nn.Module
    reward_fp32: nn.Module

    def sync_rollout(self, policy: nn.Module) -> None:
        """Copy the fp32 master weights into the rollout copy, rounding to its dtype."""
        with torch.no_grad():
            for dst, src in zip(self.rollout.parameters(), policy.parameters(), strict=True):
                dst.copy_(src)

    @torch.no_grad()
    def rewards(
        self, prompts: torch.Tensor, gen_len: int, generator: torch.Generator
    ) -> dict[str, float]:
        """The exact (fp32) mean reward of completions the rollout copy samples for
        ``prompts`` (``reward``), and of its greedy ones (``reward_greedy``)."""
        seqs, _ = sample(self.rollout, prompts, gen_len, generator)
        greedy, _ = sample(self.rollout, prompts, gen_len, None)
        with autocast_to(torch.float32, prompts.device.type):  # off, inside a run's too
            return {
                "reward": float(self.reward_fp32(seqs).mean()),
                "reward_greedy": float(self.reward_fp32(greedy).mean()),
            }


@dataclass(frozen=True)
class Shaping:
    """How rewards are shaped and advantages computed: the KL penalty's weight and dtype,
    GAE's discount and lambda."""

    kl_coef: float
    kl_dtype: torch.dtype
    gamma: float = 1.0
    lam: float = 0.95


@dataclass(frozen=True)
class Rollout:
    """One iteration's batch and what its report needs (all on the run's device)."""

    seqs: torch.Tensor
    rollout_logp: torch.Tensor
    trainer_logp: torch.Tensor
    ref_logp: torch.Tensor
    ref_fp32_logp: torch.Tensor
    log_ratio: torch.Tensor
    k3: torch.Tensor
    values: torch.Tensor
    returns: torch.Tensor
    adv: torch.Tensor
    score: torch.Tensor
    true_score: torch.Tensor
    groups: int


@torch.no_grad()
def score(
    frozen: Frozen,
    sampled: tuple[torch.Tensor, torch.Tensor],
    trainer_logp: torch.Tensor,
    values: torch.Tensor,
    groups: int,
    shaping: Shaping,
) -> Rollout:
    """Score ``sampled`` (sequences and rollout log-probs, from :func:`sample`) in
    ``groups`` groups of completions: the reference's and the reward model's verdicts,
    the KL-shaped reward, the whitened GAE advantages and the returns."""
    seqs, rollout_logp = sampled
    prompt_len = seqs.shape[1] - trainer_logp.shape[1]
    with autocast_to(torch.float32, seqs.device.type):  # the frozen models: their dtypes
        ref_logp = gen_logp(frozen.reference, seqs, prompt_len)
        ref_fp32_logp = gen_logp(frozen.reference_fp32, seqs, prompt_len)
        reward = frozen.reward(seqs)
        true_score = frozen.reward_fp32(seqs).double()
    log_ratio = ref_logp.to(shaping.kl_dtype) - trainer_logp.to(shaping.kl_dtype)  # log ref/pi
    k3 = k3_terms(log_ratio)
    rewards = -shaping.kl_coef * k3.float()
    rewards[:, -1] += reward.float()
    adv, returns = gae(rewards, values, shaping.gamma, shaping.lam)
    return Rollout(
        seqs, rollout_logp, trainer_logp, ref_logp, ref_fp32_logp, log_ratio, k3,
        values, returns, whiten(adv), reward, true_score, groups,
    )  # fmt: skip


def report(r: Rollout, dtypes: Mapping[str, torch.dtype], clip_eps: float) -> dict[str, float]:
    """What each component's dtype did to this rollout, as plain floats: the names the
    daemon exports as ``genesis_fp16_rl_*`` gauges. ``dtypes`` holds the ``kl``,
    ``rollout``, ``reward`` and ``value`` dtypes (the trainer's is the policy's)."""
    out = {f"mismatch_{k}": v for k, v in mismatch_metrics(
        r.trainer_logp, r.rollout_logp, clip_eps=clip_eps).items()}  # fmt: skip
    exact_x = r.ref_fp32_logp.double() - r.trainer_logp.double()
    out["kl_k1"] = k1_kl(r.log_ratio)
    out["kl_k3"] = float(r.k3.double().mean())
    out["kl_k3_exact"] = k3_kl(exact_x)
    out["kl_k3_abs_error"] = abs(out["kl_k3"] - out["kl_k3_exact"])
    out["kl_log_ratio_below_ulp_frac"] = below_resolution_frac(
        r.log_ratio, r.trainer_logp, dtypes["kl"]
    )
    out["kl_log_ratio_below_1e6_frac"] = fixed_threshold_frac(r.log_ratio, 1e-6)
    out["kl_log_ratio_zero_frac"] = float((r.log_ratio == 0).double().mean())
    out["mismatch_log_ratio_below_ulp_frac"] = below_resolution_frac(
        r.trainer_logp - r.rollout_logp, r.trainer_logp, dtypes["rollout"]
    )
    out.update(reward_resolution(r.score.view(r.groups, -1), dtypes["reward"]))
    out["reward_true_dead_groups"] = reward_resolution(
        r.true_score.view(r.groups, -1), torch.float64
    )["reward_dead_groups"]
    out.update(value_quantization(r.values, r.returns, dtypes["value"]))
    ref_err = sequence_error_growth(r.ref_logp, r.ref_fp32_logp)
    mis_err = sequence_error_growth(r.trainer_logp, r.rollout_logp)
    for name, err in (("ref", ref_err), ("mismatch", mis_err)):
        out[f"{name}_seq_err_slope_per_1k"] = err["slope_per_1k"]
        out[f"{name}_seq_err_growth_exponent"] = err["growth_exponent"]
    out["ref_seq_err_final"] = ref_err["final_abs_err"]
    out["reward_mean"] = float(r.score.double().mean())
    out["reward_true_mean"] = float(r.true_score.mean())
    out["reward_abs_error"] = float((r.score.double() - r.true_score).abs().mean())
    return out
