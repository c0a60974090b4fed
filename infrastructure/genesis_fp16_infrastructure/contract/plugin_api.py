"""The contract between genesis-fp16 and its agent plugins.

A plugin is any object that satisfies :class:`AgentPlugin`. It is registered in the
``genesis_fp16.agents`` entry-point group of its own distribution; the entry point names
either the plugin object or a zero-argument callable that returns it::

    # pyproject.toml of a third-party agent
    [project.entry-points."genesis_fp16.agents"]
    my_agent = "my_agent.plugin:plugin"

The daemon loads a plugin whose ``api_version`` is one of :data:`SUPPORTED_API_VERSIONS`
(version 3 only added an optional capability, so a version-2 plugin loads and works
unchanged), and refuses any other, saying what changed since the plugin's version
(:func:`api_version_error`).

A plugin may declare the one optional capability, judged models
(:mod:`~genesis_fp16_infrastructure.contract.judging`: ``score_records``,
``judging_version``, ``loss_span``): the library then runs the served-model lifecycle
for it (candidates, the gate, the live watch, rollback, the operator's pin).

A plugin may declare the options its ``train`` reads from ``TrainRequest.options`` as an
``options`` attribute (a sequence of :class:`AgentOption`); operators then set them with
``genesis-fp16 train AGENT --option KEY=VALUE`` or
``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>=VALUE``, and a bad key or value is refused
before any training starts (:func:`parse_options`). A plugin without the attribute takes
no options.

The request and the result live beside this module (``train_request.py``,
``train_result.py``); each name is imported from the module that defines it, or by a
plugin from ``genesis_fp16.plugin_api``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.contract.train_result import TrainResult
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

if TYPE_CHECKING:
    import torch
    from torch import nn


__all__ = [
    "API_CHANGES",
    "API_VERSION",
    "SUPPORTED_API_VERSIONS",
    "AgentOption",
    "AgentPlugin",
    "OptionValue",
    "ProbeSetup",
    "TrainRequestError",
    "api_version_error",
    "declared_options",
    "ignored_request_fields",
    "parse_options",
]

API_VERSION = 3
# The versions a plugin may declare: 3 only added an optional capability to 2.
SUPPORTED_API_VERSIONS = (2, 3)

API_CHANGES: Mapping[int, str] = {
    2: "TrainRequest.precision is a PrecisionRequest, not a name: "
    "request.precision.requested is the name asked for ('auto', 'fp32', 'bf16', 'fp16')",
    3: "optional judged models: a plugin that declares score_records(checkpoint, request) "
    "-> RecordLosses, judging_version = 1 and loss_span gets the served-model lifecycle "
    "(a candidate per run, a promotion gate, a live watch with rollback, the operator's "
    "pin); nothing changed for a plugin that does not (api_version 2 still loads). "
    "Judged on held-out records when its train keeps request.training_rows(ids) and its "
    "task's extra_state() names them (trained_ids); else on its training data, labelled so",
}
"""What each version changed or added for a plugin written for the one before."""


def api_version_error(found: object) -> str:
    """Why a plugin declaring ``api_version = found`` is refused, and what changed since:

    >>> print(api_version_error(1))
    api_version 1, this genesis-fp16 supports 2 and 3; changed since 1: TrainRequest.precision ...
    """
    supported = " and ".join(str(v) for v in SUPPORTED_API_VERSIONS)
    message = f"api_version {found!r}, this genesis-fp16 supports {supported}"
    if isinstance(found, int) and found < API_VERSION:
        changes = [API_CHANGES[v] for v in range(found + 1, API_VERSION + 1) if v in API_CHANGES]
        message += f"; changed since {found}: " + "; ".join(changes)
    return message


class TrainRequestError(ValueError):
    """A plugin refuses a request: a bad option, data it cannot use, an unsupported layout.

    Its message is one line for the user: ``genesis-fp16 train`` prints it and exits 2,
    the daemon logs the run as failed. Other exceptions are bugs and keep their traceback.

    >>> raise TrainRequestError("my_agent: unknown option")
    Traceback (most recent call last):
    ...
    genesis_fp16_infrastructure.contract.plugin_api.TrainRequestError: my_agent: unknown option
    """


OptionValue = str | int | float | bool
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class AgentOption:
    """One option an agent's ``train`` reads from ``TrainRequest.options``.

    ``type`` is ``"str"``, ``"int"``, ``"float"`` or ``"bool"``; ``default`` is what the
    agent does when the option is not given (None: the agent decides, ``help`` says how);
    ``choices``, when set, are the only values accepted.

    >>> option = AgentOption("preset", "str", None, "component dtypes", choices=("a", "b"))
    >>> option.parse("a")
    'a'
    """

    name: str
    type: str
    default: OptionValue | None
    help: str
    choices: tuple[OptionValue, ...] | None = None

    def parse(self, value: Any) -> OptionValue:
        """``value`` (text from the CLI or .env, or already typed) as this option's type.

        Raises :class:`ValueError` with a message naming the value and what is valid.
        """
        kind = _TYPES[self.type]
        parsed: OptionValue
        if isinstance(value, str) and kind is not str:
            text = value.strip().lower()
            if kind is bool:
                if text not in _TRUE + _FALSE:
                    raise ValueError(f"{value!r} is not a boolean (true or false)")
                parsed = text in _TRUE
            else:
                try:
                    parsed = kind(text)
                except ValueError:
                    article = "an" if kind is int else "a"
                    raise ValueError(f"{value!r} is not {article} {self.type}") from None
        elif kind is float and isinstance(value, int) and not isinstance(value, bool):
            parsed = float(value)
        elif isinstance(value, str | int | float | bool) and isinstance(value, kind):
            if kind is int and isinstance(value, bool):
                raise ValueError(f"{value!r} is not an int")
            parsed = value
        else:
            raise ValueError(f"{value!r} is not {'an' if kind is int else 'a'} {self.type}")
        if self.choices is not None and parsed not in self.choices:
            choices = ", ".join(str(c) for c in self.choices)
            raise ValueError(f"{value!r} is not one of {choices}")
        return parsed

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"choices": list(self.choices) if self.choices else None}


def declared_options(plugin: object) -> tuple[AgentOption, ...]:
    """The options ``plugin`` declares (none when it has no ``options`` attribute)."""
    return tuple(getattr(plugin, "options", ()))


def ignored_request_fields(plugin: object) -> dict[str, str]:
    """The :class:`TrainRequest` fields ``plugin`` does not use, each with what it does instead.

    A plugin declares them as an ``ignored_request_fields`` mapping; the daemon and
    ``train`` then warn when an operator sets one of them (a setting or a flag) instead
    of letting it do nothing. A name that is not a field of ``TrainRequest`` is a bug in
    the plugin. A field of the precision request is named ``precision.<field>``
    (``precision.mode``: how ``auto`` is decided):

    >>> class Agent:
    ...     ignored_request_fields = {"checkpoint_steps": "one checkpoint, at the end"}
    >>> ignored_request_fields(Agent())
    {'checkpoint_steps': 'one checkpoint, at the end'}
    """
    declared = dict(getattr(plugin, "ignored_request_fields", {}))
    known = {f.name for f in fields(TrainRequest)}
    known |= {f"precision.{f.name}" for f in fields(PrecisionRequest)}
    unknown = sorted(set(declared) - known)
    if unknown:
        name = getattr(plugin, "name", type(plugin).__name__)
        raise TypeError(f"{name}: ignored_request_fields names no TrainRequest field: {unknown}")
    return declared


def parse_options(
    agent: str, declared: Sequence[AgentOption], given: Mapping[str, Any]
) -> dict[str, OptionValue]:
    """Check ``given`` against ``declared`` and return the typed values, keys lower-cased.

    Raises :class:`TrainRequestError`: one line naming the agent, the option and what is
    valid (the declared options, or the option's type and choices).

    >>> parse_options("my_agent", [AgentOption("lr", "float", 0.001, "step size")], {"lr": "0.01"})
    {'lr': 0.01}
    """
    import difflib

    by_name = {option.name: option for option in declared}
    out: dict[str, OptionValue] = {}
    for key, value in given.items():
        name = str(key).lower()
        option = by_name.get(name)
        if option is None:
            valid = ", ".join(by_name) or "none (this agent declares no options)"
            near = difflib.get_close_matches(name, list(by_name), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise TrainRequestError(
                f"agent {agent}: unknown option {name!r}; {hint}valid options: {valid}"
            )
        try:
            out[name] = option.parse(value)
        except ValueError as exc:
            raise TrainRequestError(f"agent {agent}: option {name}={exc}") from None
    return out


@dataclass(frozen=True)
class ProbeSetup:
    """What the precision probe needs from an agent, through the agent's own code.

    ``build_model`` returns a fresh FP32 model; called twice with the same seed set, it
    returns identical weights. ``batches[0]`` is the frozen probe batch and the rest feed
    the N-step part. ``split_batch`` halves a batch, for the minibatch-noise floor.
    ``components`` maps a component name to module-name prefixes that the probe may keep
    in FP32 (an "FP32 island").
    """

    build_model: Callable[[], nn.Module]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    batches: Sequence[Any]
    split_batch: Callable[[Any], tuple[Any, Any]]
    components: Mapping[str, Sequence[str]] = field(default_factory=dict)
    learning_rate: float = 1e-3


@runtime_checkable
class AgentPlugin(Protocol):
    """The interface every agent plugin implements."""

    api_version: int
    name: str
    description: str

    def generate_sample_data(self, out: Path, count: int, seed: int) -> Path:
        """Write a synthetic dataset to ``out`` and return the path to train on."""
        ...

    def train(self, request: TrainRequest) -> TrainResult:
        """Run one training job as the request says, through the precision core."""
        ...

    def probe_setup(self, data_path: Path | None, seed: int) -> ProbeSetup:
        """Return the model, loss and batches the precision probe runs on."""
        ...
