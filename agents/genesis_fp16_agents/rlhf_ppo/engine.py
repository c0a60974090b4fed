"""One PPO run: rollouts, reference/reward/value passes, KL-shaped GAE, clipped updates.

Each component runs in its own dtype, as the preset says:

- ``policy`` trains through the core :class:`Trainer` under ``torch.autocast`` in the
  policy dtype over fp32 master weights (fp16 adds the core's loss scaling);
- ``rollout`` is a copy of the policy whose *weights* are cast to the rollout dtype, as
  an inference engine serves them; it is re-synced from the master weights after every
  iteration;
- ``reference`` and ``reward`` are frozen copies whose weights are cast to their dtype;
- ``value`` (a separate critic) trains under autocast in the value dtype; its
  predictions keep that dtype until GAE, so a bf16 critic hands GAE bf16-rounded values;
- ``kl``: the log-ratio ``log ref - log policy`` and k3 = expm1(x) - x are computed in
  the KL dtype (log-probs themselves always come from log_softmax in fp32).

    >>> from genesis_fp16_agents.rlhf_ppo.presets import PRESETS
    >>> engine = PPOEngine(PPOConfig(batch_size=8, group_size=4), PRESETS["fp32_baseline"], seed=0)
    >>> stats = engine.iteration()
    >>> 0.0 <= stats["reward_true_mean"] <= 1.0
    True
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from genesis_fp16_agents.rlhf_ppo.model import (
    Critic,
    Policy,
    RewardModel,
    TaskConfig,
    init_weights,
    random_prompts,
)
from genesis_fp16_agents.rlhf_ppo.presets import ComponentPrecision
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.rl import diagnostics as dg
from genesis_fp16_infrastructure.rl.ppo_math import (
    clipped_policy_loss,
    gae,
    token_logprobs,
    value_loss,
    whiten,
)
from genesis_fp16_infrastructure.training import (
    PrecisionPolicy,
    PrecisionRequest,
    ScalerConfig,
    Trainer,
    TrainerConfig,
    TrainingSummary,
    decide,
)

LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters; the defaults train visibly on a CPU in under a minute."""

    task: TaskConfig = field(default_factory=TaskConfig)
    batch_size: int = 64  # rollouts per iteration
    group_size: int = 4  # completions per prompt (the reward-resolution groups)
    ppo_epochs: int = 2
    minibatches: int = 2
    lr: float = 3e-3
    critic_lr: float = 3e-3
    clip_eps: float = 0.2
    kl_coef: float = 0.05
    vf_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        if self.batch_size % self.group_size or self.batch_size % self.minibatches:
            raise TrainRequestError(
                f"rlhf_ppo: batch_size {self.batch_size} must be a multiple of group_size "
                f"{self.group_size} and of minibatches {self.minibatches}"
            )

    @property
    def steps_per_iteration(self) -> int:
        return self.ppo_epochs * self.minibatches


def _frozen_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    return copy.deepcopy(module).to(dtype).requires_grad_(False).eval()


# The sampling stream's seed is the run's seed plus this, so that it never replays the
# host stream's numbers on a CPU run, where both generators are CPU generators.
SAMPLE_SEED_OFFSET = 1_000_003


class ActorCritic(nn.Module):
    """The two trained networks as one module, so that one Trainer steps them together."""

    def __init__(self, policy: Policy, critic: Critic) -> None:
        super().__init__()
        self.policy = policy
        self.critic = critic


class PPOEngine:
    """The models, optimizer and loss scaler of one run, and its iteration loop."""

    def __init__(
        self,
        cfg: PPOConfig,
        preset: ComponentPrecision,
        seed: int,
        device: str = "cpu",
        log_interval: int = 50,
        on_log: Callable[[TrainingSummary], None] | None = None,
        precision: PrecisionPolicy | None = None,
        cuda_graph: str = "auto",
        scaler: ScalerConfig = ScalerConfig(),  # noqa: B008 (frozen, so sharing is safe)
    ) -> None:
        """``precision`` is the Trainer's policy, and must compute in ``preset.policy``: a
        run passes its one decision's (the plugin's ``decide()`` answer, built with
        ``scaler``, the run's loss-scaler config; the precision guard the demoted one,
        whose reason tells the demotion). None only for an engine used on its own, outside
        a run (the probe setup, benchmarks/forensics.py): then it is decided for the
        preset's policy precision here.
        ``cuda_graph`` is the update step's execution (``auto``: captured on CUDA)."""
        self.cfg, self.preset, self.device = cfg, preset, device
        self.scaler_config = scaler
        # Two random streams, each on the device that consumes it. Prompts and minibatch
        # orders are drawn on the host on purpose (the same on every device) and moved;
        # sampling draws on the run's device, where the rollout probabilities are.
        self.gen = torch.Generator().manual_seed(seed)
        self.sample_gen = torch.Generator(device=device).manual_seed(seed + SAMPLE_SEED_OFFSET)
        self.policy = Policy(cfg.task)
        init_weights(self.policy, seed)
        self.critic = Critic(cfg.task)
        init_weights(self.critic, seed + 10_000)
        self.policy.to(device)
        self.critic.to(device)
        self.reference = _frozen_copy(self.policy, preset.dtype("reference"))
        # An fp32 copy of the reference measures the reference's own rounding (H4).
        self.reference_fp32 = _frozen_copy(self.policy, torch.float32)
        self.reward_model = RewardModel(cfg.task).to(device, preset.dtype("reward"))
        self.reward_fp32 = RewardModel(cfg.task).to(device)
        self.rollout_policy = _frozen_copy(self.policy, preset.dtype("rollout"))
        self.model = ActorCritic(self.policy, self.critic)
        # On CUDA the optimizer keeps its step counters on the device and skips an
        # overflowing fp16 step by itself, so a whole update step can be captured into a
        # CUDA graph. The CPU keeps torch's default AdamW, and its numbers as they were.
        on_cuda = torch.device(device).type == "cuda"
        groups = [
            {"params": self.policy.parameters(), "lr": cfg.lr},
            {"params": self.critic.parameters(), "lr": cfg.critic_lr},
        ]
        self.optimizer = (
            torch.optim.AdamW(groups, weight_decay=0.0, fused=True, capturable=True)
            if on_cuda
            else torch.optim.AdamW(groups, weight_decay=0.0)
        )
        # The trainer's precision is the policy's; the critic opens its own autocast.
        self.precision = precision or _standalone_precision(preset, device, scaler)
        if self.precision.name != preset.policy:
            raise ValueError(
                f"rlhf_ppo: precision {self.precision.name!r} does not match preset "
                f"{preset.name!r} (policy {preset.policy!r})"
            )
        # The update step is a pure function of its minibatch (the rollouts are gathered
        # into it eagerly), so it can be replayed from one CUDA graph per minibatch shape.
        self.trainer = Trainer(
            self.model,
            [self.optimizer],
            self.precision,
            TrainerConfig(
                max_grad_norm=cfg.max_grad_norm, log_interval=log_interval, cuda_graph=cuda_graph
            ),
            on_log=on_log,
        )
        self.scaler = self.precision.scaler
        self.iterations = 0
        self.kl_dtype_seen: torch.dtype | None = None
        # Wraps each update's loss before the Trainer steps it (the guard counts losses).
        self.loss_hook: Callable[[LossFn], LossFn] | None = None
        # The loss the trainer steps and the hook it was built with: a captured graph
        # replays the loss it was captured with, so it is built once per hook.
        self._stepped: tuple[Callable[[LossFn], LossFn] | None, LossFn] | None = None
        # Each update's clip fraction and value loss, summed on the device in place (a
        # replayed step writes here too; a Python list would only see the capture).
        self._update_sums = torch.zeros(2, dtype=torch.float64, device=device)

    # -- forward passes -------------------------------------------------------------

    def _gen_slice(self, per_position: torch.Tensor) -> torch.Tensor:
        """Outputs at the positions that predict the generated tokens."""
        p = self.cfg.task.prompt_len
        return per_position[:, p - 1 : -1]

    def _logp(self, model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
        return token_logprobs(self._gen_slice(model(seqs)), seqs[:, self.cfg.task.prompt_len :])

    def policy_logp(self, seqs: torch.Tensor) -> torch.Tensor:
        with self.precision.autocast(self.preset.dtype("policy")):
            return self._logp(self.policy, seqs)

    def values(self, seqs: torch.Tensor) -> torch.Tensor:
        with self.precision.autocast(self.preset.dtype("value")):
            return self._gen_slice(self.critic(seqs))

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``gen_len`` tokens with the rollout copy: (sequences, rollout log-probs)."""
        seqs, logps = prompts, []
        for _ in range(self.cfg.task.gen_len):
            logits = self.rollout_policy(seqs)[:, -1]
            logp_all = torch.log_softmax(logits.float(), dim=-1)
            nxt = torch.multinomial(logp_all.exp(), 1, generator=self.sample_gen)
            logps.append(logp_all.gather(-1, nxt))
            seqs = torch.cat([seqs, nxt], dim=1)
        return seqs, torch.cat(logps, dim=1)

    # -- one iteration ----------------------------------------------------------------

    def iteration(self, max_steps: int | None = None) -> dict[str, float]:
        """Roll out, score, update; returns this iteration's diagnostics (plain floats)."""
        cfg = self.cfg
        groups = cfg.batch_size // cfg.group_size
        prompts = random_prompts(groups, cfg.task, self.gen).repeat_interleave(cfg.group_size, 0)
        seqs, rollout_logp = self.generate(prompts.to(self.device))
        with torch.no_grad():
            trainer_logp = self.policy_logp(seqs)
            ref_logp = self._logp(self.reference, seqs)
            ref_fp32_logp = self._logp(self.reference_fp32, seqs)
            values = self.values(seqs)
            score = self.reward_model(seqs)
            true_score = self.reward_fp32(seqs).double()

        kl_dtype = self.preset.dtype("kl")
        log_ratio = ref_logp.to(kl_dtype) - trainer_logp.to(kl_dtype)  # x = log ref/pi
        k3 = dg.k3_terms(log_ratio)
        self.kl_dtype_seen = k3.dtype
        rewards = -cfg.kl_coef * k3.float()
        rewards[:, -1] += score.float()
        adv, returns = gae(rewards, values, cfg.gamma, cfg.lam)
        adv = whiten(adv)

        stats = self._update(seqs, rollout_logp, adv, returns, max_steps)
        stats.update(
            self._diagnostics(
                seqs, rollout_logp, trainer_logp, ref_logp, ref_fp32_logp, log_ratio, k3,
                values, returns, score, true_score, groups,
            )
        )  # fmt: skip
        self.sync_rollout()
        self.iterations += 1
        return stats

    def _minibatches(self, n: int) -> Iterator[torch.Tensor]:
        size = n // self.cfg.minibatches
        for _ in range(self.cfg.ppo_epochs):
            perm = torch.randperm(n, generator=self.gen)
            for i in range(self.cfg.minibatches):
                yield perm[i * size : (i + 1) * size]

    def _update(
        self,
        seqs: torch.Tensor,
        old_logp: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        max_steps: int | None,
    ) -> dict[str, float]:
        step_loss = self._stepped_loss()
        self._update_sums.zero_()
        steps = 0
        for idx in self._minibatches(seqs.shape[0]):
            if max_steps is not None and self.trainer.step_count >= max_steps:
                break
            # Gathered eagerly: the minibatch changes every step; the step itself does not.
            batch = (seqs[idx], old_logp[idx], adv[idx], returns[idx])
            self.trainer.step([batch], step_loss, num_samples=int(idx.numel()))
            steps += 1
        if not steps:
            return {}
        clip_frac, v_loss = (self._update_sums / steps).tolist()
        return {"policy_clip_frac": clip_frac, "value_loss": v_loss}

    def _stepped_loss(self) -> LossFn:
        """The PPO loss through ``loss_hook``, the same object while the hook is the same;
        a new hook drops any captured graph (it replays the loss it was captured with)."""
        hook = self.loss_hook
        if self._stepped is None or self._stepped[0] is not hook:
            if self._stepped is not None and self.trainer.graphs is not None:
                self.trainer.graphs.reset()
            loss: LossFn = self._ppo_loss
            self._stepped = (hook, hook(loss) if hook is not None else loss)
        return self._stepped[1]

    def _ppo_loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Clipped policy loss plus the value loss on one gathered minibatch."""
        seqs, old_logp, adv, returns = batch
        cache = self.trainer.graphs is None  # a captured step recasts (no cast cache)
        with self.precision.autocast(self.preset.dtype("policy"), cache_enabled=cache):
            logp = self._logp(self.policy, seqs)
        p_loss, clip_frac = clipped_policy_loss(logp, old_logp, adv, self.cfg.clip_eps)
        with self.precision.autocast(self.preset.dtype("value"), cache_enabled=cache):
            values = self._gen_slice(self.critic(seqs))
        v_loss = value_loss(values, returns)
        parts = torch.stack((clip_frac.detach().double(), v_loss.detach().double()))
        self._update_sums.add_(parts)
        return p_loss + self.cfg.vf_coef * v_loss

    def _diagnostics(
        self,
        seqs: torch.Tensor,
        rollout_logp: torch.Tensor,
        trainer_logp: torch.Tensor,
        ref_logp: torch.Tensor,
        ref_fp32_logp: torch.Tensor,
        log_ratio: torch.Tensor,
        k3: torch.Tensor,
        values: torch.Tensor,
        returns: torch.Tensor,
        score: torch.Tensor,
        true_score: torch.Tensor,
        groups: int,
    ) -> dict[str, float]:
        p = self.preset
        out = {f"mismatch_{k}": v for k, v in dg.mismatch_metrics(
            trainer_logp, rollout_logp, clip_eps=self.cfg.clip_eps).items()}  # fmt: skip
        exact_x = ref_fp32_logp.double() - trainer_logp.double()
        out["kl_k1"] = dg.k1_kl(log_ratio)
        out["kl_k3"] = float(k3.double().mean())
        out["kl_k3_exact"] = dg.k3_kl(exact_x)
        out["kl_k3_abs_error"] = abs(out["kl_k3"] - out["kl_k3_exact"])
        out["kl_log_ratio_below_ulp_frac"] = dg.below_resolution_frac(
            log_ratio, trainer_logp, p.dtype("kl")
        )
        out["kl_log_ratio_below_1e6_frac"] = dg.fixed_threshold_frac(log_ratio, 1e-6)
        out["kl_log_ratio_zero_frac"] = float((log_ratio == 0).double().mean())
        out["mismatch_log_ratio_below_ulp_frac"] = dg.below_resolution_frac(
            trainer_logp - rollout_logp, trainer_logp, p.dtype("rollout")
        )
        out.update(dg.reward_resolution(score.view(groups, -1), p.dtype("reward")))
        out["reward_true_dead_groups"] = dg.reward_resolution(
            true_score.view(groups, -1), torch.float64
        )["reward_dead_groups"]
        out.update(dg.value_quantization(values, returns, p.dtype("value")))
        ref_err = dg.sequence_error_growth(ref_logp, ref_fp32_logp)
        mis_err = dg.sequence_error_growth(trainer_logp, rollout_logp)
        out["ref_seq_err_slope_per_1k"] = ref_err["slope_per_1k"]
        out["ref_seq_err_growth_exponent"] = ref_err["growth_exponent"]
        out["ref_seq_err_final"] = ref_err["final_abs_err"]
        out["mismatch_seq_err_slope_per_1k"] = mis_err["slope_per_1k"]
        out["mismatch_seq_err_growth_exponent"] = mis_err["growth_exponent"]
        out["reward_mean"] = float(score.double().mean())
        out["reward_true_mean"] = float(true_score.mean())
        out["reward_abs_error"] = float((score.double() - true_score).abs().mean())
        out["loss_scale"] = self.scaler.get_scale()
        return out

    def sync_rollout(self) -> None:
        """Copy the fp32 master weights into the rollout copy, rounding to its dtype."""
        with torch.no_grad():
            for dst, src in zip(
                self.rollout_policy.parameters(), self.policy.parameters(), strict=True
            ):
                dst.copy_(src)


def _standalone_precision(
    preset: ComponentPrecision, device: str, scaler: ScalerConfig
) -> PrecisionPolicy:
    """The trainer's precision of an engine outside a run, as the preset names it: nobody
    asked for the policy's dtype explicitly, so the decision's reason names the preset.
    A run never comes here: it passes its own decision's policy."""
    basis = (
        f"preset {preset.name} trains the policy in {preset.policy} on {torch.device(device).type}"
    )
    decision = decide(PrecisionRequest(preset.policy, basis=basis), device)
    return PrecisionPolicy.from_decision(decision, device, scaler)
