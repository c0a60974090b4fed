"""The contract between genesis-fp16 and its agent plugins.

A plugin is any object that satisfies :class:`AgentPlugin`. It is registered in the
``genesis_fp16.agents`` entry-point group of its own distribution; the entry point names
either the plugin object or a zero-argument callable that returns it::

    # pyproject.toml of a third-party agent
    [project.entry-points."genesis_fp16.agents"]
    my_agent = "my_agent.plugin:plugin"

The daemon refuses a plugin whose ``api_version`` differs from :data:`API_VERSION`.

A plugin may declare the options its ``train`` reads from ``TrainRequest.options`` as an
``options`` attribute (a sequence of :class:`AgentOption`); operators then set them with
``genesis-fp16 train AGENT --option KEY=VALUE`` or
``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>=VALUE``, and a bad key or value is refused
before any training starts (:func:`parse_options`). A plugin without the attribute takes
no options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from genesis_fp16_infrastructure.json_numbers import finite, number
from genesis_fp16_infrastructure.training.run.spec import (
    RunCallbacks,
    RunSpec,
    spec_fields,
    spec_from_json,
    spec_to_json,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from genesis_fp16_infrastructure.training.run.fit import FitOptions, FitResult

API_VERSION = 1


# The optimizer steps a run trains when its request names no budget (TrainRequest.fit_options).
DEFAULT_STEPS = 100


class TrainRequestError(ValueError):
    """A plugin refuses a request: a bad option, data it cannot use, an unsupported layout.

    Its message is one line for the user: ``genesis-fp16 train`` prints it and exits 2,
    the daemon logs the run as failed. Other exceptions are bugs and keep their traceback.

    >>> raise TrainRequestError("my_agent: unknown option 'hiden'")
    Traceback (most recent call last):
    ...
    genesis_fp16_infrastructure.plugin_api.TrainRequestError: my_agent: unknown option 'hiden'
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
    the plugin:

    >>> class Agent:
    ...     ignored_request_fields = {"checkpoint_steps": "one checkpoint, at the end"}
    >>> ignored_request_fields(Agent())
    {'checkpoint_steps': 'one checkpoint, at the end'}
    """
    declared = dict(getattr(plugin, "ignored_request_fields", {}))
    unknown = sorted(set(declared) - {f.name for f in fields(TrainRequest)})
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


@dataclass(frozen=True, kw_only=True)
class TrainRequest(RunSpec, RunCallbacks):
    """What the daemon, or ``genesis-fp16 train``, asks an agent to do in one run.

    The run's own fields (``precision``, ``device``, ``steps``, ``epochs``, ``seed``,
    ``resume``, ``checkpoint_seconds``, ``log_interval``, ``guard``, ``fsdp``,
    ``cuda_graph``, ``compile``) and the callbacks ``on_log`` and ``should_stop`` are
    :class:`~genesis_fp16_infrastructure.training.run.spec.RunSpec`'s and
    :class:`~genesis_fp16_infrastructure.training.run.spec.RunCallbacks`', shared with
    ``FitOptions``; the rest are the agent's. ``precision`` is the requested name and
    ``precision_reason`` says who asked for it (a CLI flag, ``ENABLE_FP16_TRAINING``, a
    per-agent override). ``steps`` counts optimizer steps of this run, skipped ones
    included; with ``resume`` they come on top of the checkpoint's, unless the checkpoint
    is an interrupted run's with the same budget, which then finishes. ``guard`` turns on
    the precision guard; None leaves it off. Fields are keyword-only.
    """

    agent: str
    precision_reason: str
    state_dir: Path
    checkpoint_dir: Path
    data_path: Path | None = None
    # RL agents: called after each iteration with its diagnostics ({name: float}); the
    # daemon exports them live as genesis_fp16_rl_* gauges
    # (genesis_fp16/metrics/diagnostics_export.py).
    on_diagnostics: Callable[[Mapping[str, float]], None] | None = None
    quarantine_path: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # How precision 'auto' resolves, and where a measurement is cached (FitOptions.auto_precision).
    auto_precision: str = "rule"
    calibration_path: Path | None = None
    # Precisions a measured 'auto' must not time, each with why (e.g. a red probe verdict).
    auto_excluded: Mapping[str, str] = field(default_factory=dict)
    # The resident memory the run may use (the daemon's RUN_MEMORY_LIMIT_BYTES; None: no
    # limit set), for what a plugin sizes by it: se_darwin's largest pool.
    memory_limit_bytes: int | None = None
    # A fixed pool the operator trusts: a candidate must be no worse than the served
    # model on it too (the promotion gate; GENESIS_FP16_AGENTS__<AGENT>__GOLDEN_DATA).
    golden_data_path: Path | None = None

    def fit_options(self, **overrides: Any) -> FitOptions:
        """The :class:`~genesis_fp16_infrastructure.training.FitOptions` this request asks for.

        Every field of the run (``RunSpec``'s), the callbacks, the checkpoint folder and
        cadence and the ``auto`` settings come from the request; ``overrides`` replace any
        of them or set the rest (``scaler``, ``trainer``, ...). A request with no budget
        (neither ``steps`` nor ``epochs``: no ``--steps``, no ``STEPS_PER_RUN``) trains
        :data:`DEFAULT_STEPS` optimizer steps, so a plugin that passes the request through
        trains under the daemon with no setting::

            result = fit(task, request.fit_options())
        """
        from genesis_fp16_infrastructure.training.run.calibration import AutoPrecision
        from genesis_fp16_infrastructure.training.run.fit import FitOptions

        values: dict[str, Any] = {name: getattr(self, name) for name in spec_fields()}
        values.update(
            on_log=self.on_log,
            should_stop=self.should_stop,
            checkpoint_dir=Path(self.checkpoint_dir),
            auto_precision=AutoPrecision(
                mode=self.auto_precision, excluded=self.auto_excluded, cache=self.calibration_path
            ),
        )
        merged = {**values, **overrides}
        if merged.get("steps") is None and merged.get("epochs") is None:
            merged["steps"] = DEFAULT_STEPS
        return FitOptions(**merged)

    def to_json(self) -> dict[str, Any]:
        """The request as JSON-ready data, callbacks left out (they cannot cross a process).

        The daemon hands this to its child or its torchrun ranks whole (a file), so every
        process trains with the same precision and reason, guard, budget and options::

            TrainRequest.from_json(json.loads(json.dumps(request.to_json())))
        """
        return spec_to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainRequest:
        """The inverse of :meth:`to_json`; callbacks are the defaults (set them with
        ``dataclasses.replace``)."""
        return spec_from_json(cls, data)


# A run that took steps learned only when at least min_useful_steps(steps) of them were
# taken (not skipped). fp16's loss scale starts at 65536 and may halve up to 16 times
# before its first step is taken (each halving skips one step): those 16 are allowed,
# and of the rest at least half must be taken. A run of 18 steps or fewer needs one.
SCALER_CALIBRATION_SKIPS = 16
LEARNING_FAILURES = ("nonfinite_gradients", "nonfinite_loss")


def min_useful_steps(steps: int) -> int:
    """The fewest taken (not skipped) steps a run of ``steps`` steps needs to count as
    having learned: 0 for a run of no step, else ``max(1, (steps - 16) // 2)``.

    >>> min_useful_steps(200), min_useful_steps(10), min_useful_steps(0)
    (92, 1, 0)
    """
    return 0 if steps <= 0 else max(1, (steps - SCALER_CALIBRATION_SKIPS) // 2)


def learning_failure(
    steps: int, skipped: int, nonfinite_losses: int, guard_failed: bool, stopped: bool = False
) -> str | None:
    """Why a run with these counts learned nothing (one of :data:`LEARNING_FAILURES`), or
    None: the guard ended it at its last rung, or it ran to its end with fewer useful
    steps than :func:`min_useful_steps` (a run asked to stop early is judged by the guard
    alone). A non-finite loss is the cause when the run saw one."""
    short = not stopped and steps - skipped < min_useful_steps(steps)
    if not (guard_failed or short):
        return None
    return "nonfinite_loss" if nonfinite_losses > 0 else "nonfinite_gradients"


# TrainResult's float fields: NaN travels as null and comes back as NaN.
_RESULT_FLOATS = (
    "overflow_rate",
    "loss_scale",
    "final_train_loss",
    "samples_per_second",
    "wall_seconds",
)


@dataclass(frozen=True)
class TrainResult:
    """The outcome of one training run; :meth:`to_json` is the ``train --json`` object."""

    agent: str
    precision_requested: str
    precision_used: str
    precision_reason: str
    device: str
    steps: int
    skipped_steps: int
    overflow_rate: float
    loss_scale: float
    final_train_loss: float
    eval: Mapping[str, float]
    samples_per_second: float
    wall_seconds: float
    checkpoint: Path | None
    quarantined: int
    stopped_early: bool = False
    demotions: Sequence[Mapping[str, Any]] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    # What the steps ran as (eager, cuda_graph or cuda_graph_compiled) and why, like
    # precision_used/_reason.
    execution: str = "eager"
    execution_reason: str = "not reported by the agent"
    # Set when the run resolved a captured step but ran eagerly: one of FALLBACK_REASONS
    # (its first captured steps differed from eager ones, or a capture raised).
    execution_fallback: str | None = None
    # The model had already learned every record of the data: the run took no step.
    up_to_date: bool = False
    # Why the run learned nothing (see learning_failure), with what the counts were; None
    # for a run that learned. ``skipped_steps`` is this run's own; the resumed chain's
    # total is ``chain_skipped_steps``.
    failure: str | None = None
    failure_detail: str = ""
    chain_skipped_steps: int = 0
    # The run's model was judged worse than the served one by the promotion gate: it is
    # kept for inspection, and the served model goes on serving.
    rejected: bool = False

    def __post_init__(self) -> None:
        # Whoever built the result (from_fit, or a plugin of its own): a run that took
        # fewer useful steps than the bound learned nothing, and is not reported a success.
        if self.failure is None and not self.up_to_date:
            failure = learning_failure(
                self.steps, self.skipped_steps, 0, guard_failed=False, stopped=self.stopped_early
            )
            if failure is not None:
                useful = self.steps - self.skipped_steps
                detail = (
                    f"{useful} of {self.steps} step(s) taken "
                    f"(needs {min_useful_steps(self.steps)}), {self.skipped_steps} skipped"
                )
                object.__setattr__(self, "failure", failure)
                object.__setattr__(self, "failure_detail", detail)

    @property
    def outcome(self) -> str:
        """``failed`` (its steps learned nothing: ``failure`` says why), ``up_to_date``
        (nothing new to learn), ``rejected`` (trained, and judged worse than the served
        model), ``stopped`` (asked to stop before its end) or ``success``: the daemon's
        outcome label, and ``outcome`` in ``to_json``."""
        if self.failure is not None:
            return "failed"
        if self.up_to_date:
            return "up_to_date"
        if self.rejected:
            return "rejected"
        return "stopped" if self.stopped_early else "success"

    @classmethod
    def from_fit(
        cls,
        request: TrainRequest,
        result: FitResult,
        *,
        quarantined: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> TrainResult:
        """Report a :func:`~genesis_fp16_infrastructure.training.run.fit` run for ``request``,
        truthfully: the precision used is the one the run ended in, after any demotion."""
        summary = result.summary
        extra = dict(extra or {})
        if result.calibration is not None:  # what a measured 'auto' timed (train --json)
            extra["precision_calibration"] = result.calibration.to_json()
        steps, skipped = result.steps_run, result.skipped_run
        failure = learning_failure(
            steps,
            skipped,
            result.nonfinite_run,
            guard_failed=result.failure is not None,
            stopped=result.stopped_early,
        )
        detail = ""
        if failure is not None:
            detail = (
                f"{steps - skipped} of {steps} step(s) taken (needs {min_useful_steps(steps)}), "
                f"{skipped} skipped, {result.nonfinite_run} non-finite loss(es)"
            )
            if result.failure is not None:
                detail += f"; the guard at {result.precision.used}: {result.failure['detail']}"
        return cls(
            agent=request.agent,
            precision_requested=request.precision,
            precision_used=result.precision.used,
            precision_reason=f"{request.precision_reason}; {result.precision.reason}",
            device=request.device,
            steps=steps,
            skipped_steps=skipped,
            overflow_rate=summary.overflow_rate,
            loss_scale=summary.loss_scale,
            final_train_loss=summary.train_loss,
            eval=dict(result.eval),
            samples_per_second=summary.samples_per_second,
            wall_seconds=summary.wall_seconds,
            checkpoint=result.checkpoint,
            quarantined=quarantined,
            stopped_early=result.stopped_early,
            demotions=result.demotions,
            extra=extra,
            execution=result.execution.used,
            execution_reason=result.execution.reason,
            execution_fallback=result.execution.fallback,
            failure=failure,
            failure_detail=detail,
            chain_skipped_steps=summary.skipped_steps,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``train --json`` object: JSON-ready, NaN and infinities as null."""
        out = asdict(self)
        out["checkpoint"] = str(self.checkpoint) if self.checkpoint else None
        out["eval"] = dict(self.eval)
        out["demotions"] = [dict(d) for d in self.demotions]
        out["outcome"] = self.outcome
        result: dict[str, Any] = finite(out)
        return result

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainResult:
        """The inverse of :meth:`to_json` (the torchrun ranks' result, in the daemon)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["checkpoint"] = Path(data["checkpoint"]) if data.get("checkpoint") else None
        values["eval"] = {k: number(v) for k, v in data["eval"].items()}
        for name in _RESULT_FLOATS:
            values[name] = number(values[name])
        values["demotions"] = tuple(data.get("demotions", ()))
        return cls(**values)


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
