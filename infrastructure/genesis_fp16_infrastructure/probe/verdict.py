"""Green / amber / red per measure, and the recommendation. Thresholds: docs/precision-probe.md.

>>> grade_at_most(5e-4, green=1e-3, amber=1e-2)
'green'
>>> grade_at_least(0.95, green=0.99, amber=0.9)
'amber'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.probe.measures import FP16_MAX, Measures

Colour = Literal["green", "amber", "red", "n/a"]

# torch.testing.assert_close's default rtol per dtype: the rounding one op may leave.
DEFAULT_LOSS_RTOL = {"fp32": 1.3e-6, "bf16": 1.6e-2, "fp16": 1e-3}


@dataclass(frozen=True)
class Thresholds:
    """Where green ends and red begins; ``docs/precision-probe.md`` gives each basis."""

    loss_rtol: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LOSS_RTOL))
    loss_amber_factor: float = 10.0
    noise_green: float = 0.1  # precision error / minibatch noise
    noise_amber: float = 1.0
    cosine_green: float = 0.99
    cosine_amber: float = 0.9
    flushed_green: float = 1e-3
    flushed_amber: float = 1e-2
    headroom_amber: float = FP16_MAX / 16  # less than 16x (4 doublings) of room left
    headroom_red: float = FP16_MAX
    unchanged_green: float = 0.01  # excess over FP32's own unchanged fraction
    unchanged_amber: float = 0.5  # above this, most parameters do not learn: red
    speed_tolerance: float = 0.05  # "not slower than FP32": at most 5% slower per step


def grade_at_most(value: float, green: float, amber: float) -> Colour:
    """Grade a measure where smaller is better; NaN means not applicable."""
    if math.isnan(value):
        return "n/a"
    if value <= green:
        return "green"
    return "amber" if value <= amber else "red"


def grade_at_least(value: float, green: float, amber: float) -> Colour:
    """Grade a measure where larger is better (a cosine); NaN means not applicable."""
    return grade_at_most(-value, -green, -amber)  # negation is exact: the same comparisons


@dataclass(frozen=True)
class Recommendation:
    """The cheapest variant that is green everywhere and not slower than FP32 here."""

    variant: str
    reasons: Mapping[str, tuple[str, ...]]  # why each cheaper variant was not chosen
    blocking_modules: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Candidate:
    """What :func:`recommend` needs to know about one variant."""

    name: str
    cost_rank: int
    overall: str
    seconds_per_step: float
    problems: tuple[str, ...]
    modules: tuple[str, ...]


def recommend(
    candidates: Sequence[Candidate],
    fp32_seconds: float,
    tolerance: float = 0.05,
) -> Recommendation:
    """Pick the cheapest green candidate no slower than FP32 per step.

    A candidate is not slower when its fastest step takes at most ``fp32_seconds`` times
    ``1 + tolerance``. Cost ties are broken by the measured time. Falls back to fp32
    when nothing qualifies, and says why for every variant it passed over.
    """
    reasons: dict[str, tuple[str, ...]] = {}
    modules: dict[str, tuple[str, ...]] = {}
    for cand in sorted(candidates, key=lambda c: (c.cost_rank, c.seconds_per_step)):
        why = list(cand.problems)
        if cand.seconds_per_step > fp32_seconds * (1 + tolerance):
            ratio = cand.seconds_per_step / fp32_seconds if fp32_seconds > 0 else math.inf
            why.append(f"slower than fp32 on this device ({ratio:.1f}x per step)")
        if cand.overall == "green" and not why:
            return Recommendation(cand.name, reasons, modules)
        reasons[cand.name] = tuple(why) or (f"overall {cand.overall}",)
        modules[cand.name] = cand.modules
    return Recommendation("fp32", reasons, modules)


def grade_measures(
    m: Measures, precision: PrecisionName, thresholds: Thresholds
) -> tuple[dict[str, Colour], tuple[str, ...], tuple[str, ...]]:
    """Colour each measure of one variant; return (verdicts, problems, blocking modules).

    A problem is one line naming the measure, its value and the layer or module behind
    it; blocking modules are those named by the non-green measures.
    """
    t = thresholds
    rtol = t.loss_rtol[precision]
    colours: dict[str, Colour] = {
        "loss": grade_at_most(m.loss_rel_err, rtol, rtol * t.loss_amber_factor),
        "grad_error": grade_at_most(m.grad_noise_ratio, t.noise_green, t.noise_amber),
        "layer_cosine": grade_at_least(m.worst_layer_cosine, t.cosine_green, t.cosine_amber),
        "flushed": grade_at_most(m.flushed_fraction, t.flushed_green, t.flushed_amber),
        "sign_flips": grade_at_most(m.sign_flip_ratio, t.noise_green, t.noise_amber),
        "headroom": (
            grade_at_most(m.activation_max, t.headroom_amber, t.headroom_red)
            if precision == "fp16"
            else "n/a"
        ),
        "drift": grade_at_most(m.drift_noise_ratio, t.noise_green, t.noise_amber),
        "update_cosine": grade_at_least(m.update_cosine, t.cosine_green, t.cosine_amber),
        "unchanged": grade_at_most(m.unchanged_excess, t.unchanged_green, t.unchanged_amber),
    }
    said = {
        "loss": (f"loss error {m.loss_rel_err:.2e} (rtol {rtol:g} for {precision})", ""),
        "grad_error": (
            f"gradient error {m.grad_noise_ratio:.2f}x the minibatch noise, "
            f"worst in '{m.worst_error_layer}'",
            m.worst_error_layer,
        ),
        "layer_cosine": (
            f"gradient cosine {m.worst_layer_cosine:.4f} in '{m.worst_cosine_layer}'",
            m.worst_cosine_layer,
        ),
        "flushed": (
            f"{m.flushed_fraction:.2%} of gradients flushed to zero, worst in "
            f"'{m.worst_error_layer}'",
            m.worst_error_layer,
        ),
        "sign_flips": (
            f"gradient signs flipped {m.sign_flip_ratio:.2f}x as often as between minibatches",
            m.worst_error_layer,
        ),
        "headroom": (
            f"activation {m.activation_max:.4g} in module '{m.activation_module}' "
            f"(fp16 max {FP16_MAX:g})",
            m.activation_module,
        ),
        "drift": (
            f"parameter drift {m.drift_noise_ratio:.2f}x the minibatch noise, most in "
            f"'{m.drift_layer}'",
            m.drift_layer,
        ),
        "update_cosine": (f"update cosine {m.update_cosine:.4f}", m.drift_layer),
        "unchanged": (
            f"{m.unchanged_fraction:.0%} of parameters unchanged per step, most in "
            f"'{m.unchanged_layer}'",
            m.unchanged_layer,
        ),
    }
    bad = [k for k, c in colours.items() if c in ("amber", "red")]
    problems = tuple(f"{colours[k]}: {said[k][0]}" for k in bad)
    modules: list[str] = []
    for key in bad:
        name = said[key][1]
        module = name if key == "headroom" else name.rsplit(".", 1)[0]  # a parameter's module
        if name and module not in modules:
            modules.append(module)
    return colours, problems, tuple(modules)
