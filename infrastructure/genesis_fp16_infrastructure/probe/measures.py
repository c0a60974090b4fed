"""What the probe measures: distances between a variant's numbers and the FP32 reference.

Gradients and parameters are passed as ``{parameter name: fp32 tensor}`` dicts, so that
every measure can name the layer it found worst.

>>> g32 = {"w": torch.tensor([1.0, -2.0, 3.0])}
>>> flushed_fraction({"w": torch.tensor([1.0, 0.0, 3.0])}, g32)
0.3333333333333333
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors

Tensors = Mapping[str, torch.Tensor]

FP16_MAX = float(torch.finfo(torch.float16).max)  # 65504


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


def _flat(tensors: Tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors.values()])


def norm(tensors: Tensors) -> float:
    """The 2-norm of all tensors together, as one vector."""
    return float(_flat(tensors).norm())


def ratio(value: float, floor: float) -> float:
    """value / floor, where a zero floor makes any non-zero value infinitely large."""
    if floor == 0:
        return 0.0 if value == 0 else math.inf
    return value / floor


def relative_error(value: float, reference: float) -> float:
    """|value - reference| / |reference|; inf when the value is not finite."""
    return ratio(abs(value - reference), abs(reference)) if math.isfinite(value) else math.inf


def relative_distance(a: Tensors, b: Tensors) -> float:
    """||a - b|| / ||b|| over all tensors together; inf when ``a`` is not finite."""
    fa, fb = _flat(a), _flat(b)
    if not bool(torch.isfinite(fa).all()):
        return math.inf
    return ratio(float((fa - fb).norm()), float(fb.norm()))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine of two tensors as flat vectors: 1.0 when both are zero, 0.0 when one is."""
    fa, fb = a.reshape(-1).double(), b.reshape(-1).double()
    if not bool(torch.isfinite(fa).all()):
        return -1.0  # the worst value: a non-finite gradient points nowhere useful
    na, nb = float(fa.norm()), float(fb.norm())
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(fa @ fb) / (na * nb)


def layer_errors(grads: Tensors, reference: Tensors) -> dict[str, float]:
    """Per parameter: ||g - g32|| / ||g32|| (inf if non-finite, 0 where both are zero)."""
    return {
        name: relative_distance({name: grads[name]}, {name: ref}) for name, ref in reference.items()
    }


def worst_layer_cosine(grads: Tensors, reference: Tensors) -> tuple[str, float]:
    """The parameter whose gradient points furthest from FP32's, and that cosine."""
    cosines = {name: cosine(grads[name], ref) for name, ref in reference.items()}
    name = min(cosines, key=lambda n: cosines[n])
    return name, cosines[name]


def flushed_fraction(grads: Tensors, reference: Tensors) -> float:
    """Of the gradient elements non-zero in FP32, the fraction that are exactly zero here."""
    g, r = _flat(grads), _flat(reference)
    nonzero = r != 0
    count = int(nonzero.sum())
    return int((nonzero & (g == 0)).sum()) / count if count else 0.0


def sign_flip_fraction(grads: Tensors, reference: Tensors) -> float:
    """Of the elements non-zero in both, the fraction whose sign differs from FP32's."""
    g, r = _flat(grads), _flat(reference)
    both = (r != 0) & (g != 0)
    count = int(both.sum())
    return int((both & (torch.sign(g) != torch.sign(r))).sum()) / count if count else 0.0


def update_cosine(params: Tensors, reference: Tensors, start: Tensors) -> float:
    """Cosine between this variant's total update θ - θ0 and FP32's θ32 - θ0."""
    mine = _flat(params) - _flat(start)
    theirs = _flat(reference) - _flat(start)
    return cosine(mine, theirs)


def parameter_drift(params: Tensors, reference: Tensors, start: Tensors) -> float:
    """||θ - θ32|| / ||θ32 - θ0||: how far from FP32's weights, in units of FP32's update."""
    moved = float(_flat({n: reference[n] - start[n] for n in reference}).norm())
    if moved == 0:  # FP32 did not move: drift is undefined
        return math.nan
    return float(_flat({n: params[n] - reference[n] for n in reference}).norm()) / moved


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's parameters as detached fp32 copies, by name."""
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


def gradients(model: nn.Module, divide_by: float = 1.0) -> dict[str, torch.Tensor]:
    """The model's gradients as fp32 copies divided by the loss scale; zeros where None."""
    return {
        n: (
            p.grad.float() / divide_by
            if p.grad is not None
            else torch.zeros_like(p, dtype=torch.float32)
        )
        for n, p in model.named_parameters()
    }


@dataclass(frozen=True)
class Activations:
    """The largest |output| of each module in one forward pass, and the output's dtype."""

    max_abs: Mapping[str, float]
    dtype: Mapping[str, torch.dtype]

    def first_over(self, limit: float, only: torch.dtype) -> str | None:
        """The first module (in the order they finished) whose output exceeded ``limit``."""
        for name, value in self.max_abs.items():
            if self.dtype[name] == only and not value <= limit:
                return name
        return None

    def largest(self, only: torch.dtype | None = None) -> tuple[str, float]:
        """The module with the largest |output| (of dtype ``only`` if given): name, value."""
        names = [n for n in self.max_abs if only is None or self.dtype[n] == only]
        if not names:
            return "", 0.0
        # Modules are listed in the order they finished, so a tie names the first one.
        name = max(names, key=lambda n: self.max_abs[n])
        return name, self.max_abs[name]


ROOT_NAME = "(model)"


def _max_abs(out: Any) -> tuple[torch.Tensor, torch.dtype] | None:
    floats = [t for t in flatten_tensors(out) if t.is_floating_point() and t.numel()]
    if not floats:
        return None
    # NaN counts as an overflow: it is what inf - inf or 0 * inf leave behind.
    peaks = [torch.nan_to_num(t.detach().abs().float().amax(), nan=math.inf) for t in floats]
    return torch.stack(peaks).amax(), floats[0].dtype


@contextmanager
def record_activations(model: nn.Module) -> Iterator[dict[str, Activations]]:
    """Record every module's largest |output| during the ``with`` block.

    Yields a dict that holds ``{"result": Activations}`` after the block. The peaks stay
    on the device until the end, so the forward pass is not synchronised per module.
    """
    peaks: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    holder: dict[str, Activations] = {}
    modules = [(n, m) for n, m in model.named_modules() if n] + [(ROOT_NAME, model)]

    def hook_for(name: str) -> Any:
        def hook(_m: nn.Module, _args: Any, out: Any) -> None:
            found = _max_abs(out)
            if found is None:
                return
            peak, dtype = found
            peaks[name] = torch.maximum(peaks[name], peak) if name in peaks else peak
            dtypes[name] = dtype

        return hook

    handles = [m.register_forward_hook(hook_for(n)) for n, m in modules]
    try:
        yield holder
    finally:
        for handle in handles:
            handle.remove()
        # Insertion order is the order modules finished: the first overflow comes first.
        order = list(peaks)
        holder["result"] = Activations(
            {n: float(peaks[n]) for n in order}, {n: dtypes[n] for n in order}
        )
