"""PPO's hyper-parameters: :class:`PPOConfig` (the ``request.options`` of the same names)."""

from __future__ import annotations

from dataclasses import dataclass, field

from genesis_fp16.plugin_api import TrainRequestError
from genesis_fp16_agents.rlhf_ppo.model import TaskConfig


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters; the defaults train visibly on a CPU in under a minute.

    >>> PPOConfig(batch_size=16).steps_per_iteration
    4
    """

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
