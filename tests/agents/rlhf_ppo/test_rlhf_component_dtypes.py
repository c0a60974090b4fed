"""Each preset really runs each component in its dtype: forward hooks record output dtypes."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from torch import nn

from genesis_fp16_agents.rlhf_ppo.engine import PPOConfig, PPOEngine
from genesis_fp16_agents.rlhf_ppo.presets import PRESETS


def _record(engine: PPOEngine) -> dict[str, set[torch.dtype]]:
    seen: dict[str, set[torch.dtype]] = defaultdict(set)
    components = {
        "policy": engine.policy,
        "value": engine.critic,
        "reference": engine.reference,
        "reward": engine.reward_model,
        "rollout": engine.rollout_policy,
    }
    for name, module in components.items():
        for sub in module.modules():
            if isinstance(sub, nn.Linear):

                def hook(_m: nn.Module, _i: object, out: torch.Tensor, name: str = name) -> None:
                    seen[name].add(out.dtype)

                sub.register_forward_hook(hook)
    return seen


@pytest.mark.parametrize("preset_name", sorted(PRESETS))
def test_components_run_in_the_preset_dtypes(preset_name: str) -> None:
    """Inside forward, every Linear of each component outputs the preset's dtype."""
    preset = PRESETS[preset_name]
    engine = PPOEngine(PPOConfig(batch_size=8, group_size=4), preset, seed=0)
    seen = _record(engine)
    stats = engine.iteration()
    for component in ("policy", "value", "reference", "reward", "rollout"):
        assert seen[component] == {preset.dtype(component)}, component
    assert engine.kl_dtype_seen == preset.dtype("kl")
    # Master weights stay fp32 whatever the compute dtype.
    assert all(p.dtype == torch.float32 for p in engine.model.parameters())
    assert stats["loss_scale"] == (65536.0 if preset.loss_scaling else 1.0)
