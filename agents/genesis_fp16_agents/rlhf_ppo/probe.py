"""What the precision probe runs for this agent: one PPO loss over frozen fp32 rollouts.

The probe's model holds the three components it may keep in fp32 (``policy``, ``value``
and ``reward``); the loss re-runs the reward model and the critic inside the forward,
so each component's precision reaches the loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from genesis_fp16.plugin_api import ProbeSetup
from genesis_fp16_agents.rlhf_ppo.model import RewardModel
from genesis_fp16_agents.rlhf_ppo.task import ActorCritic, PPOConfig, PPOTask
from genesis_fp16_infrastructure.rl.ppo_math import clipped_policy_loss, gae, value_loss, whiten
from genesis_fp16_infrastructure.rl.rollout import gen_logp, sample

Batch = dict[str, torch.Tensor]
PROBE_BATCHES = 5


class ProbeModel(ActorCritic):
    """The task's policy and critic, and the reward model (it has no trainable weights)."""

    def __init__(self, task: PPOTask) -> None:
        model = task.build_model()
        super().__init__(model.policy, model.critic)
        self.cfg, self.reward = task.cfg, RewardModel(task.cfg.task)


def probe_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The PPO loss (clipped policy + value) on a frozen batch, rewards recomputed in-forward."""
    if not isinstance(model, ProbeModel):
        raise TypeError(f"probe_loss needs a ProbeModel, got {type(model).__name__}")
    cfg = model.cfg
    p = cfg.task.prompt_len
    seqs = batch["seqs"]
    logp = gen_logp(model.policy, seqs, p)
    values = model.critic(seqs)[:, p - 1 : -1]
    rewards = torch.zeros_like(batch["old_logp"])
    rewards[:, -1] += model.reward(seqs).float()
    adv, returns = gae(rewards, values, cfg.gamma, cfg.lam)
    p_loss, _ = clipped_policy_loss(logp, batch["old_logp"], whiten(adv), cfg.clip_eps)
    return p_loss + cfg.vf_coef * value_loss(values, returns)


def build_probe_setup(cfg: PPOConfig, seed: int) -> ProbeSetup:
    """Rollouts of the fp32 initial policy; batches[0] is the frozen probe batch."""
    task = PPOTask(cfg, seed)  # before any iteration its rollouts are fp32
    batches: list[Any] = []
    for epoch in range(PROBE_BATCHES):
        gen, sample_gen = task.generators(epoch, seed)
        prompts = task.prompts(gen)
        seqs, old_logp = sample(task.frozen.rollout, prompts, cfg.task.gen_len, sample_gen)
        batches.append({"seqs": seqs, "old_logp": old_logp})
    return ProbeSetup(
        build_model=lambda: ProbeModel(task),
        loss=probe_loss,
        batches=batches,
        components={"policy": ["policy"], "value": ["critic"], "reward": ["reward"]},
        learning_rate=cfg.lr,
    )
