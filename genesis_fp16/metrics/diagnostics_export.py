"""RL live diagnostics as Prometheus gauges: one gauge per diagnostic, labelled by agent.

An RL agent (``rlhf_ppo``) puts its last iteration's diagnostics in
``TrainResult.diagnostics``, a flat ``{name: float}`` dict (names and meanings
in docs/precision-forensics.md) and hands each iteration's to
``TrainRequest.on_diagnostics`` while it trains. The daemon sets one gauge per known
name after every iteration (live) and again from the result when the run ends;
:data:`RL_GAUGES` is the fixed mapping from diagnostic name to metric name and help
text. Names outside the mapping are not exported, so the set of series stays bounded
whatever an agent reports.

Undefined values are exported as they are: NaN stays NaN (e.g. a growth exponent when
the error is exactly zero) and +inf stays +Inf (a ratio with a zero denominator). The
exposition format allows both, ``promtool check metrics`` accepts them, and in PromQL a
comparison with NaN is false, so alerts never fire on an undefined value.

>>> from prometheus_client import CollectorRegistry
>>> registry = CollectorRegistry()
>>> rl = RlDiagnosticsMetrics(registry)
>>> rl.export("rlhf_ppo", {"mismatch_k3": 2e-7, "no_such_name": 1.0})
['mismatch_k3']
>>> registry.get_sample_value("genesis_fp16_rl_mismatch_kl_k3_nats", {"agent": "rlhf_ppo"})
2e-07
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Gauge

from genesis_fp16.metrics.metric_names import PREFIX, Families
from genesis_fp16.plugin_api import TrainResult

log = structlog.get_logger("genesis_fp16.diagnostics")


@dataclass(frozen=True)
class RlGauge:
    """One diagnostic of ``TrainResult.diagnostics`` and its gauge."""

    diagnostic: str
    metric: str  # without genesis_fp16_rl_
    help: str


# Units in the name where the value has one: KL and log-prob differences are in nats
# (natural-log units); fractions end in _ratio, as Prometheus names them. The fp16 margin
# "in bits" is log2 of a headroom, i.e. doublings: promtool reads `_bits` as a data size.
RL_GAUGES: tuple[RlGauge, ...] = (
    # Trainer-rollout mismatch: the training forward against the rollout copy, same tokens.
    RlGauge(
        "mismatch_k1", "mismatch_kl_k1_nats", "k1 estimate of KL(rollout || trainer) per token."
    ),
    RlGauge(
        "mismatch_k3", "mismatch_kl_k3_nats", "k3 estimate of KL(rollout || trainer) per token."
    ),
    RlGauge(
        "mismatch_abs_dlogp_mean",
        "mismatch_abs_logprob_diff_mean_nats",
        "Mean abs(log p_trainer - log p_rollout) over sampled tokens.",
    ),
    RlGauge(
        "mismatch_abs_dlogp_max",
        "mismatch_abs_logprob_diff_max_nats",
        "Max abs(log p_trainer - log p_rollout) over sampled tokens.",
    ),
    RlGauge(
        "mismatch_prob_pearson",
        "mismatch_prob_pearson_correlation",
        "Pearson correlation of trainer and rollout token probabilities (1 = identical).",
    ),
    RlGauge(
        "mismatch_chi2",
        "mismatch_chi2",
        "Token-level chi-square: mean of (w - 1)^2, w = p_trainer / p_rollout.",
    ),
    RlGauge(
        "mismatch_ess",
        "mismatch_ess_ratio",
        "Normalised effective sample size of the trainer/rollout weights (1 = no loss).",
    ),
    RlGauge(
        "mismatch_phantom_clip_frac",
        "mismatch_phantom_clip_ratio",
        "Share of tokens PPO would clip before any update: clipping by precision alone.",
    ),
    # Log-ratios below the resolution of the dtype they are formed in.
    RlGauge(
        "mismatch_log_ratio_below_ulp_frac",
        "mismatch_log_ratio_below_ulp_ratio",
        "Share of trainer-rollout log-ratios below one ulp of abs(log p) in the rollout dtype.",
    ),
    RlGauge(
        "kl_log_ratio_below_ulp_frac",
        "kl_log_ratio_below_ulp_ratio",
        "Share of policy-reference log-ratios below one ulp of abs(log p) in the KL dtype.",
    ),
    RlGauge("kl_k3", "kl_k3_nats", "k3 KL(policy || reference) per token, as in the penalty."),
    RlGauge(
        "kl_k3_abs_error",
        "kl_k3_abs_error_nats",
        "abs(k3 KL in the KL dtype - exact float64 k3): what the KL precision costs.",
    ),
    # Reward resolution.
    RlGauge(
        "reward_resolution_median",
        "reward_resolution_median_ratio",
        "Median over prompt groups of ulp(abs(mean reward)) / std(reward), reward dtype.",
    ),
    RlGauge(
        "reward_resolution_max",
        "reward_resolution_max_ratio",
        "Max over prompt groups of ulp(abs(mean reward)) / std(reward), reward dtype.",
    ),
    RlGauge(
        "reward_dead_groups",
        "reward_dead_groups",
        "Prompt groups whose rewards, as computed in the reward dtype, are all tied.",
    ),
    RlGauge(
        "reward_true_dead_groups",
        "reward_true_dead_groups",
        "Prompt groups whose exact fp32 rewards are all tied (real ties, not rounding).",
    ),
    RlGauge("reward_groups", "reward_groups", "Prompt groups in the last iteration."),
    # Value quantization.
    RlGauge(
        "value_quant_ratio",
        "value_quantization_ratio",
        "Median ulp(abs(V)) in the value dtype / median abs(V - return).",
    ),
    RlGauge(
        "value_fp16_margin_bits",
        "value_fp16_overflow_margin_doublings",
        "log2(65504 / max abs(V)): doublings of the value scale before fp16 overflows.",
    ),
    # Accumulated sequence log-prob error, trainer against rollout.
    RlGauge(
        "mismatch_seq_err_slope_per_1k",
        "mismatch_seq_logprob_error_nats_per_1k_tokens",
        "Slope of E abs(summed trainer-rollout log-prob error) per 1000 tokens.",
    ),
    RlGauge(
        "mismatch_seq_err_growth_exponent",
        "mismatch_seq_logprob_error_growth_exponent",
        "Exponent b in E abs(S_T) ~ T^b of the summed trainer-rollout log-prob error.",
    ),
)
RL_METRIC_NAMES: tuple[str, ...] = tuple(f"{PREFIX}_rl_{g.metric}" for g in RL_GAUGES)


class RlDiagnosticsMetrics:
    """The ``genesis_fp16_rl_*`` gauges, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        gauge = Families(registry).gauge
        self.gauges: dict[str, Gauge] = {
            g.diagnostic: gauge(f"rl_{g.metric}", g.help) for g in RL_GAUGES
        }

    def export(self, agent: str, diagnostics: Mapping[str, object]) -> list[str]:
        """Set the gauge of every known diagnostic; return the names exported.

        A value that is not a number is skipped and logged; NaN and inf are kept.
        """
        exported = []
        for name, gauge in self.gauges.items():
            if name not in diagnostics:
                continue
            raw = diagnostics[name]
            try:
                value = float(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                log.warning("diagnostic is not a number, not exported", agent=agent, name=name)
                continue
            gauge.labels(agent=agent).set(value)
            exported.append(name)
        return exported


def export_diagnostics(rl: RlDiagnosticsMetrics, agent: str, result: TrainResult) -> list[str]:
    """Export ``result.diagnostics`` when the agent reports any; return the names."""
    diagnostics = result.diagnostics
    if not diagnostics:
        return []
    exported = rl.export(agent, diagnostics)
    undefined = sorted(n for n in exported if not math.isfinite(float(diagnostics[n])))
    if undefined:
        log.info("undefined RL diagnostics exported as NaN/Inf", agent=agent, names=undefined)
    return exported
