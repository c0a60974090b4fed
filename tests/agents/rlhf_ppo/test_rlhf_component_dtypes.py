"""Each preset really runs each component in its dtype: forward hooks record output dtypes."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from torch import nn

from genesis_fp16_agents.rlhf_ppo.task import PPOConfig, PPOTask
from genesis_fp16_infrastructure.rl.precision_presets import PRESETS
from genesis_fp16_infrastructure.training import FitOptions, Trainer, fit


class RecordedTask(PPOTask):
    """A PPO task whose components record the dtype of every Linear output."""

    seen: dict[str, set[torch.dtype]]

    def begin_iteration(self, trainer: Trainer, epoch: int) -> None:
        super().begin_iteration(trainer, epoch)  # the preset's components now exist
        self.seen = defaultdict(set)
        components = {
            "policy": self.model.policy,
            "value": self.model.critic,
            "reference": self.frozen.reference,
            "reward": self.frozen.reward,
            "rollout": self.frozen.rollout,
        }
        for name, module in components.items():
            for sub in module.modules():
                if isinstance(sub, nn.Linear):
                    sub.register_forward_hook(
                        lambda _m, _i, out, name=name: self.seen[name].add(out.dtype)
                    )


@pytest.mark.parametrize("preset_name", sorted(PRESETS))
def test_components_run_in_the_preset_dtypes(preset_name: str) -> None:
    """Inside forward, every Linear of each component outputs the preset's dtype, in the
    rollout and in the update steps fit() runs."""
    preset = PRESETS[preset_name]
    task = RecordedTask(PPOConfig(batch_size=8, group_size=4), seed=0, preset=preset_name)
    fit(task, FitOptions(precision=preset.policy, epochs=1))
    assert task.preset.name == preset_name
    for component in ("policy", "value", "reference", "reward", "rollout"):
        assert task.seen[component] == {preset.dtype(component)}, component
    assert task.kl_dtype_seen == preset.dtype("kl")
    # Master weights stay fp32 whatever the compute dtype.
    assert all(p.dtype == torch.float32 for p in task.model.parameters())
    assert task.stats["loss_scale"] == (65536.0 if preset.loss_scaling else 1.0)
