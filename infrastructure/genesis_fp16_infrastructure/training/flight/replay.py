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

The hooks that find where a value went non-finite, and the side-by-side run of
``against_fp32``, are :mod:`.step_trace`'s (``NumericsProbe``, ``Trace``, ``compare``,
``advise``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from genesis_fp16_infrastructure.errors import BundleError
from genesis_fp16_infrastructure.precision_names import PRECISIONS, PrecisionName, precision_name
from genesis_fp16_infrastructure.training.flight.recorded_step import (
    allowed_types,
    rebuilt_batch,
    run_recorded_step,
)
from genesis_fp16_infrastructure.training.flight.step_trace import (
    NumericsProbe,
    Trace,
    advise,
    compare,
    traced_step,
)
from genesis_fp16_infrastructure.training.precision.precision import PrecisionPolicy
from genesis_fp16_infrastructure.training.step.trainer import Trainer, TrainerConfig

_CONFIG_FIELDS = ("max_grad_norm", "grad_accum_steps", "overflow_window", "log_interval")


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
    fp32 and in ``precision`` side by side (:mod:`.step_trace`)."""
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
