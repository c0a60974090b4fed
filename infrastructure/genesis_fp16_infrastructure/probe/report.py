"""The probe's results: per-variant measures and verdicts, the table and the JSON.

>>> report.recommended                     # doctest: +SKIP
'bf16_autocast'
>>> print(report.table())                  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from genesis_fp16_infrastructure.training.precision.precision_names import PrecisionName


@dataclass(frozen=True)
class Measures:
    """What one variant did, against the FP32 reference. NaN: not measured / not applicable."""

    loss: float = math.nan
    loss_rel_err: float = math.nan
    grad_err: float = math.nan
    grad_noise_ratio: float = math.nan
    worst_error_layer: str = ""
    worst_cosine_layer: str = ""
    worst_layer_cosine: float = math.nan
    flushed_fraction: float = math.nan
    sign_flip_fraction: float = math.nan
    sign_flip_ratio: float = math.nan
    activation_max: float = math.nan
    activation_module: str = ""
    loss_scale: float = math.nan
    scale_halvings: int | None = None
    param_drift: float = math.nan
    drift_noise_ratio: float = math.nan
    drift_layer: str = ""
    update_cosine: float = math.nan
    unchanged_fraction: float = math.nan
    unchanged_excess: float = math.nan
    unchanged_layer: str = ""
    skipped_steps: int = 0
    seconds_per_step: float = math.nan
    layer_errors: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantResult:
    """One variant: how it ran, what it measured, and the colour of each measure."""

    name: str
    family: str
    precision: PrecisionName
    fp32_modules: tuple[str, ...]
    measures: Measures
    verdicts: Mapping[str, str]
    overall: str
    problems: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ProbeReport:
    """Everything the probe found; ``recommended`` and ``verdict`` are what a daemon exports.

    ``verdict`` maps each variant to its overall colour; ``reasons`` says, for every
    variant cheaper than the recommended one, which measures and modules stopped it.
    """

    device: str
    steps: int
    seed: int
    optimizer: str
    learning_rate: float
    noise_floor: float
    sign_noise: float
    variants: tuple[VariantResult, ...]
    recommended: str
    reasons: Mapping[str, tuple[str, ...]]
    blocking_modules: Mapping[str, tuple[str, ...]]
    deterministic: bool = True

    @property
    def verdict(self) -> dict[str, str]:
        return {v.name: v.overall for v in self.variants}

    def variant(self, name: str) -> VariantResult:
        for found in self.variants:
            if found.name == name:
                return found
        known = ", ".join(v.name for v in self.variants)
        raise KeyError(f"no variant {name!r} in this report; variants: {known}")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; non-finite numbers become strings ("inf", "nan")."""
        out = asdict(self)
        out["verdict"] = self.verdict
        return _finite_json(out)

    def table(self) -> str:
        """A fixed-width table, one row per variant; ``~`` marks amber and ``!`` red."""
        cols = [
            ("variant", 30),
            ("loss err", 9),
            ("grad/noise", 10),
            ("worst cos", 9),
            ("flushed", 8),
            ("flips/noise", 11),
            ("act max", 8),
            ("drift/noise", 11),
            ("upd cos", 8),
            ("unchanged", 9),
            ("ms/step", 9),
            ("verdict", 7),
        ]
        lines = [
            "  ".join(
                title.rjust(width) if i else title.ljust(width)
                for i, (title, width) in enumerate(cols)
            )
        ]
        for var in self.variants:
            m, v = var.measures, var.verdicts
            cells = [
                var.name,
                _num(m.loss_rel_err, v.get("loss", "")),
                _num(m.grad_noise_ratio, v.get("grad_error", "")),
                _num(m.worst_layer_cosine, v.get("layer_cosine", ""), "{:.4f}"),
                _num(m.flushed_fraction, v.get("flushed", ""), "{:.1%}"),
                _num(m.sign_flip_ratio, v.get("sign_flips", ""), "{:.2f}"),
                _num(m.activation_max, v.get("headroom", "")),
                _num(m.drift_noise_ratio, v.get("drift", "")),
                _num(m.update_cosine, v.get("update_cosine", ""), "{:.4f}"),
                _num(m.unchanged_fraction, v.get("unchanged", ""), "{:.1%}"),
                _num(m.seconds_per_step * 1e3, "", "{:.1f}"),
                var.overall if var.error is None else "error",
            ]
            lines.append(
                "  ".join(
                    c.rjust(w) if i else c.ljust(w)
                    for i, (c, (_, w)) in enumerate(zip(cells, cols, strict=True))
                )
            )
        lines.append("")
        lines.append(
            f"device {self.device}; {self.steps} {self.optimizer} steps at lr "
            f"{self.learning_rate:g}; minibatch noise floor {self.noise_floor:.3g} "
            f"(gradient), {self.sign_noise:.3g} (sign flips)"
        )
        for var in self.variants:
            if var.error:
                lines.append(f"{var.name}: did not run: {var.error}")
            elif var.measures.scale_halvings is not None:
                lines.append(
                    f"{var.name}: loss scale {var.measures.loss_scale:g} after "
                    f"{var.measures.scale_halvings} halvings from 65536"
                    + (
                        f", {var.measures.skipped_steps} skipped steps"
                        if var.measures.skipped_steps
                        else ""
                    )
                )
        lines.append(f"recommended: {self.recommended}")
        for name, why in self.reasons.items():
            lines.append(f"  not {name}: {'; '.join(why)}")
        return "\n".join(lines)


def _finite_json(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(k): _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_json(v) for v in obj]
    return obj


_MARK = {"green": " ", "amber": "~", "red": "!", "n/a": " "}


def _num(value: float, colour: str, fmt: str = "{:.1e}") -> str:
    text = "-" if math.isnan(value) else fmt.format(value)
    return text + _MARK.get(colour, " ")
