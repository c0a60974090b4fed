"""Run a fault bundle's step again: did it reproduce, where did it go non-finite, and what
would fp32 and bf16 have given on the same step.

Generic over what builds the model: a :class:`ReplayTarget` is a model builder and a
loss (any ``TrainingTask`` gives both, ``ReplayTarget.of_task``; a plugin gives them
through ``probe_setup``). The optimizers are the task's, or rebuilt from the classes and
param groups the bundle recorded::

    bundle = load_bundle(path)                      # always to the CPU first
    report = replay(bundle, ReplayTarget.of_task(task), device="cpu")
    report["reproduced"], report["first_nonfinite"]  # True, {"module": "0", "phase": ...}

Three runs of the step, each from the bundle's state (model, optimizers, scaler, RNG):

1. plain, as the run stepped it (eager): ``reproduced`` compares its non-finite pattern
   (each micro-batch's loss finite or not, the step skipped or not) and the bits of
   every finite loss with the recorded ones. A different device or precision than the
   recorded one is still compared, and said (``same_setup``).
2. instrumented: a forward hook on every module (its output's largest magnitude and
   non-finite count), tensor hooks on module outputs and inputs and on the parameters
   (the gradients, in the order backward makes them): the first module and phase
   (``forward``, ``backward``, ``optimizer``) where a value became non-finite.
3. once in each precision of ``PRECISIONS``: its loss and whether it skipped.
4. with ``against_fp32`` (a tolerance): traced in fp32 and in the replayed precision,
   side by side, the first departure and the advice (below).

Nothing the bundle names is imported: its batch types resolve against the target's
``batch_types``, and its model state is checked against the target's model, built on
the meta device, before anything is allocated (:func:`check_model_shapes`).

``replay --against fp32``: a bundle's step in fp32 and in its own precision, side by
side, module by module, and the first place the low-precision run leaves fp32.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import torch
from torch import nn
from torch.optim import Optimizer

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.training.flight.recorded_step import (
    allowed_types,
    rebuilt_batch,
    run_recorded_step,
)
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.precision.precision_names import (
    PRECISIONS,
    PrecisionName,
    precision_name,
)
from genesis_fp16_infrastructure.training.step.cuda_graph import flatten_tensors
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig

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
_CONFIG_FIELDS = ("max_grad_norm", "grad_accum_steps", "overflow_window", "log_interval")
# Which hook to trust when several see the same first non-finite gradient.
_PREFERENCE = {"grad_input": 0, "param_grad": 1, "grad_output": 2}


@dataclass(frozen=True)
class ReplayTarget:
    """What rebuilds a bundle's step: the model, the loss, and optionally the optimizers
    and schedulers (None: the optimizers from the bundle's record, no schedulers).
    ``batch_types``: the named tuples and dataclasses the bundle's batches may be built
    as (any other type named in a bundle is refused, never imported)."""

    build_model: Callable[[], nn.Module]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    build_optimizers: Callable[[nn.Module], Sequence[Optimizer]] | None = None
    build_schedulers: Callable[[Sequence[Optimizer]], Sequence[Any]] | None = None
    batch_types: Sequence[type] = ()

    @classmethod
    def of_task(cls, task: Any, batch_types: Sequence[type] = ()) -> ReplayTarget:
        """The target of a ``TrainingTask`` (its own model, loss, optimizers, schedulers)."""
        schedulers = getattr(task, "build_schedulers", None)  # optional: none without
        return cls(task.build_model, task.loss, task.build_optimizers, schedulers, batch_types)


def replay(
    bundle: Mapping[str, Any],
    target: ReplayTarget,
    precision: PrecisionName | None = None,
    device: str | None = None,
    against_fp32: float | None = None,
) -> dict[str, Any]:
    """The replay report (module docstring); ``precision``/``device``: the bundle's.
    ``against_fp32``: a tolerance; the report's ``against_fp32`` then holds the step in
    fp32 and in ``precision`` side by side (``replay --against fp32`` above)."""
    used_device = device or str(bundle["device"])
    if used_device.startswith("cuda") and not torch.cuda.is_available():
        raise BundleError(f"--device {used_device}: no CUDA device here (try --device cpu)")
    used = precision or precision_name(bundle["precision"], "the bundle's precision")
    types = allowed_types(target.batch_types)
    batches = [rebuilt_batch(b, types) for b in bundle["batches"]]
    samples = int(bundle.get("samples", 0)) or len(batches)
    recorded = bundle["recorded"]
    check_model_shapes(bundle, target)

    def fresh(name: PrecisionName) -> Trainer:
        return _trainer(bundle, target, name, used_device)

    outcome = run_recorded_step(fresh(used), target.loss, batches, samples)
    same_device = torch.device(used_device).type == torch.device(str(bundle["device"])).type
    same_setup = used == bundle["precision"] and same_device

    probed = fresh(used)
    probe, _ = traced_step(probed, target.loss, batches, samples, NumericsProbe)
    probe.after_step(probed.model)

    precisions = {}
    for name in PRECISIONS:
        other: Mapping[str, Any] | str = outcome
        if name != used:
            try:
                other = run_recorded_step(fresh(name), target.loss, batches, samples)
            except (RuntimeError, ValueError) as error:  # e.g. a precision this device cannot run
                other = f"not run: {str(error).splitlines()[0][:200]}"
        precisions[name] = _summary(other)
    report = {
        "bundle_step": int(bundle["step"]),
        "reason": bundle["reason"],
        "recorded": {
            "precision": bundle["precision"],
            "device": bundle["device"],
            **_summary(recorded),
        },
        "replayed": {"precision": used, "device": used_device, **_summary(outcome)},
        "same_setup": same_setup,
        "reproduced": reproduces(recorded, outcome),
        "first_nonfinite": probe.first_nonfinite(),
        "per_module": probe.per_module,
        "loss_scale": probed.scaler.get_scale(),  # 1.0 where no loss is scaled
        "precisions": precisions,
    }
    if against_fp32 is not None:
        report["against_fp32"] = _against_fp32(
            fresh, target.loss, used, batches, samples, against_fp32
        )
    return report


def _against_fp32(
    fresh: Callable[[PrecisionName], Trainer],
    loss: Callable[[nn.Module, Any], torch.Tensor],
    used: PrecisionName,
    batches: list[Any],
    samples: int,
    tolerance: float,
) -> dict[str, Any]:
    """The step in ``used`` and in fp32 side by side: the first departure and the advice."""
    low, _ = traced_step(fresh(used), loss, batches, samples, Trace)
    fp32, outcome = traced_step(fresh("fp32"), loss, batches, samples, Trace)
    report = compare(low, fp32, tolerance)
    finite = all(outcome["loss_finite"]) and not outcome["skipped"]
    report["fp32_step"] = _summary(outcome)
    report["advice"] = advise(
        used, report["first_departure"], report["forward_max"]["fp32"], finite
    )
    return report


def check_model_shapes(bundle: Mapping[str, Any], target: ReplayTarget) -> None:
    """Refuse, in one line, a bundle whose model state does not fit the model the target
    builds, before anything is allocated: the model is first built on the meta device
    (no memory), so a bundle cannot make replay build a model larger than itself."""
    try:
        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in target.build_model().state_dict().items()}
    except Exception:  # a model that cannot be built on meta: load_state_dict checks later
        return
    saved = bundle["state"].get("model") if isinstance(bundle["state"], Mapping) else None
    if not isinstance(saved, Mapping):
        raise BundleError("the bundle holds no model state")
    for key, shape in shapes.items():
        value = saved.get(key)
        if not isinstance(value, torch.Tensor):
            raise BundleError(f"the bundle's model state has no {key!r} (the model built here has)")
        if tuple(value.shape) != shape:
            raise BundleError(
                f"the bundle's {key} is {tuple(value.shape)}, the model built here has {shape}: "
                "not the model the run trained"
            )
    extra = sorted(set(saved) - set(shapes))
    if extra:
        raise BundleError(
            f"the bundle's model state has {extra[0]!r}, the model built here has not"
        )


def reproduces(recorded: Mapping[str, Any], outcome: Mapping[str, Any]) -> bool:
    """The same non-finite pattern, and the same loss bits wherever the loss was finite."""
    if bool(recorded["skipped"]) != bool(outcome["skipped"]):
        return False
    if list(recorded["loss_finite"]) != list(outcome["loss_finite"]):
        return False
    pairs = zip(recorded["loss_bits"], outcome["loss_bits"], recorded["loss_finite"], strict=True)
    return all(a == b for a, b, finite in pairs if finite)


def _summary(outcome: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(outcome, str):
        return {"error": outcome}
    losses = [v if math.isfinite(v) else None for v in outcome["loss"]]
    return {
        "loss": losses,
        "loss_finite": list(outcome["loss_finite"]),
        "skipped": outcome["skipped"],
    }


def _trainer(
    bundle: Mapping[str, Any], target: ReplayTarget, precision: PrecisionName, device: str
) -> Trainer:
    """A fresh eager trainer in ``precision`` on ``device``, at the bundle's state."""
    policy = PrecisionPolicy.create(precision, device, announce=False)
    model = target.build_model().to(policy.device)
    state = dict(bundle["state"])
    if target.build_optimizers is not None:
        optimizers = list(target.build_optimizers(model))
    else:
        optimizers = _rebuilt_optimizers(bundle, model)
    schedulers: list[Any] = []
    if target.build_schedulers is not None and state.get("scheduler"):
        schedulers = list(target.build_schedulers(optimizers))
    else:
        state["scheduler"] = []  # the learning rate is in the optimizers' param groups
    saved = dict(bundle.get("config") or {})  # the run's TrainerConfig, as plain data
    try:
        config = TrainerConfig(
            **{k: saved[k] for k in _CONFIG_FIELDS if k in saved}, cuda_graph="off", compile="off"
        )
    except (TypeError, ValueError) as error:
        raise BundleError(f"the bundle's trainer settings are not valid: {error}") from None
    trainer = Trainer(model, optimizers, policy, config, schedulers)
    try:
        trainer.load_state_dict(state)  # model, optimizers, scaler, RNG: the step's start
    except (RuntimeError, ValueError, KeyError) as error:
        first = str(error).strip().splitlines()[0][:200]
        raise BundleError(
            f"the bundle's state does not fit the model built here: {first}"
        ) from None
    return trainer


def _rebuilt_optimizers(bundle: Mapping[str, Any], model: nn.Module) -> list[Optimizer]:
    """The bundle's optimizers (``torch.optim`` classes only) over ``model``'s parameters,
    with its param groups' settings; their state is loaded with the trainer's."""
    names = list(bundle.get("optimizers", []))
    states = bundle["state"]["optimizer"]
    params = list(model.parameters())
    out: list[Optimizer] = []
    taken = 0
    for name, state in zip(names, states, strict=True):
        module, _, qualname = str(name).partition(":")
        cls = getattr(torch.optim, qualname, None)
        if not module.startswith("torch.optim") or not isinstance(cls, type):
            raise BundleError(f"optimizer {name!r}: only torch.optim classes are rebuilt here")
        groups = []
        for group in state["param_groups"]:
            count = len(group["params"])
            settings = {k: v for k, v in group.items() if k != "params"}
            groups.append({"params": params[taken : taken + count], **settings})
            taken += count
        out.append(cls(groups))
    return out


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
