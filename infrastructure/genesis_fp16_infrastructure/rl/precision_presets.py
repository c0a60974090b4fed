"""Per-component precision presets of an RLHF system, and how a decided precision picks one.

A preset names the dtype each component computes in: the trained policy, the frozen
reference and reward model, the value head, the KL penalty and the rollout (inference)
copy of the policy; master weights stay fp32 in every one.

The run's request goes to ``fit()``'s one ``decide()`` first (:func:`preset_request`:
under ``auto`` a preset the caller names asks for the policy's precision on the
operator's behalf, its ``basis``; without one, ``auto`` is decided as the request says),
and the preset follows the decision, floor and exclusions applied (documented in
docs/precision-forensics.md):

- ``fp32`` (asked, the rollback, or ``auto`` on a device without a fast 16-bit
  precision) always wins: it forces ``fp32_baseline``, whatever preset was named; the
  override is reported.
- ``fp16`` selects ``fp16_all``; a bf16 preset named next to it is an error.
- ``bf16`` runs the named preset (default ``mixed_recommended``); ``fp16_all`` named next
  to it is overridden (the precision guard's memory after an fp16 demotion),
  ``fp32_baseline`` is an error (the trainer runs the decided bf16).

The trainer runs the decision itself: the preset's policy precision is always the
decided one, so nothing decides twice. A name or a combination that cannot run is a
:class:`PresetError`, one line naming the value and the choices.

    >>> resolve_preset("fp32", "bf16_pure").preset.name
    'fp32_baseline'
    >>> try:
    ...     resolve_preset("fp16", "bf16_pure")
    ... except PresetError as exc:
    ...     print(exc)
    preset 'bf16_pure' conflicts with precision 'fp16'; use preset 'fp16_all' or ...
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import torch

from genesis_fp16_infrastructure.precision_names import PRECISIONS, PrecisionName
from genesis_fp16_infrastructure.training import dtype_of
from genesis_fp16_infrastructure.training.precision.decide import ResolvedPrecision
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

DEFAULT_PRESET = "mixed_recommended"


class PresetError(ValueError):
    """A preset, rollout or precision name that is unknown, or a preset the decided
    precision cannot run; the message is one line naming the value and the choices."""


@dataclass(frozen=True)
class ComponentPrecision:
    """The dtype name of each component; ``rollout`` is the inference copy of the policy."""

    name: str
    policy: PrecisionName
    reference: PrecisionName
    reward: PrecisionName
    value: PrecisionName
    kl: PrecisionName
    rollout: PrecisionName
    master_weights: PrecisionName = "fp32"
    loss_scaling: bool = False

    def dtype(self, component: str) -> torch.dtype:
        """The torch dtype of one component, e.g. ``preset.dtype("value")``."""
        return dtype_of(getattr(self, component))

    def as_dict(self) -> dict[str, str | bool]:
        """Each component's dtype name and the two flags: the preset without its name."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}


def _bf16(name: str, fp32: tuple[str, ...] = ()) -> ComponentPrecision:
    """A bf16 preset with the named components kept in fp32."""
    d: dict[str, PrecisionName] = {
        c: ("fp32" if c in fp32 else "bf16") for c in ("reference", "reward", "value", "kl")
    }
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
    reason: str


def preset_request(request: PrecisionRequest, preset: str | None) -> PrecisionRequest:
    """The request to ask ``decide()``: the run's own; under ``auto``, a named
    preset asks for its policy's precision, with the preset as the basis. The mode, the
    cache, the floor and the exclusions stay.

    >>> preset_request(PrecisionRequest("auto", mode="measure"), "fp16_all").requested
    'fp16'
    """
    _check_preset(preset)
    if preset is None or request.requested != "auto":
        return request
    policy = PRESETS[preset].policy
    return replace(
        request, requested=policy, basis=f"preset {preset} trains the policy in {policy}"
    )


def _check_preset(preset: str | None) -> None:
    if preset is not None and preset not in PRESETS:
        raise PresetError(f"preset {preset!r} is not one of {sorted(PRESETS)}")


def resolve_preset(
    decision: ResolvedPrecision | str, preset: str | None, rollout: str | None = None
) -> PresetChoice:
    """The preset that runs in ``decision``, by the rule above: ``decide()``'s answer
    (its reason leads the choice's), or a decided precision's name. ``rollout``
    overrides the preset's rollout dtype."""
    _check_preset(preset)
    precision = decision if isinstance(decision, str) else decision.used
    if rollout is not None and rollout not in PRECISIONS:
        raise PresetError(f"rollout_precision {rollout!r} is not one of {sorted(PRECISIONS)}")
    if precision == "fp32":
        name = "fp32_baseline"
        reason = "precision fp32 forces fp32_baseline"
        if preset not in (None, name):
            reason += f" (preset {preset!r} overridden)"
    elif precision == "fp16":
        if preset not in (None, "fp16_all"):
            raise PresetError(
                f"preset {preset!r} conflicts with precision 'fp16'; "
                "use preset 'fp16_all' or precision 'bf16'/'auto'"
            )
        name, reason = "fp16_all", "precision fp16 selects fp16_all"
    elif precision == "bf16":
        if preset is not None and PRESETS[preset].policy == "fp32":
            # The decision is bf16 (asked by name, or a floor): the trainer runs it, so a
            # preset whose policy trains in fp32 cannot be the one that runs.
            raise PresetError(
                f"preset {preset!r} conflicts with precision 'bf16'; "
                "use precision 'fp32' or 'auto', or a bf16 preset"
            )
        # bf16 asked next to fp16_all is what the precision guard's memory asks after an
        # fp16 demotion: the more robust precision wins, as fp32 does above.
        name = DEFAULT_PRESET if preset == "fp16_all" else preset or DEFAULT_PRESET
        reason = f"precision bf16 runs preset {name}"
        if preset == "fp16_all":
            reason += " (preset 'fp16_all' overridden)"
    else:
        raise PresetError(f"precision {precision!r} is not one of {sorted(PRECISIONS)}")
    chosen = PRESETS[name]
    # The rollback (fp32) wins over a rollout override too: no 16-bit anywhere.
    if rollout is not None and rollout != chosen.rollout and precision != "fp32":
        chosen = dataclasses.replace(chosen, rollout=rollout)
        reason += f"; rollout precision {rollout}"
    if not isinstance(decision, str):
        reason = f"{decision.reason}; {reason}"
    return PresetChoice(preset=chosen, reason=reason)
