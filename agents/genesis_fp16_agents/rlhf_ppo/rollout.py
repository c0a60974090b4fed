"""One PPO iteration's rollouts: sample, score against the frozen models, shape the
reward with the KL, GAE; and the diagnostics of what each component's dtype did to them.

The frozen components of a preset (:class:`Frozen`) hold their *weights* in their dtype,
as an inference engine or a low-precision reward model would:

- ``rollout``: the copy of the policy that samples, re-synced from the fp32 master
  weights before every rollout (rounding to its dtype);
- ``reference`` and ``reward``: frozen copies in their dtypes;
- ``reference_fp32`` and ``reward_fp32`` measure the error of those two (the KL's and the
  reward's own rounding) and score the evaluation exactly.

The trained networks run under autocast: the policy in the preset's policy dtype, the
critic in its value dtype, whose predictions keep that dtype until GAE. The KL's
log-ratio ``log ref - log policy`` and k3 = expm1(x) - x are computed in the KL dtype.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from genesis_fp16_agents.rlhf_ppo.config import PPOConfig
from genesis_fp16_agents.rlhf_ppo.model import RewardModel, TaskConfig
from genesis_fp16_agents.rlhf_ppo.presets import ComponentPrecision
from genesis_fp16_infrastructure.rl import diagnostics as dg
from genesis_fp16_infrastructure.rl.ppo_math import gae, token_logprobs, whiten
from genesis_fp16_infrastructure.training.precision.precision import autocast_to


def frozen_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    return copy.deepcopy(module).to(dtype).requires_grad_(False).eval()


def gen_logp(model: nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probs of the generated tokens, from the positions that predict them."""
    return token_logprobs(model(seqs)[:, prompt_len - 1 : -1], seqs[:, prompt_len:])


class Frozen:
    """The frozen models of one preset, built from the run's fp32 reference weights."""

    def __init__(
        self, task: TaskConfig, preset: ComponentPrecision, reference_fp32: nn.Module
    ) -> None:
        device = next(reference_fp32.parameters()).device
        self.preset = preset
        self.reference_fp32 = reference_fp32  # the chain's initial policy, checkpointed
        self.reward_fp32 = RewardModel(task).to(device)
        self.reference = frozen_copy(reference_fp32, preset.dtype("reference"))
        self.rollout = frozen_copy(reference_fp32, preset.dtype("rollout"))
        self.reward = RewardModel(task).to(device, preset.dtype("reward"))

    def sync_rollout(self, policy: nn.Module) -> None:
        """Copy the fp32 master weights into the rollout copy, rounding to its dtype."""
        with torch.no_grad():
            for dst, src in zip(self.rollout.parameters(), policy.parameters(), strict=True):
                dst.copy_(src)

    @torch.no_grad()
    def generate(
        self, prompts: torch.Tensor, gen_len: int, sample_gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``gen_len`` tokens with the rollout copy: (sequences, rollout log-probs).

        Autocast off: the copy computes in its weights' dtype, inside a run's autocast too."""
        seqs, logps = prompts, []
        with autocast_to(torch.float32, prompts.device.type):
            for _ in range(gen_len):
                logp_all = torch.log_softmax(self.rollout(seqs)[:, -1].float(), dim=-1)
                nxt = torch.multinomial(logp_all.exp(), 1, generator=sample_gen)
                logps.append(logp_all.gather(-1, nxt))
                seqs = torch.cat([seqs, nxt], dim=1)
        return seqs, torch.cat(logps, dim=1)


@dataclass(frozen=True)
class Rollout:
    """One iteration's batch and what its diagnostics need (all on the run's device)."""

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
def collect(
    frozen: Frozen,
    seqs: torch.Tensor,
    rollout_logp: torch.Tensor,
    trainer_logp: torch.Tensor,
    values: torch.Tensor,
    cfg: PPOConfig,
) -> Rollout:
    """Score sampled ``seqs`` (the trainer's log-probs and values given), KL-shape the
    reward and compute the whitened GAE advantages and returns."""
    preset, prompt_len = frozen.preset, cfg.task.prompt_len
    with autocast_to(torch.float32, seqs.device.type):  # the frozen copies: their own dtypes
        ref_logp = gen_logp(frozen.reference, seqs, prompt_len)
        ref_fp32_logp = gen_logp(frozen.reference_fp32, seqs, prompt_len)
        score = frozen.reward(seqs)
        true_score = frozen.reward_fp32(seqs).double()
    kl_dtype = preset.dtype("kl")
    log_ratio = ref_logp.to(kl_dtype) - trainer_logp.to(kl_dtype)  # x = log ref/pi
    k3 = dg.k3_terms(log_ratio)
    rewards = -cfg.kl_coef * k3.float()
    rewards[:, -1] += score.float()
    adv, returns = gae(rewards, values, cfg.gamma, cfg.lam)
    groups = cfg.batch_size // cfg.group_size
    return Rollout(
        seqs, rollout_logp, trainer_logp, ref_logp, ref_fp32_logp, log_ratio, k3,
        values, returns, whiten(adv), score, true_score, groups,
    )  # fmt: skip


def diagnostics(r: Rollout, preset: ComponentPrecision, clip_eps: float) -> dict[str, float]:
    """What each component's dtype did to this rollout (plain floats; see
    :mod:`genesis_fp16_infrastructure.rl.diagnostics`)."""
    out = {f"mismatch_{k}": v for k, v in dg.mismatch_metrics(
        r.trainer_logp, r.rollout_logp, clip_eps=clip_eps).items()}  # fmt: skip
    exact_x = r.ref_fp32_logp.double() - r.trainer_logp.double()
    out["kl_k1"] = dg.k1_kl(r.log_ratio)
    out["kl_k3"] = float(r.k3.double().mean())
    out["kl_k3_exact"] = dg.k3_kl(exact_x)
    out["kl_k3_abs_error"] = abs(out["kl_k3"] - out["kl_k3_exact"])
    out["kl_log_ratio_below_ulp_frac"] = dg.below_resolution_frac(
        r.log_ratio, r.trainer_logp, preset.dtype("kl")
    )
    out["kl_log_ratio_below_1e6_frac"] = dg.fixed_threshold_frac(r.log_ratio, 1e-6)
    out["kl_log_ratio_zero_frac"] = float((r.log_ratio == 0).double().mean())
    out["mismatch_log_ratio_below_ulp_frac"] = dg.below_resolution_frac(
        r.trainer_logp - r.rollout_logp, r.trainer_logp, preset.dtype("rollout")
    )
    out.update(dg.reward_resolution(r.score.view(r.groups, -1), preset.dtype("reward")))
    out["reward_true_dead_groups"] = dg.reward_resolution(
        r.true_score.view(r.groups, -1), torch.float64
    )["reward_dead_groups"]
    out.update(dg.value_quantization(r.values, r.returns, preset.dtype("value")))
    ref_err = dg.sequence_error_growth(r.ref_logp, r.ref_fp32_logp)
    mis_err = dg.sequence_error_growth(r.trainer_logp, r.rollout_logp)
    for name, err in (("ref", ref_err), ("mismatch", mis_err)):
        out[f"{name}_seq_err_slope_per_1k"] = err["slope_per_1k"]
        out[f"{name}_seq_err_growth_exponent"] = err["growth_exponent"]
    out["ref_seq_err_final"] = ref_err["final_abs_err"]
    out["reward_mean"] = float(r.score.double().mean())
    out["reward_true_mean"] = float(r.true_score.mean())
    out["reward_abs_error"] = float((r.score.double() - r.true_score).abs().mean())
    return out
