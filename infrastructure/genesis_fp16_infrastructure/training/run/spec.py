"""The run's fields, declared once: :class:`RunSpec`, its :class:`RunCallbacks`, one codec.

Both ways into a run build on it: the plugin API's ``TrainRequest`` (what the daemon or
``genesis-fp16 train`` asks an agent for) and the library's ``FitOptions`` (what ``fit()``
takes) are ``RunSpec`` subclasses. A field both need (the precision asked for, the
device, the budget, the checkpoint time bound, the guard, FSDP; and, through
``StepSpec``, which the trainer's ``TrainerConfig`` inherits too, the log interval and
the execution settings) is declared once, and ``TrainRequest.fit_options`` copies them
without naming one. Importable without torch::

    spec = RunSpec(precision=PrecisionRequest("auto", mode="measure"), steps=100)
    spec_from_json(RunSpec, json.loads(json.dumps(spec_to_json(spec)))) == spec  # True

:func:`spec_to_json` and :func:`spec_from_json` are the one codec of every such type (the
run file a child reads, the request torchrun's ranks read): callbacks are left out (they
cannot cross a process), paths travel as strings, the guard as its fields, and a type
with its own ``to_json``/``from_json`` (the precision request, a request's agent
snapshot) as that.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from genesis_fp16_infrastructure.record_codec import plain
from genesis_fp16_infrastructure.training.precision.precision_names import (
    GuardConfig,
    PrecisionRequest,
    as_request,
)

# At run time, not only for the type checker: the codec resolves every field's annotation
# to its real type (typing.get_type_hints), and on_log's names this one.
from genesis_fp16_infrastructure.training.reports import TrainingSummary
from genesis_fp16_infrastructure.training.step.step_spec import StepSpec

S = TypeVar("S", bound="RunSpec")


def _never_stop() -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class RunSpec(StepSpec):
    """What one run is asked to do, whoever asks (torch-free, frozen, JSON by the codec).

    - ``precision``: the :class:`PrecisionRequest` (what was asked, how ``auto`` is
      decided, the exclusions, the floor), which ``decide()`` answers in the run (see
      :mod:`genesis_fp16_infrastructure.training.precision.decide`). A bare name
      (``precision="bf16"``) is read as ``PrecisionRequest("bf16")``.
    - ``device``: ``cpu``, ``cuda`` or ``cuda:N``; ``seed``: the run's seed.
    - ``steps`` / ``epochs``: the budget of this run (optimizer steps, skipped ones
      included; epoch ends), whichever ends first.
    - ``resume``: continue from the newest valid checkpoint.
    - ``checkpoint_steps``: a periodic checkpoint every this many steps (None: a tenth of
      ``steps`` when given, else each validation of early stopping);
      ``checkpoint_seconds``: at least this often (None: no time bound); whichever first.
    - ``guard``: the precision guard's configuration; None turns it off.
    - ``fsdp``: under torchrun, shard with FSDP2 instead of DDP.
    - ``initial_loss_scale``: an fp16 run that does not resume a checkpoint starts its
      loss scale here (clamped to the scaler's floor and ceiling) instead of
      ``ScalerConfig.init_scale``: the daemon carries an agent's last scale between
      its runs (``precision/loss_scaler_config.py``). None: the scaler's own.
    - ``log_interval``, ``cuda_graph``, ``compile``: how each step reports and executes,
      :class:`~genesis_fp16_infrastructure.training.step.step_spec.StepSpec`'s (shared
      with the trainer's ``TrainerConfig``).
    """

    precision: PrecisionRequest = field(default_factory=PrecisionRequest)
    device: str = "cpu"
    steps: int | None = None
    epochs: int | None = None
    seed: int = 0
    resume: bool = True
    checkpoint_steps: int | None = None
    checkpoint_seconds: float | None = 60.0
    guard: GuardConfig | None = None
    fsdp: bool = False
    initial_loss_scale: float | None = None

    def __post_init__(self) -> None:
        # The library's shorthand, FitOptions(precision="bf16"): one type from here on.
        object.__setattr__(self, "precision", as_request(self.precision))


@dataclass(frozen=True, kw_only=True)
class RunCallbacks:
    """How a run talks back while it runs; never serialised. Whoever starts a run
    builds them once (the daemon's plan, ``train`` in a child) and sets them together
    (``TrainRequest.with_callbacks``).

    ``on_log`` receives a ``TrainingSummary`` every log interval and once more at the
    end; ``should_stop`` is polled before every step, and when it returns True the run
    checkpoints, evaluates and ends early; ``on_diagnostics`` receives an RL agent's
    diagnostics (``{name: float}``) after each iteration, which the daemon exports live
    as ``genesis_fp16_rl_*`` gauges (genesis_fp16/metrics/diagnostics_export.py).
    """

    on_log: Callable[[TrainingSummary], None] | None = None
    should_stop: Callable[[], bool] = _never_stop
    on_diagnostics: Callable[[Mapping[str, float]], object] | None = None


# The field types the codec rebuilds from JSON, by the type itself (an optional field's
# non-None type), besides a type with its own from_json; every other field's JSON value
# is its value (GuardConfig makes its JSON ladder a tuple itself).
_DECODERS: dict[type, Callable[[Any], Any]] = {
    Path: Path,
    GuardConfig: lambda raw: GuardConfig(**raw),
}


def _decoder(hint: object) -> Callable[[Any], Any] | None:
    if isinstance(hint, type) and hint in _DECODERS:
        return _DECODERS[hint]
    from_json = getattr(hint, "from_json", None)
    return from_json if callable(from_json) else None


def field_type(hint: object) -> object:
    """``X`` for ``X | None`` (or ``Optional[X]``); any other annotation as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        present = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(present) == 1:
            return present[0]
    return hint


_FIELD_TYPES: dict[type, dict[str, object]] = {}


def _field_types(cls: type) -> dict[str, object]:
    """Each dataclass field of ``cls`` and its real type, resolved once per class."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls] = {item.name: field_type(hints[item.name]) for item in fields(cls)}
    return _FIELD_TYPES[cls]


def _is_callback(cls: type, item: Field[Any]) -> bool:
    return typing.get_origin(_field_types(cls)[item.name]) is collections.abc.Callable


def spec_to_json(spec: RunSpec) -> dict[str, Any]:
    """``spec`` (a :class:`RunSpec` or a subclass) as JSON-ready data, callbacks left out;
    NaN and infinities become null."""
    out: dict[str, Any] = {}
    for item in fields(spec):
        if _is_callback(type(spec), item):
            continue
        value = getattr(spec, item.name)
        if callable(getattr(value, "to_json", None)):  # PrecisionRequest, AgentSnapshot
            value = value.to_json()
        elif is_dataclass(value) and not isinstance(value, type):
            value = asdict(value)
        out[item.name] = value
    result: dict[str, Any] = plain(out)  # paths as text, mappings as dicts, NaN as null
    return result


def spec_from_json(cls: type[S], data: Mapping[str, Any], **callbacks: Any) -> S:
    """The inverse of :func:`spec_to_json` for ``cls``; unknown keys are ignored (a newer
    daemon's run file), missing ones take their defaults, ``callbacks`` set the callbacks."""
    values: dict[str, Any] = {}
    for item in fields(cls):
        if _is_callback(cls, item) or item.name not in data:
            continue
        value = data[item.name]
        decoder = _decoder(_field_types(cls)[item.name])
        if value is not None and decoder is not None:
            value = decoder(value)
        values[item.name] = value
    return cls(**values, **callbacks)
