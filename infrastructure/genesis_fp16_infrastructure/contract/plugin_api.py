"""The contract between genesis-fp16 and its agent plugins, in one place.

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

**Required** (:class:`AgentPlugin`): ``api_version``, ``name``, ``description``,
``generate_sample_data(out, count, seed)``, ``train(request)`` and
``probe_setup(data_path, seed)``.

**Optional capabilities**, each a :class:`~typing.Protocol` below that a plugin satisfies by
declaring its members; the loader reads and checks them all once, when it loads the plugin
(:func:`capabilities_of`: a capability declared half or wrong refuses the plugin in one
line), and ``genesis-fp16 check-agent`` prints one ``HAS`` line for each it has:

- :class:`TakesOptions` (``options``): the options its ``train`` reads from
  ``TrainRequest.options``, a sequence of :class:`AgentOption`. Operators set them with
  ``genesis-fp16 train AGENT --option KEY=VALUE`` or
  ``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>=VALUE``; a bad key or value is refused
  before any training starts (:func:`parse_options`). Without it, the plugin takes none.
- :class:`IgnoresRequestFields` (``ignored_request_fields``): the request fields its
  ``train`` does not use, each with what it does instead; an operator who sets one is
  warned (:func:`ignored_request_fields`).
- :class:`ReadsDataFolder` (``data_folder = True``): with no data path configured, it
  trains on its whole data folder, not on its one generated sample file.
- :class:`ChecksData` (``check_data(request) -> DataCheck``): the data scanned once by
  the daemon's plan; an unchanged folder is answered without starting a run.
- :class:`ReplaysSteps` (``replay_task(context)``, and :class:`NamesBatchTypes`,
  ``batch_types``): ``genesis-fp16 replay`` rebuilds a fault bundle's step with it.
- :class:`~genesis_fp16_infrastructure.contract.judging.JudgedPlugin` (``score_records``,
  ``judging_version``, ``loss_span``; optionally ``judging_margin``,
  ``judging_margin_floor`` and ``records_are_training_data``): judged models
  (:mod:`~genesis_fp16_infrastructure.contract.judging`): the library then runs the
  served-model lifecycle for it (candidates, the gate, the live watch, rollback, the
  operator's pin).

No other member of a plugin is read (``tests/test_plugin_protocol.py`` fails on a
``getattr``/``hasattr`` of a plugin outside the checks here).

A plugin's result is checked field by field before anyone uses it
(:func:`check_result`, :class:`TrainResultError`): a dataclass does not check its
fields' types, so a result holding the wrong thing (plugin API 1's
``precision_requested=request.precision``, a ``PrecisionRequest`` since API 2; a loss
left as a tensor) used to fail much later, as a ``json.dumps`` traceback in the run's
child process; ``train``, the daemon's in-process runs and ``check-agent`` call it on
every result a plugin returns, and it names the field in one line.

The request and the result live beside this module (``train_request.py``,
``reports.py``); each name is imported from the module that defines it, or by a
plugin from ``genesis_fp16.plugin_api``.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from os import PathLike
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    runtime_checkable,
)

from genesis_fp16_infrastructure.contract.agent_snapshot import DataCheck
from genesis_fp16_infrastructure.contract.judging import (
    JudgedPlugin,
    ListsRecords,
    judging_of,
    records_are_training_data,
)
from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.record_codec import Record, ReportError, plain
from genesis_fp16_infrastructure.training.precision.precision_request import PrecisionRequest

if TYPE_CHECKING:
    import torch
    from torch import nn


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


def api_version_error(found: object) -> str | None:
    """Why a plugin declaring ``api_version = found`` is refused, and what changed since;
    None: a version this genesis-fp16 loads.

    >>> print(api_version_error(1))
    api_version 1, this genesis-fp16 supports 2 and 3; changed since 1: TrainRequest.precision ...
    """
    if found in SUPPORTED_API_VERSIONS:
        return None
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
_TYPES: dict[str, type[OptionValue]] = {"str": str, "int": int, "float": float, "bool": bool}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class AgentOption(Record):
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
        parsed: OptionValue | None = value
        if isinstance(value, str) and kind is bool:
            text = value.strip().lower()
            if text not in _TRUE + _FALSE:
                raise ValueError(f"{value!r} is not a boolean (true or false)")
            parsed = text in _TRUE
        elif isinstance(value, str) and kind is not str:
            try:
                parsed = kind(value.strip().lower())
            except ValueError:
                parsed = None  # refused below, as a value of another type is
        elif kind is float and isinstance(value, int) and not isinstance(value, bool):
            parsed = float(value)
        if not isinstance(parsed, kind) or (kind is not bool and isinstance(parsed, bool)):
            raise ValueError(f"{value!r} is not {'an' if kind is int else 'a'} {self.type}")
        if self.choices is not None and parsed not in self.choices:
            choices = ", ".join(str(c) for c in self.choices)
            raise ValueError(f"{value!r} is not one of {choices}")
        return parsed


def declared_options(plugin: object) -> tuple[AgentOption, ...]:
    """The options ``plugin`` declares (:class:`TakesOptions`; none when it does not)."""
    return tuple(plugin.options) if isinstance(plugin, TakesOptions) else ()


def ignored_request_fields(plugin: object) -> dict[str, str]:
    """The :class:`TrainRequest` fields ``plugin`` does not use, each with what it does instead.

    A plugin declares them as an ``ignored_request_fields`` mapping
    (:class:`IgnoresRequestFields`); the daemon and ``train`` then warn when an operator
    sets one of them (a setting or a flag) instead of letting it do nothing. A name that
    is not a field of ``TrainRequest`` is a bug in the plugin. A field of the precision
    request is named ``precision.<field>`` (``precision.mode``: how ``auto`` is decided):

    >>> class Agent:
    ...     ignored_request_fields = {"checkpoint_steps": "one checkpoint, at the end"}
    >>> ignored_request_fields(Agent())
    {'checkpoint_steps': 'one checkpoint, at the end'}
    """
    if not isinstance(plugin, IgnoresRequestFields):
        return {}
    declared = dict(plugin.ignored_request_fields)
    known = {f.name for f in fields(TrainRequest)}
    known |= {f"precision.{f.name}" for f in fields(PrecisionRequest)}
    unknown = sorted(set(declared) - known)
    if unknown:
        raise TypeError(
            f"{plugin_name(plugin)}: ignored_request_fields names no TrainRequest field: {unknown}"
        )
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
    the N-step part. ``split_batch`` halves a batch, for the minibatch-noise floor (None,
    the default: the probe cuts every tensor of the batch, in its tuples, lists and dicts,
    in two along its first dimension, ``len // 2`` rows first). ``components`` maps a
    component name to module-name prefixes that the probe may keep in FP32 (an "FP32
    island").
    """

    build_model: Callable[[], nn.Module]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    batches: Sequence[Any]
    split_batch: Callable[[Any], tuple[Any, Any]] | None = None
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


@runtime_checkable
class _Named(Protocol):
    name: str


def plugin_name(plugin: object) -> str:
    """The plugin's name for a message (its class's while it has none): the judged run
    reads it of a value typed ``JudgedPlugin``, which does not declare it."""
    return str(plugin.name) if isinstance(plugin, _Named) else type(plugin).__name__


@runtime_checkable
class TakesOptions(Protocol):
    """Options: what its ``train`` reads from ``TrainRequest.options`` (module docstring)."""

    options: Sequence[AgentOption]


@runtime_checkable
class IgnoresRequestFields(Protocol):
    """The request fields its ``train`` does not use, each with what it does instead."""

    ignored_request_fields: Mapping[str, str]


@runtime_checkable
class ReadsDataFolder(Protocol):
    """``data_folder = True``: with no data path configured it trains on its whole data
    folder (the generated sample and every file beside it), not on the one sample file."""

    data_folder: bool


@runtime_checkable
class ChecksData(Protocol):
    """The data scanned once by the run's plan: when nothing changed since the served
    model's run, the :class:`DataCheck` carries that run's result and no run starts."""

    def check_data(self, request: TrainRequest) -> DataCheck:
        """The data files of ``request`` scanned, and whether anything changed."""
        ...


@runtime_checkable
class ReplaysSteps(Protocol):
    """``genesis-fp16 replay`` rebuilds a fault bundle's step with the task this returns
    (the bundle's context: its request, its rebuild record, the device)."""

    def replay_task(self, context: Mapping[str, Any]) -> Any:
        """The run's ``TrainingTask``, rebuilt from a fault bundle's ``context``."""
        ...


@runtime_checkable
class NamesBatchTypes(Protocol):
    """The named tuples and dataclasses a fault bundle's batches may be rebuilt as."""

    batch_types: Sequence[type]


@dataclass(frozen=True)
class Capabilities:
    """The optional capabilities one plugin declares, read and checked once
    (:func:`capabilities_of`); each field is the capability's value, or its absence
    (empty, False, None)."""

    options: tuple[AgentOption, ...] = ()
    ignored_request_fields: Mapping[str, str] = field(default_factory=dict)
    data_folder: bool = False
    check_data: Callable[[TrainRequest], DataCheck] | None = None
    replay_task: Callable[[Mapping[str, Any]], Any] | None = None
    batch_types: tuple[type, ...] = ()
    judged: JudgedPlugin | None = None
    # A judged plugin's ``records_are_training_data`` (judging's DeclaresRecords): False
    # when its scored records are evaluation episodes it never trains on.
    records_are_training_data: bool = True

    def lines(self) -> list[str]:
        """One line for each capability declared, as ``check-agent`` prints them.

        >>> for line in Capabilities(data_folder=True, batch_types=(int,)).lines():
        ...     print(line)
        data_folder: trains on its whole data folder
        batch_types: 1 declared
        """
        found: list[tuple[str, object]] = [
            ("options", ", ".join(option.name for option in self.options)),
            ("ignored_request_fields", ", ".join(self.ignored_request_fields)),
            ("data_folder", self.data_folder and "trains on its whole data folder"),
            ("check_data", self.check_data and "an unchanged data folder starts no run"),
            ("replay_task", self.replay_task and "rebuilds a fault bundle's step"),
            ("batch_types", self.batch_types and f"{len(self.batch_types)} declared"),
            ("judged", self.judged and self._judged()),
        ]
        return [f"{name}: {line}" for name, line in found if line]

    def data_check(self, request: TrainRequest) -> DataCheck | None:
        """The plugin's own data check of ``request`` (``check_data``: the data files
        scanned once and, when nothing changed since its served model, the run's result);
        None without one. What it raises, it raises; what it returns is checked: a
        ``TypeError`` for another type, ``TrainResultError`` for a wrong field of its result."""
        if self.check_data is None:
            return None
        found = self.check_data(request)
        if not isinstance(found, DataCheck):
            raise TypeError(f"check_data returned {type(found).__name__}, not a DataCheck")
        if found.up_to_date is not None:  # a wrong field: the caller's run reads its data
            check_result(TrainResult.from_json(found.up_to_date), request.agent)
        return found

    def _judged(self) -> str:
        assert self.judged is not None
        line = f"judging_version {self.judged.judging_version}, loss_span {self.judged.loss_span}"
        if not self.records_are_training_data:
            line += ", judged on records it does not train on"
        if isinstance(self.judged, ListsRecords):  # the served model scored where judged
            line += ", lists its records unscored"
        return line


def capabilities_of(plugin: object) -> Capabilities:
    """Every optional capability ``plugin`` declares (module docstring), each checked
    whole: a TypeError names the plugin and what is wrong (the loader refuses it).

    A method set to None is not declared (``typing.Protocol``'s rule).

    >>> class Agent:
    ...     name, data_folder = "a", True
    ...     def replay_task(self, context): ...
    >>> sorted(line.split(":")[0] for line in capabilities_of(Agent()).lines())
    ['data_folder', 'replay_task']
    """
    options = declared_options(plugin)
    for index, option in enumerate(options):
        if not isinstance(option, AgentOption):
            raise TypeError(f"{plugin_name(plugin)}: options[{index}] is not an AgentOption")
    check = plugin.check_data if isinstance(plugin, ChecksData) else None
    replay = plugin.replay_task if isinstance(plugin, ReplaysSteps) else None
    for member, method in (("check_data", check), ("replay_task", replay)):
        if method is not None and not callable(method):
            raise TypeError(f"{plugin_name(plugin)}: {member} is not a method")
    types = tuple(plugin.batch_types) if isinstance(plugin, NamesBatchTypes) else ()
    if not all(isinstance(kind, type) for kind in types):
        raise TypeError(f"{plugin_name(plugin)}: batch_types holds something that is not a class")
    return Capabilities(
        options=options,
        ignored_request_fields=ignored_request_fields(plugin),
        data_folder=isinstance(plugin, ReadsDataFolder) and plugin.data_folder is True,
        check_data=check,
        replay_task=replay,
        batch_types=types,
        judged=judging_of(plugin),
        records_are_training_data=records_are_training_data(plugin),
    )


class TrainResultError(TrainRequestError):
    """A result the plugin built wrong: one line naming the field, what it should hold
    and what it held. A refusal like a bad request's (one line, the run refused)."""


def _fits_plain(value: Any, hint: Any) -> bool:
    """A value against a hint that holds no other: None, a number, a Path, a class."""
    if hint is type(None):
        return value is None
    if hint is float:  # an int is a float here, as in Python's typing; a bool is not
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is Path:  # str(checkpoint) is all anyone does with it
        return isinstance(value, str | PathLike)
    return isinstance(value, get_origin(hint) or hint)


def _misfit(value: Any, hint: Any, where: str) -> str | None:
    """What is wrong with ``value`` as a ``hint``, at its innermost place, or None."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:  # a plugin's own record (``extra``): what its JSON will hold
        return _not_json(plain(value), where)
    if origin is Union or origin is types.UnionType:
        if any(_misfit(value, arg, where) is None for arg in args):
            return None
        others = [arg for arg in args if arg is not type(None)]
        if value is not None and len(others) == 1:  # X | None holding a wrong X
            return _misfit(value, others[0], where)
    elif origin is Literal:  # a precision name: one of its values
        if isinstance(value, str):
            expected = ", ".join(map(repr, args))
            return None if value in args else f"{where}: one of {expected} expected, got {value!r}"
    elif isinstance(hint, type) and issubclass(hint, Record):  # read back as it is written
        if isinstance(value, hint):
            try:
                type(value).from_json(value.to_json())
            except ReportError as exc:
                return f"{where}: {exc}"
            return None
    elif origin is Mapping and isinstance(value, Mapping):
        key_hint, item_hint = args or (Any, Any)
        return _item_misfit(value.items(), key_hint, item_hint, where)
    elif origin is Sequence and isinstance(value, list | tuple):
        return _item_misfit(enumerate(value), Any, args[0] if args else Any, where)
    elif origin not in (Mapping, Sequence) and _fits_plain(value, hint):
        return None
    return f"{where}: {_hint_name(hint)} expected, got {type(value).__name__}"


def _item_misfit(
    items: Iterable[tuple[Any, Any]], key_hint: Any, hint: Any, where: str
) -> str | None:
    """The first key or item of a mapping's items (a sequence's, by index) that does not
    fit, or None."""
    for key, item in items:
        if _misfit(key, key_hint, where) is not None:
            return f"{where}: key {key!r} is not a {_hint_name(key_hint)}"
        found = _misfit(item, hint, f"{where}[{key!r}]")
        if found:
            return found
    return None


def _hint_name(hint: Any) -> str:
    text = str(hint) if get_origin(hint) else getattr(hint, "__name__", str(hint))
    return text.replace("collections.abc.", "").replace("typing.", "").replace("NoneType", "None")


def _not_json(value: Any, where: str) -> str | None:
    """Where inside ``value`` (a value's JSON form: ``plain`` made every key a str and
    NaN null) something is not JSON, or None."""
    if value is None or isinstance(value, str | int | float):
        return None
    if not isinstance(value, Mapping | list | tuple):
        return f"{where}: {type(value).__name__} is not JSON (use a number, str, list or dict)"
    for key, item in value.items() if isinstance(value, Mapping) else enumerate(value):
        found = _not_json(item, f"{where}[{key!r}]")
        if found:
            return found
    return None


def check_result(result: object, agent: str = "the plugin") -> TrainResult:
    """``result`` when it is a :class:`TrainResult` whose fields hold their declared types
    and whose ``to_json()`` is JSON; else :class:`TrainResultError` naming the first bad
    field. ``agent`` names the plugin in the message."""
    if not isinstance(result, TrainResult):
        kind = type(result).__name__
        raise TrainResultError(f"{agent}'s train() returned a {kind}, not a TrainResult")
    hints = get_type_hints(TrainResult)
    for item in fields(TrainResult):
        value = getattr(result, item.name)
        found = _misfit(value, hints[item.name], f"TrainResult.{item.name}")
        if found:
            if type(value).__name__ == "PrecisionRequest":
                found += "; report request.precision.requested (plugin API 2)"
            raise TrainResultError(f"{agent}'s {found}")
    json.dumps(result.to_json(), allow_nan=False)  # what train --json does: cannot fail now
    return result
