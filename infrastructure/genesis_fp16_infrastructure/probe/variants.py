"""The precision variants the probe compares, and how each one runs a forward pass.

Every variant starts from a deep copy of the same FP32 model. Families:

- ``fp32``: the reference, and its repeat (``fp32_repeat``) to measure its own noise.
- ``autocast``: ``torch.autocast`` around the agent's whole loss, as the trainer runs it.
- ``island``: autocast inside the model's modules only (``model(...)`` or the submodules
  the loss calls directly), the named modules forced to FP32 and the loss computed in
  FP32 from FP32 outputs. Islands are explicit because CPU autocast keeps log_softmax,
  exp and sum in 16-bit where CUDA autocast promotes them.
- ``pure``: a ``.half()`` / ``.bfloat16()`` copy with no FP32 master weights.

>>> [v.name for v in build_variants({"heads": ["head"]})][:4]
['fp32', 'fp32_repeat', 'bf16_autocast', 'fp16_autocast']
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from genesis_fp16_infrastructure.errors import ProbeError
from genesis_fp16_infrastructure.precision_names import LOSS_SCALED, PRECISIONS, PrecisionName
from genesis_fp16_infrastructure.training.precision.loss_scaler import LOW_DTYPES
from genesis_fp16_infrastructure.training.precision.precision import dtype_of

Family = Literal["fp32", "autocast", "island", "pure"]

# From the vocabulary (precision_names, loss_scaler): a new precision is probed without an edit.
_NAME_OF: dict[torch.dtype, PrecisionName] = {dtype_of(name): name for name in PRECISIONS}

# Lower is cheaper: fewer FP32 bytes and FP32 operations per step.
_COST_RANK: dict[Family, int] = {"pure": 0, "autocast": 1, "island": 2, "fp32": 4}


@dataclass(frozen=True)
class Variant:
    """One way of running the agent's model; ``name`` is what reports show."""

    name: str
    family: Family
    dtype: torch.dtype
    fp32_prefixes: tuple[str, ...] = ()

    @property
    def precision(self) -> PrecisionName:
        return _NAME_OF[self.dtype]

    @property
    def scaled(self) -> bool:
        """fp16 variants scale the loss (``LOSS_SCALED``); bf16 has fp32's exponent range
        and does not."""
        return self.precision in LOSS_SCALED

    @property
    def cost_rank(self) -> int:
        # An island with modules costs more than the loss alone in FP32.
        return _COST_RANK[self.family] + (1 if self.fp32_prefixes else 0)


def build_variants(components: Mapping[str, Sequence[str]]) -> list[Variant]:
    """All variants for a model with these FP32-island components, reference first."""
    variants = [
        Variant("fp32", "fp32", torch.float32),
        Variant("fp32_repeat", "fp32", torch.float32),
    ]
    variants += [Variant(f"{_NAME_OF[d]}_autocast", "autocast", d) for d in LOW_DTYPES]
    for dtype in LOW_DTYPES:
        name = _NAME_OF[dtype]
        variants.append(Variant(f"{name}_autocast+fp32[loss]", "island", dtype))
        for component, prefixes in components.items():
            variants.append(
                Variant(f"{name}_autocast+fp32[{component}]", "island", dtype, tuple(prefixes))
            )
    variants += [Variant(f"{_NAME_OF[d]}_pure", "pure", d) for d in LOW_DTYPES]
    return variants


def prepare_model(variant: Variant, base: nn.Module) -> nn.Module:
    """A fresh copy of ``base`` for this variant: cast to 16-bit for the pure family."""
    model = copy.deepcopy(base)
    if variant.family == "pure":
        model = model.to(variant.dtype)
    model.train()
    return model


def _submodule(model: nn.Module, prefix: str) -> nn.Module:
    try:
        return model.get_submodule(prefix)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n][:12]
        raise ProbeError(
            f"component module {prefix!r} is not in the model; modules include: {', '.join(names)}"
        ) from None


def _cast_floats(obj: Any, dtype: torch.dtype) -> Any:
    """``obj`` with every floating tensor inside it (tuples, named tuples, lists, dicts)
    cast to ``dtype``: torch's tree walk, as ``halve_batch`` cuts a batch."""
    return tree_map_only(torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t, obj)


LossFn = Callable[[nn.Module, Any], torch.Tensor]


def forward_loss(
    variant: Variant, model: nn.Module, loss_fn: LossFn, batch: Any, device_type: str
) -> torch.Tensor:
    """Run the agent's loss as this variant runs it; the result is an fp32 scalar."""
    if variant.family == "fp32":
        return loss_fn(model, batch).float()
    if variant.family == "autocast":
        with torch.autocast(device_type, dtype=variant.dtype):
            return loss_fn(model, batch).float()
    if variant.family == "pure":
        return loss_fn(model, _cast_floats(batch, variant.dtype)).float()
    islands = _Islands(variant, model, device_type)
    with islands.hooked(model):
        loss = loss_fn(model, batch).float()
    islands.check_ran()
    return loss


class _Islands:
    """Forward hooks on every module: autocast while the model runs, FP32 in its islands.

    The outermost module call, ``model(...)`` or a submodule the loss calls directly
    (``model.policy(...)``), enters autocast and casts its outputs to FP32, so what the
    loss computes between module calls runs in FP32. An island module runs with autocast
    off and its inputs cast to FP32, however deep it is called.
    """

    def __init__(self, variant: Variant, model: nn.Module, device_type: str) -> None:
        self.variant = variant
        self.device_type = device_type
        self.islands = {prefix: _submodule(model, prefix) for prefix in variant.fp32_prefixes}
        self.island_ids = {id(m) for m in self.islands.values()}
        self.ran: set[int] = set()
        # One entry per module call in progress: the context it entered (autocast, or none).
        self.open: list[AbstractContextManager[Any]] = []

    def pre(self, module: nn.Module, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        self.ran.add(id(module))
        island = id(module) in self.island_ids
        ctx: AbstractContextManager[Any] = nullcontext()
        if island or not self.open:
            ctx = torch.autocast(self.device_type, dtype=self.variant.dtype, enabled=not island)
        ctx.__enter__()
        self.open.append(ctx)
        if island:
            return _cast_floats(args, torch.float32), _cast_floats(kwargs, torch.float32)
        return None

    def post(self, _m: nn.Module, _args: Any, _kwargs: Any, out: Any) -> Any:
        self.open.pop().__exit__(None, None, None)
        return None if self.open else _cast_floats(out, torch.float32)

    @contextmanager
    def hooked(self, model: nn.Module) -> Iterator[None]:
        handles = []
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(self.pre, with_kwargs=True))
            handles.append(module.register_forward_hook(self.post, with_kwargs=True))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            while self.open:  # a forward that raised left its contexts open
                self.open.pop().__exit__(None, None, None)

    def check_ran(self) -> None:
        """An island variant whose model or islands never ran would be FP32 under a 16-bit name."""
        if not self.ran:
            raise ProbeError(
                "the agent's loss calls no module of the model (neither model(...) nor a "
                "submodule), so nothing runs under autocast; FP32-island variants need the "
                "loss to call the model or its modules"
            )
        idle = [p for p, m in self.islands.items() if id(m) not in self.ran]
        if idle:
            raise ProbeError(
                f"component module(s) {', '.join(map(repr, idle))} never ran during the "
                "agent's loss, so this variant would not keep them in FP32"
            )
