"""The hooks of a replayed step, and its run in fp32 and in its own precision side by side
(``replay --against fp32``). A replay (:mod:`.replay`) runs a bundle's step under them:
``NumericsProbe`` finds the first module and phase where a value went non-finite; two
traces (``Trace``), one per precision, are compared module by module (:func:`compare`),
and the first place the low-precision run leaves fp32 is advised on (:func:`advise`)::

    low, _ = traced_step(trainer, loss, batches, samples, Trace)
    report = compare(low, fp32, tolerance=0.1)

Both runs start from the bundle's state (model, optimizers, scaler, RNG) and take its
batches. A forward hook on every module keeps its output, and a tensor hook on that
output keeps the gradient arriving at it in backward (the module's backward hook, in the
order autograd makes them); parameter hooks keep each parameter's gradient. The two
traces are walked in the low-precision run's order, forward first, and each tensor is
compared with fp32's: it *departs* when it is not finite where fp32's is, or when
``max|low - fp32| > tolerance * max|fp32|`` (a relative error over the whole tensor, so
a few tiny entries do not count). Gradients of an fp16 run are divided by its loss
scale first, as the optimizer sees them::

    report = replay(bundle, target, against_fp32=0.1)["against_fp32"]
    report["first_departure"]   # {"module": "trunk.0", "phase": "forward", "low": inf, ...}
    report["advice"]            # {"action": "bf16", "why": "fp16 overflows at ..."}

What it advises, and why (:func:`advise`):

- ``learning_rate``: the values grow everywhere: fp32 itself is not finite, or more
  than half the modules' outputs are beyond the low precision's range in fp32 too. No precision
  holds a step that diverges; a smaller step does.
- ``bf16``: an fp16 run overflows where fp32's value is beyond fp16's 65504 but within
  bf16's range (bf16 has fp32's exponent): the range, not the precision, is short.
- ``fp32_exception``: one module's values depart (lost precision, or its range alone):
  keep that module in fp32 and the rest in low precision.

Every hook reads its tensor (a copy, on the host): for replays only, never a run's step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import torch
from torch import nn

from genesis_fp16_infrastructure.precision_names import PrecisionName
from genesis_fp16_infrastructure.training.flight.recorded_step import run_recorded_step
from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors

RANGE = {
    "fp16": float(torch.finfo(torch.float16).max),
    "bf16": float(torch.finfo(torch.bfloat16).max),
}
RANGE["fp32"] = float(torch.finfo(torch.float32).max)
DEFAULT_TOLERANCE = 0.1
ROOT = "(model)"  # the model's own module
# "Everything grows": more than this share of the modules (without children) is beyond
# the low precision's range in fp32 as well.
GROWN_SHARE = 0.5
_Hooks = TypeVar("_Hooks", bound="Trace")
# Which hook to trust when several see the same first non-finite gradient.
_PREFERENCE = {"grad_input": 0, "param_grad": 1, "grad_output": 2}


@dataclass
class _Entry:
    phase: str  # forward, backward
    module: str
    tensor: str  # output, output.grad, weight.grad, value (the loss)
    value: torch.Tensor  # a float32 copy, on the CPU


class Trace:
    """The tensors of one step, in the order they were made; see the module docstring.

    The hooks of the module docstring (and, with ``inputs``, on each module's tensor
    inputs: the gradient its backward produced) hand each tensor to :meth:`seen` in the
    order it is made: a trace keeps copies, the replay's ``NumericsProbe`` magnitudes."""

    inputs = False  # also hook each module's tensor inputs

    def __init__(self, model: nn.Module, scale: float = 1.0) -> None:
        self.model = model
        self.scale = scale if scale > 0 else 1.0  # the loss scale in the gradients
        self._handles: list[Any] = []
        self.entries: list[_Entry] = []
        # Modules without children: a container's output repeats its last child's.
        self.leaves = {n or ROOT for n, m in model.named_modules() if not any(m.children())}

    def __enter__(self) -> Self:
        for name, module in self.model.named_modules():
            label = name or ROOT
            if self.inputs:
                self._handles.append(module.register_forward_pre_hook(self._pre_hook(label)))
            self._handles.append(module.register_forward_hook(self._forward(label)))
            for pname, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    hook = self._backward(label, "param_grad", f"{pname}.grad")
                    self._handles.append(param.register_hook(hook))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def wrap_loss(
        self, loss: Callable[[nn.Module, Any], torch.Tensor]
    ) -> Callable[[nn.Module, Any], torch.Tensor]:
        """``loss`` whose value is seen too (it may be made outside any module)."""

        def watched(model: nn.Module, batch: Any) -> torch.Tensor:
            value = loss(model, batch)
            self.seen("forward", "loss", "loss", "value", value)
            return value

        return watched

    def seen(self, phase: str, module: str, kind: str, tensor: str, value: torch.Tensor) -> None:
        """One tensor of ``module`` (``kind``: output, grad_output, grad_input, param_grad,
        loss), named ``tensor`` (output, output1, output.grad, input0.grad, weight.grad)."""
        scale = self.scale if phase == "backward" else 1.0
        self.entries.append(_Entry(phase, module, tensor, _copy(value, scale)))

    def _pre_hook(self, label: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            for index, value in enumerate(flatten_tensors(inputs)):
                if value.requires_grad and value.is_floating_point():
                    value.register_hook(self._backward(label, "grad_input", f"input{index}.grad"))

        return hook

    def _forward(self, label: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            floats = [t for t in flatten_tensors(output) if t.is_floating_point()]
            for index, value in enumerate(floats):
                name = "output" if index == 0 else f"output{index}"
                self.seen("forward", label, "output", name, value)
                if value.requires_grad:
                    value.register_hook(self._backward(label, "grad_output", f"{name}.grad"))

        return hook

    def _backward(self, label: str, kind: str, tensor: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            self.seen("backward", label, kind, tensor, grad)

        return hook


def traced_step(
    trainer: Any,
    loss: Callable[..., torch.Tensor],
    batches: list[Any],
    samples: int,
    hooks: Callable[[nn.Module, float], _Hooks],
) -> tuple[_Hooks, dict[str, Any]]:
    """One recorded step of ``trainer`` under ``hooks`` (a :class:`Trace`, or the replay's
    ``NumericsProbe``) on its model; the hooks and the step's outcome."""
    trace = hooks(trainer.model, trainer.scaler.get_scale())  # 1.0 where no loss is scaled
    with trace:
        outcome = run_recorded_step(trainer, trace.wrap_loss(loss), batches, samples)
    return trace, outcome


def compare(low: Trace, fp32: Trace, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """The first tensor of ``low`` that departs from ``fp32``'s (module docstring), each
    module's largest forward magnitude in both, and the advice."""
    reference = _by_key(fp32.entries)
    first = None
    for key, entry in _by_key(low.entries).items():  # in the low-precision run's order
        other = reference.get(key)
        if other is None or other.value.shape != entry.value.shape:
            continue
        departure = _departure(entry.value, other.value, tolerance)
        if departure is not None:
            first = {"module": entry.module, "phase": entry.phase, "tensor": entry.tensor}
            first.update(departure)
            break
    keep = low.leaves | {"loss"}
    ranges = {"low": _forward_max(low.entries, keep), "fp32": _forward_max(fp32.entries, keep)}
    return {"first_departure": first, "tolerance": tolerance, "forward_max": ranges}


def advise(
    precision: PrecisionName,
    first: Mapping[str, Any] | None,
    fp32_max: Mapping[str, float],
    fp32_finite: bool,
) -> dict[str, str]:
    """What to change, and why (module docstring): ``{"action", "why"}``."""
    limit = RANGE[precision]
    modules = [m for m in fp32_max if m != "loss"]
    beyond = [m for m in modules if not math.isfinite(fp32_max[m]) or fp32_max[m] > limit]
    if not fp32_finite or (modules and len(beyond) / len(modules) > GROWN_SHARE):
        why = (
            "the step is not finite in fp32 either"
            if not fp32_finite
            else f"{len(beyond)} of {len(modules)} modules' outputs are beyond {precision}'s "
            f"range ({limit:.4g}) in fp32 too"
        )
        return {
            "action": "learning_rate",
            "why": f"{why}: the values grow everywhere, which no precision holds; lower "
            "the learning rate (or clip harder)",
        }
    if first is None:
        return {"action": "none", "why": "no tensor leaves fp32 by more than the tolerance"}
    reference = abs(float(first["fp32"]))
    overflow = not math.isfinite(float(first["low"])) or reference > RANGE["fp16"]
    if precision == "fp16" and overflow and reference <= RANGE["bf16"]:
        return {
            "action": "bf16",
            "why": f"fp16 overflows in {first['module']} ({first['phase']}): fp32 gives "
            f"{float(first['fp32']):.4g}, beyond fp16's {RANGE['fp16']:.0f}; bf16 has fp32's "
            f"range (up to {RANGE['bf16']:.3g}) and holds it",
        }
    return {
        "action": "fp32_exception",
        "why": f"one module's values depart first: {first['module']} ({first['phase']}, "
        f"{first['tensor']}) gives {float(first['low']):.4g} against fp32's "
        f"{float(first['fp32']):.4g}; keep {first['module']} in fp32 and the rest in {precision}",
    }


def _departure(low: torch.Tensor, ref: torch.Tensor, tolerance: float) -> dict[str, Any] | None:
    """Where ``low`` leaves ``ref``: its worst element's two values and the relative error."""
    if low.numel() == 0:
        return None
    bad = ~torch.isfinite(low) & torch.isfinite(ref)
    if bool(bad.any()):
        at = int(bad.flatten().nonzero()[0])
        return _values(low, ref, at, math.inf, "not finite")
    scale = float(ref.abs().max()) if bool(torch.isfinite(ref).all()) else math.inf
    diff = (low - ref).abs()
    diff = torch.where(torch.isfinite(diff), diff, 0)
    worst = float(diff.max())
    relative = worst / scale if scale > 0 else (math.inf if worst > 0 else 0.0)
    if relative <= tolerance:
        return None
    return _values(low, ref, int(diff.flatten().argmax()), relative, "beyond the tolerance")


def _values(
    low: torch.Tensor, ref: torch.Tensor, at: int, relative: float, kind: str
) -> dict[str, Any]:
    return {
        "low": float(low.flatten()[at]),
        "fp32": float(ref.flatten()[at]),
        "relative_error": relative,
        "kind": kind,
    }


def _by_key(entries: list[_Entry]) -> dict[tuple[str, str, str, int], _Entry]:
    """Each entry under its phase, module, tensor and how many came before it with those."""
    out: dict[tuple[str, str, str, int], _Entry] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for entry in entries:
        key = (entry.phase, entry.module, entry.tensor)
        out[(*key, counts.get(key, 0))] = entry
        counts[key] = counts.get(key, 0) + 1
    return out


def _forward_max(entries: list[_Entry], keep: set[str]) -> dict[str, float]:
    """Each module's (of ``keep``) largest forward magnitude (inf where any was not finite)."""
    out: dict[str, float] = {}
    for entry in entries:
        if entry.phase != "forward" or entry.value.numel() == 0 or entry.module not in keep:
            continue
        value = entry.value
        largest = float(value.abs().max()) if bool(torch.isfinite(value).all()) else math.inf
        out[entry.module] = max(out.get(entry.module, 0.0), largest)
    return out


def _copy(value: torch.Tensor, scale: float) -> torch.Tensor:
    """A float32 CPU copy (a host read), divided by ``scale`` (a gradient's loss scale)."""
    return (value.detach().float() / scale).cpu()


class NumericsProbe(Trace):
    """Hooks that watch one step's numbers, module by module, in the order they are made.

    Used by ``replay`` only, never on a run's step: every hook reads its tensor on the host.
    Forward: a hook on every module records its output's largest magnitude and non-finite
    count. Backward: tensor hooks on each module's output (the gradient arriving at it),
    on each module's tensor inputs (the gradient its backward produced) and on each
    parameter (its gradient), in the order autograd makes them. Optimizer: the parameters
    after the update::

        probe = NumericsProbe(model, scale=65536.0)
        with probe:
            ...  # one step, its loss through probe.wrap_loss(loss)
        probe.after_step(model)
        probe.first_nonfinite()   # {"module": "layers.3", "phase": "forward", "tensor": "output"}
        probe.per_module          # {"layers.3": {"forward_max": inf, "grad_max": ..., ...}}

    A gradient's tensor is both one module's output and the next one's input: where both
    hooks see the same non-finite gradient first, the module whose backward produced it
    (the input's) is named; one arriving at the model's own output comes from the loss
    (``{"module": "loss", "phase": "backward"}``). Gradient magnitudes are reported
    unscaled (divided by ``scale``).
    """

    inputs = True  # an input's gradient: what the module's own backward produced

    def __init__(self, model: nn.Module, scale: float = 1.0) -> None:
        super().__init__(model, scale)
        self.per_module: dict[str, dict[str, float | int]] = {
            name or ROOT: {"forward_max": 0.0, "grad_max": 0.0, "nonfinite": 0}
            for name, _ in model.named_modules()
        }
        self.events: list[tuple[int, str, str, str]] = []  # (tick, phase, module, kind:tensor)
        self._tick = 0
        self._last_grad: torch.Tensor | None = None  # held: an id() could be reused
        self._optimizer_event: tuple[str, str] | None = None

    def after_step(self, model: nn.Module) -> None:
        """Look at the parameters after the optimizer's update."""
        for name, module in model.named_modules():
            for pname, param in module.named_parameters(recurse=False):
                if not bool(torch.isfinite(param.detach()).all()):
                    self._optimizer_event = (name or ROOT, pname)
                    return

    def first_nonfinite(self) -> dict[str, str] | None:
        """The first module, phase and tensor where a value was not finite; None if none."""
        if self.events:
            tick = self.events[0][0]
            same = [e for e in self.events if e[0] == tick]
            if any(e[2] == ROOT and e[3].startswith("grad_output") for e in same):
                # The gradient arriving at the model's own output comes from the loss.
                return {"module": "loss", "phase": "backward", "tensor": "grad"}
            _, phase, module, tensor = min(
                same, key=lambda e: _PREFERENCE.get(e[3].split(":")[0], 3)
            )
            return {"module": module, "phase": phase, "tensor": tensor.split(":")[-1]}
        if self._optimizer_event is not None:
            module, pname = self._optimizer_event
            return {"module": module, "phase": "optimizer", "tensor": pname}
        return None

    def seen(self, phase: str, module: str, kind: str, tensor: str, value: torch.Tensor) -> None:
        if kind == "loss":  # a non-finite loss made outside any module is noted
            if not bool(torch.isfinite(value.detach()).all()):
                self.events.append((self._tick, "forward", "loss", "loss"))
            return
        if kind != "output" and value is not self._last_grad:  # one gradient, several hooks
            self._tick += 1
            self._last_grad = value
        elif tensor == "output":  # a module call's first output: one tick per call
            self._tick += 1
        largest, bad = _measure(value)
        row = self.per_module[module]
        if kind == "output":
            row["forward_max"] = max(float(row["forward_max"]), largest)
        elif kind != "grad_input":  # an input's gradient is the previous module's output's
            row["grad_max"] = max(float(row["grad_max"]), largest / self.scale)
        if bad:  # a module's outputs are named as one: output, output.grad
            row["nonfinite"] = int(row["nonfinite"]) + bad
            name = {"output": "output", "grad_output": "output.grad"}.get(kind, tensor)
            self.events.append((self._tick, phase, module, f"{kind}:{name}"))


def _measure(value: torch.Tensor) -> tuple[float, int]:
    """The largest finite magnitude and the count of values that are not (host reads)."""
    data = value.detach()
    if data.numel() == 0:
        return 0.0, 0
    finite = torch.isfinite(data)
    bad = int((~finite).sum().item())
    largest = float(torch.where(finite, data.abs(), 0).max().item())
    return largest, bad
