"""Catch device mistakes on a CPU: run code as if the run's device were not the host.

On a CPU-only machine every tensor and generator is on the CPU, so code that would fail
on a GPU (a CPU ``torch.Generator`` feeding ``torch.multinomial`` on CUDA tensors, a
tensor factory without ``device=`` added to the model's output, a model that was never
moved) runs fine and reaches main. :class:`DeviceAudit` gives every tensor a *logical*
device and raises where CUDA would have raised::

    with DeviceAudit():
        plugin.train(request)          # request.device is "cpu"
    # DeviceAuditError: torch.multinomial draws from a host generator for tensors on
    # the run's device (genesis_fp16_infrastructure.rl.rollout)

The rules, applied to every torch call made inside the block (a ``TorchFunctionMode``):

- a tensor made by a factory *without* ``device=`` (``torch.zeros(3)``, ``torch.tensor``,
  ``torch.randint(..., generator=g)``), by ``torch.load`` or by ``.cpu()`` is on the
  **host**; one made with ``device=...`` or moved with ``.to(device)`` is on the **run's
  device**; everything else inherits the device of its tensor arguments;
- a ``torch.Generator`` built without ``device=`` is on the host, one built with it is on
  the run's device; an op that draws from a generator must draw for its own device;
- one op must not mix host tensors with run-device tensors, except as CUDA allows:
  0-dim host tensors (scalars), index tensors in ``t[idx]`` / ``t[idx] = v``, and the
  source of ``copy_``.

What it cannot see: tensors autograd makes in C++ (gradients) carry no device until an
op mixes them with one that does; ``device="cpu"`` written out is read as the run's
device, since on a CPU run the two are the same name. It slows every op (a Python call
each), so audit a few steps, not a whole run.
"""

from __future__ import annotations

import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

Place = Literal["host", "run"]

# Factories: their output's device is the ``device=`` argument, or the host without one.
_FACTORIES: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn,
        torch.randint, torch.randperm, torch.arange, torch.linspace, torch.logspace,
        torch.eye, torch.tensor, torch.as_tensor, torch.scalar_tensor,
        torch.empty_strided, torch.from_numpy,
    }
)  # fmt: skip
# Ops whose result is where their first tensor is, whatever else they are given: host
# index tensors beside run-device data (CUDA accepts these), and deepcopy's memo.
_SELF_PLACED = frozenset(
    {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.__deepcopy__}
)
_HERE = str(Path(__file__).resolve())
_NOT_THE_CALLER = (
    str(Path(torch.__file__).resolve().parent),
    str(Path(sysconfig.get_paths()["stdlib"]).resolve()),
)


class DeviceAuditError(RuntimeError):
    """An op that would fail on a GPU: mixed devices, or a generator on the wrong one."""


class _AuditedGenerator(torch.Generator):
    """``torch.Generator`` while an audit runs: remembers whether ``device=`` was given."""

    audit_place: Place

    def __new__(cls, device: str | torch.device | int | None = None) -> _AuditedGenerator:
        made = super().__new__  # torch.Generator takes its device in __new__
        gen = made(cls) if device is None else made(cls, device)  # type: ignore[call-arg]
        gen.audit_place = "host" if device is None else "run"
        return gen

    def __init__(self, device: str | torch.device | int | None = None) -> None:
        pass  # torch.Generator is built in __new__


class DeviceAudit(TorchFunctionMode):
    """Raise :class:`DeviceAuditError` where the code inside would mix devices on a GPU.

    Use as a context manager around the code to audit (a few training steps)::

        >>> with DeviceAudit():
        ...     torch.zeros(2, device="cpu") + torch.ones(2)
        Traceback (most recent call last):
        ...
        genesis_fp16.testing.device_audit.DeviceAuditError: ...
    """

    def __init__(self) -> None:
        super().__init__()
        self._places: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._patches: list[tuple[Any, str, Any]] = []

    # -- entering and leaving: the generator and Parameter patches ---------------------

    def __enter__(self) -> DeviceAudit:
        self._patch(torch, "Generator", _AuditedGenerator)
        self._patch(torch, "load", self._audited_load(torch.load))
        original_new = torch.nn.Parameter.__new__
        places = self._places

        def parameter_new(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
            param: Any = original_new(cls, data, requires_grad)
            if data is not None and data in places:
                places[param] = places[data]  # a Parameter lives where its data does
            return param

        self._patch(torch.nn.Parameter, "__new__", staticmethod(parameter_new))
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        while self._patches:
            owner, name, before = self._patches.pop()
            setattr(owner, name, before)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _audited_load(self, load: Callable[..., Any]) -> Callable[..., Any]:
        def audited_load(*args: Any, **kwargs: Any) -> Any:
            loaded = load(*args, **kwargs)
            for leaf in tree_flatten(loaded)[0]:
                if isinstance(leaf, torch.Tensor):
                    self._places[leaf] = "host"  # map_location="cpu", or the saved device
            return loaded

        return audited_load

    # -- every torch call --------------------------------------------------------------

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        place = self._place_of_result(func, args, kwargs)
        generator = kwargs.get("generator")
        if isinstance(generator, _AuditedGenerator) and place is not None:
            _check_generator(func, generator, place)
        if place is not None:
            for leaf in tree_flatten(out)[0]:
                if isinstance(leaf, torch.Tensor):
                    self._places[leaf] = place
        return out

    def _place_of_result(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Place | None:
        if func in _FACTORIES:
            return "run" if kwargs.get("device") is not None else "host"
        if func is torch.Tensor.cpu:
            return "host"
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            return self._place_of_move(func, args, kwargs)
        if func is torch.Tensor.copy_ or func in _SELF_PLACED:
            return self._places.get(args[0])
        if func is torch._has_compatible_shallow_copy_type:
            return None  # Module.to asks it before moving a parameter: no arithmetic
        if _is_data_assignment(func) and args[1] in self._places:
            self._places[args[0]] = self._places[args[1]]  # param.data = moved: it moved
            return None
        return self._check_mixed(func, (args, kwargs))

    def _place_of_move(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Place | None:
        if func is torch.Tensor.cuda:
            return "run"
        first = args[1] if len(args) > 1 else None
        device = kwargs.get("device")
        if device is not None or isinstance(first, str | torch.device | int):
            return "run"  # .to(device): the move a run makes to its device
        other = first if isinstance(first, torch.Tensor) else kwargs.get("other")
        if isinstance(other, torch.Tensor):
            return self._places.get(other)  # .to(other): where ``other`` is
        return self._places.get(args[0])  # a dtype-only move stays where it was

    def _check_mixed(self, func: Callable[..., Any], tree: Any) -> Place | None:
        seen: set[Place] = set()
        for leaf in tree_flatten(tree)[0]:
            if not isinstance(leaf, torch.Tensor):
                continue
            place = self._places.get(leaf)
            if place is None or (place == "host" and leaf.dim() == 0):
                continue  # no known device, or a scalar, which CUDA lets through
            seen.add(place)
        if len(seen) > 1:
            _fail(f"{_name(func)} mixes host tensors with tensors on the run's device")
        return next(iter(seen), None)


def _name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", repr(func))
    return f"torch.Tensor.{name}" if getattr(torch.Tensor, name, None) is func else f"torch.{name}"


def _check_generator(func: Callable[..., Any], generator: _AuditedGenerator, place: Place) -> None:
    if generator.audit_place != place:
        _fail(
            f"{_name(func)} draws from a {generator.audit_place} generator for a "
            f"tensor on the {_words(place)}"
        )


def _is_data_assignment(func: Callable[..., Any]) -> bool:
    """``tensor.data = other``: a getset descriptor's ``__set__`` for ``data``."""
    descriptor = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__set__" and (
        getattr(descriptor, "__name__", "") == "data"
    )


def _words(place: Place) -> str:
    return "host" if place == "host" else "run's device"


def _fail(message: str) -> None:
    raise DeviceAuditError(f"{message} ({_caller()})")


def _caller() -> str:
    """The innermost frame outside torch, the standard library and this module."""
    for frame in reversed(traceback.extract_stack()):
        path = str(Path(frame.filename).resolve())
        if path != _HERE and not path.startswith(_NOT_THE_CALLER):
            return f"{_short(path)}:{frame.lineno}"
    return "unknown caller"


def _short(path: str) -> str:
    parts = Path(path).parts
    roots = ("genesis_fp16_agents", "genesis_fp16_infrastructure", "agents", "infrastructure")
    for root in (*roots, "genesis_fp16", "tests", "benchmarks"):
        if root in parts:
            return str(Path(*parts[len(parts) - parts[::-1].index(root) - 1 :]))
    return path
