"""A real daemon training rlhf_ppo for one PPO iteration exports every genesis_fp16_rl_ gauge."""

from __future__ import annotations

import math
import subprocess

import pytest
from daemon_harness import DaemonFactory
from prometheus_client.parser import text_string_to_metric_families

from genesis_fp16.metrics.diagnostics_export import RL_METRIC_NAMES

AGENT = "rlhf_ppo"
ENV = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
    # 4 optimizer steps = one PPO iteration (2 epochs x 2 minibatches) with the defaults.
    "GENESIS_FP16_AGENTS__RLHF_PPO__STEPS": "4",
    "GENESIS_FP16_LOG_INTERVAL": "2",
    "GENESIS_FP16_SAMPLE_COUNT": "16",
    "GENESIS_FP16_SCHEDULE": "3600",
}


def _rl_samples(text: str) -> dict[str, float]:
    return {
        sample.name: float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("genesis_fp16_rl_") and sample.labels.get("agent") == AGENT
    }


@pytest.mark.slow
def test_rlhf_ppo_run_shows_every_rl_gauge_in_metrics(
    daemon_factory: DaemonFactory, promtool: str
) -> None:
    """After one rlhf_ppo run, /metrics has each rl gauge for the agent, and passes promtool."""
    daemon = daemon_factory(ENV, fixtures=False)
    assert _rl_samples(daemon.metrics_text()) == {}  # nothing before the first run ends
    daemon.wait_for(
        lambda: daemon.sample("genesis_fp16_training_runs_total", agent=AGENT, outcome="success"),
        "one finished rlhf_ppo run",
        timeout=90,
    )
    text = daemon.metrics_text()
    found = _rl_samples(text)
    assert set(found) == set(RL_METRIC_NAMES)
    # A few values whose range is known: the rollout copy is a bf16 copy of the trainer.
    assert 0 < found["genesis_fp16_rl_mismatch_ess_ratio"] <= 1
    assert found["genesis_fp16_rl_mismatch_prob_pearson_correlation"] > 0.99
    assert found["genesis_fp16_rl_mismatch_kl_k3_nats"] >= 0
    assert found["genesis_fp16_rl_reward_groups"] == 16
    margin = found["genesis_fp16_rl_value_fp16_overflow_margin_doublings"]
    assert math.isnan(margin) or margin > 0
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
