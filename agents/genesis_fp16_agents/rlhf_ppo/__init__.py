"""The ``rlhf_ppo`` agent: PPO with per-component precision (see docs/precision-forensics.md)."""

from genesis_fp16_agents.rlhf_ppo.plugin import RlhfPpoPlugin, plugin

__all__ = ["RlhfPpoPlugin", "plugin"]
