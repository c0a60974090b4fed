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

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors

ROOT = "(model)"
# Which hook to trust when several see the same first non-finite gradient.
_PREFERENCE = {"grad_input": 0, "param_grad": 1, "grad_output": 2}


class NumericsProbe:
    """Forward hooks and tensor hooks on a model; see the module docstring."""

    def __init__(self, model: nn.Module, scale: float = 1.0) -> None:
        self.model = model
        self.scale = scale if scale > 0 else 1.0
        self.per_module: dict[str, dict[str, float | int]] = {}
        self.events: list[tuple[int, str, str, str]] = []  # (tick, phase, module, tensor)
        self._tick = 0
        self._last_grad: torch.Tensor | None = None  # held: an id() could be reused
        self._handles: list[Any] = []
        self._optimizer_event: tuple[str, str] | None = None

    def __enter__(self) -> NumericsProbe:
        for name, module in self.model.named_modules():
            label = name or ROOT
            self.per_module[label] = {"forward_max": 0.0, "grad_max": 0.0, "nonfinite": 0}
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(label)))
            self._handles.append(module.register_forward_hook(self._forward_hook(label)))
            for pname, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    hook = self._grad_hook(label, "param_grad", f"{pname}.grad")
                    self._handles.append(param.register_hook(hook))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def wrap_loss(
        self, loss: Callable[[nn.Module, Any], torch.Tensor]
    ) -> Callable[[nn.Module, Any], torch.Tensor]:
        """``loss`` that also notes a non-finite loss made outside any module."""

        def watched(model: nn.Module, batch: Any) -> torch.Tensor:
            value = loss(model, batch)
            if not bool(torch.isfinite(value.detach()).all()):
                self._event("forward", "loss", "loss")
            return value

        return watched

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

    # ------------------------------------------------------------------ hooks

    def _event(self, phase: str, module: str, tensor: str) -> None:
        self.events.append((self._tick, phase, module, tensor))

    def _pre_hook(self, label: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            for index, value in enumerate(flatten_tensors(inputs)):
                if value.requires_grad and value.is_floating_point():
                    value.register_hook(self._grad_hook(label, "grad_input", f"input{index}.grad"))

        return hook

    def _forward_hook(self, label: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            self._tick += 1
            for value in flatten_tensors(output):
                if not value.is_floating_point():
                    continue
                largest, bad = _measure(value)
                row = self.per_module[label]
                row["forward_max"] = max(float(row["forward_max"]), largest)
                if bad:
                    row["nonfinite"] = int(row["nonfinite"]) + bad
                    self._event("forward", label, "output")
                if value.requires_grad:
                    value.register_hook(self._grad_hook(label, "grad_output", "output.grad"))

        return hook

    def _grad_hook(self, label: str, kind: str, tensor: str) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if grad is not self._last_grad:  # one gradient seen by several hooks: one tick
                self._tick += 1
                self._last_grad = grad
            largest, bad = _measure(grad)
            row = self.per_module[label]
            if kind != "grad_input":  # an input's gradient is the previous module's output's
                row["grad_max"] = max(float(row["grad_max"]), largest / self.scale)
            if bad:
                row["nonfinite"] = int(row["nonfinite"]) + bad
                self._event("backward", label, f"{kind}:{tensor}")

        return hook


def _measure(value: torch.Tensor) -> tuple[float, int]:
    """The largest finite magnitude and the count of values that are not (host reads)."""
    data = value.detach()
    if data.numel() == 0:
        return 0.0, 0
    finite = torch.isfinite(data)
    bad = int((~finite).sum().item())
    largest = float(torch.where(finite, data.abs(), 0).max().item())
    return largest, bad
