"""Per-component precision presets, and how the request's precision picks one.

The rule (documented in docs/precision-forensics.md):

- ``precision="fp32"`` (a CLI flag, or the rollback flag ``ENABLE_FP16_TRAINING=false``)
  always wins: it forces ``fp32_baseline``, whatever ``options["preset"]`` says; the
  override is reported.
- ``precision="fp16"`` selects ``fp16_all``; a bf16 preset named next to it is an error.
- ``precision="bf16"`` runs ``options["preset"]`` (default ``mixed_recommended``); naming
  ``fp16_all`` next to it is an error.
- ``precision="auto"`` lets the preset decide (default ``mixed_recommended``).

    >>> resolve_preset("fp32", "bf16_pure").preset.name
    'fp32_baseline'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from genesis_fp16_infrastructure.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.training import dtype_of
from genesis_fp16_infrastructure.training.precision.precision_names import CHOICES, PRECISIONS

DEFAULT_PRESET = "mixed_recommended"


@dataclass(frozen=True)
class ComponentPrecision:
    """The dtype name of each component; ``rollout`` is the inference copy of the policy."""

    name: str
    policy: str
    reference: str
    reward: str
    value: str
    kl: str
    rollout: str
    master_weights: str = "fp32"
    loss_scaling: bool = False

    def dtype(self, component: str) -> torch.dtype:
        """The torch dtype of one component, e.g. ``preset.dtype("value")``."""
        return dtype_of(str(getattr(self, component)))

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "policy": self.policy,
            "reference": self.reference,
            "reward": self.reward,
            "value": self.value,
            "kl": self.kl,
            "rollout": self.rollout,
            "master_weights": self.master_weights,
            "loss_scaling": self.loss_scaling,
        }


def _bf16(name: str, fp32: tuple[str, ...] = ()) -> ComponentPrecision:
    """A bf16 preset with the named components kept in fp32."""
    d = {c: ("fp32" if c in fp32 else "bf16") for c in ("reference", "reward", "value", "kl")}
    return ComponentPrecision(
        name, "bf16", d["reference"], d["reward"], d["value"], d["kl"], rollout="bf16"
    )


PRESETS: dict[str, ComponentPrecision] = {
    p.name: p
    for p in (
        ComponentPrecision("fp32_baseline", "fp32", "fp32", "fp32", "fp32", "fp32", rollout="fp32"),
        _bf16("bf16_pure"),
        _bf16("bf16_fp32_kl", ("kl",)),
        _bf16("bf16_fp32_value", ("value",)),
        _bf16("bf16_fp32_reward", ("reward",)),
        _bf16("bf16_fp32_ref", ("reference",)),
        _bf16("mixed_recommended", ("value", "kl")),
        ComponentPrecision(
            "fp16_all", "fp16", "fp16", "fp16", "fp16", "fp16", rollout="fp16", loss_scaling=True
        ),
    )
}


@dataclass(frozen=True)
class PresetChoice:
    """The preset that runs, and why (``reason`` says when the request overrode it)."""

    preset: ComponentPrecision
    requested_preset: str | None
    reason: str


def resolve_preset(precision: str, preset: str | None, rollout: str | None = None) -> PresetChoice:
    """Apply the rule above; ``rollout`` overrides the preset's rollout dtype."""
    if preset is not None and preset not in PRESETS:
        raise TrainRequestError(f"rlhf_ppo: preset {preset!r} is not one of {sorted(PRESETS)}")
    if rollout is not None and rollout not in PRECISIONS:
        raise TrainRequestError(
            f"rlhf_ppo: rollout_precision {rollout!r} is not one of {sorted(PRECISIONS)}"
        )
    if precision == "fp32":
        name = "fp32_baseline"
        reason = "precision fp32 forces fp32_baseline"
        if preset not in (None, name):
            reason += f" (preset {preset!r} overridden)"
    elif precision == "fp16":
        if preset not in (None, "fp16_all"):
            raise TrainRequestError(
                f"rlhf_ppo: preset {preset!r} conflicts with precision 'fp16'; "
                "use preset 'fp16_all' or precision 'bf16'/'auto'"
            )
        name, reason = "fp16_all", "precision fp16 selects fp16_all"
    elif precision == "bf16":
        # bf16 asked next to fp16_all is what the precision guard's memory asks after an
        # fp16 demotion: the more robust precision wins, as fp32 does above.
        name = DEFAULT_PRESET if preset == "fp16_all" else preset or DEFAULT_PRESET
        reason = f"precision bf16 runs preset {name}"
        if preset == "fp16_all":
            reason += " (preset 'fp16_all' overridden)"
    elif precision == "auto":
        name = preset or DEFAULT_PRESET
        reason = f"precision auto runs preset {name}"
    else:
        raise TrainRequestError(
            f"rlhf_ppo: precision {precision!r} is not one of {sorted(CHOICES)}"
        )
    chosen = PRESETS[name]
    # The rollback (fp32) wins over a rollout override too: no 16-bit anywhere.
    if rollout is not None and rollout != chosen.rollout and precision != "fp32":
        chosen = dataclasses.replace(chosen, rollout=rollout)
        reason += f"; rollout precision {rollout}"
    return PresetChoice(preset=chosen, requested_preset=preset, reason=reason)
