"""One run's request, built in one place for the daemon's jobs, `train` and torchrun ranks.

:func:`plan_request` (the daemon's jobs; ``genesis-fp16 train``, with the command
line's :class:`RequestOverrides`) reads its inputs once, what the plugin declares and the
agent's state folder (one
:class:`~genesis_fp16_infrastructure.contract.agent_snapshot.AgentSnapshot`: the state
files, the served-model pointer and the plugin's data check), then works out: the
requested precision and why (:func:`precision_request`: flag, rollback switch,
per-agent override, how ``auto`` is decided, the precision guard's remembered floor),
the device, the budget (the flags, else the settings'), the data (when none is configured, the
agent's data folder or its generated sample: :func:`default_data_path`), the
guard's configuration and the agent's options. The snapshot travels in the request
(``TrainRequest.snapshot``): nothing after the plan reads those files again. The
daemon's launcher hands the result to a child or torchrun's ranks whole, as a JSON file
(``TrainRequest.to_json``), so every process trains with the same precision request,
guard, reason, options and snapshot::

    >>> request = plan_request(settings, "rlhf_ppo", plugin, declared, "cpu")  # doctest: +SKIP
    >>> request.precision.requested, request.precision_reason  # doctest: +SKIP
    ('auto', 'default: auto (no flag, no ENABLE_FP16_TRAINING, no per-agent override)')

Options come from the settings (``GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>=VALUE``)
and ``--option KEY=VALUE`` on top; both are checked against the options the plugin
declares before anything trains.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from genesis_fp16.config.settings import (
    AGENT_VARIABLE_PREFIX,
    AgentConfig,
    Settings,
    SettingsError,
    requested_precision,
)
from genesis_fp16.jobs import guard_state
from genesis_fp16.plugin_api import (
    AgentOption,
    AgentPlugin,
    PrecisionRequest,
    TrainRequest,
    TrainRequestError,
    parse_options,
)
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    AgentSnapshot,
    AgentState,
    Capabilities,
    PrecisionName,
    RequestedName,
    read_snapshot,
    resume_loss_scale,
)

log = structlog.get_logger("genesis_fp16.run_request")

# Request fields an operator sets: field -> (its setting, its RequestOverrides flag).
_OPERATOR_FIELDS: dict[str, tuple[str, str | None]] = {
    "checkpoint_steps": ("checkpoint_steps", "checkpoint_steps"),
    "checkpoint_seconds": ("checkpoint_seconds", "checkpoint_seconds"),
    "precision.mode": ("auto_precision", None),
    "memory_limit_bytes": ("run_memory_limit_bytes", None),
}


@dataclass(frozen=True)
class RequestOverrides:
    """What `genesis-fp16 train`'s flags change; the defaults run as the daemon would."""

    precision: RequestedName | None = None
    steps: int | None = None
    epochs: int | None = None
    data_path: Path | None = None
    checkpoint_dir: Path | None = None
    seed: int | None = None
    resume: bool = True
    forced: bool = False  # train --resume: TrainRequest.forced
    cuda_graph: str | None = None
    compile: str | None = None
    log_interval: int | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    checkpoint_steps: int | None = None
    checkpoint_seconds: float | None = None


def precision_request(
    settings: Settings,
    agent: str,
    flag: RequestedName | None = None,
    state: AgentState | None = None,
    config: AgentConfig | None = None,
    folder: AgentFolder | None = None,
) -> tuple[PrecisionRequest, str]:
    """The :class:`PrecisionRequest` of ``agent``'s next run and who asked for it, as
    :func:`plan_request` puts it in the run's request (the gauge asks the same).

    The operator's request (``requested_precision``: flag, rollback switch, per-agent
    override, ``auto``; without a flag the config's ``precision``, resolved with it), how
    ``auto`` is decided (``GENESIS_FP16_AUTO_PRECISION``), where a measurement is kept,
    and the precision guard's remembered floor, which ``decide`` applies in the run (a
    ``--precision`` flag is what the operator asked for in so many words: no floor;
    ``ENABLE_FP16_TRAINING=false`` asks for fp32, which no floor lowers).
    ``state``: the agent's folder as a run's plan read it (None: the memory is read now);
    ``config``: the run's agent settings (None: read from ``settings``); ``folder``: the
    agent's, as the run holds it (None: made here).
    Nothing here picks a precision::

        >>> precision_request(settings, "se_darwin")[0].requested  # doctest: +SKIP
        'auto'
    """
    # The run's config says what the operator asks for (no second read of the settings);
    # a flag is what the operator asked for in so many words.
    config = config or settings.agent(agent)
    operator = config.precision if flag is None else requested_precision(settings, agent, flag)
    requested, reason, floored = operator
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    memory = guard_state.load_memory(settings, agent, state, folder) if floored else None
    why = ""  # the remembered demotion, as decide() says it
    if memory is not None:
        why = (
            f"precision guard memory: demoted {memory.demoted_from} -> {memory.demoted_to} "
            f"({memory.reason} at step {memory.step}, {memory.at}); `genesis-fp16 precision "
            f"reset {agent}` clears it"
        )
    request = PrecisionRequest(
        requested,
        mode=settings.auto_precision,
        floor=None if memory is None else memory.demoted_to,
        floor_reason=why,
        cache=folder.calibration_path,
    )
    return request, reason


def expected_precision(request: PrecisionRequest, device: str) -> PrecisionName | None:
    """What a run of the planned ``request`` computes in, as ``decide`` answers before the
    run (the precision gauge of an idle agent): a measured ``auto`` answers from the
    measurement it kept (None: none kept yet, the run decides). A request that cannot run
    on ``device`` is None: the run fails with the clear error."""
    # decide() probes the device through torch: imported here, not at the top, so that
    # `genesis-fp16 agents` and `precision` (which use this module) start fast.
    from genesis_fp16_infrastructure.api import PrecisionError, planned_precision

    try:  # a measured auto: planned_precision reads the rows kept at request.cache
        return planned_precision(request, device)
    except PrecisionError:
        return None


def next_loss_scale(folder: AgentFolder, precision: PrecisionName | None) -> float:
    """The loss scale the next run of the agent under ``folder`` starts with, when it
    computes in ``precision`` as ``decide`` planned it (:func:`expected_precision`); NaN
    (unknown) when that is None, decided by the run's own measurement, not made yet.

    ``genesis_fp16_precision`` and ``genesis_fp16_loss_scale`` follow a run's reports while
    it trains. Between runs, and from start-up on (with ``RUN_AT_START=false`` the first
    run may be an hour away), they say what the agent's next run starts with:

    - **precision**: what ``decide`` answers the next run's planned request (the settings
      and the precision guard's memory, :func:`precision_request`;
      :func:`expected_precision`): a measured ``auto`` answers from the measurement it
      kept; with none it is undecided (``None``: every precision series 0) until the run
      measures (its decision is on the gauge before its first step: ``on_precision``).
    - **loss scale**: 1 outside fp16 (the scaler is disabled there, and every run reports
      1). In fp16, the scale the run resumes with (the library's ``resume_loss_scale``):
      the newest checkpoint's scaler state (an fp32 or bf16 checkpoint holds one too), or
      the core's initial scale (``ScalerConfig.init_scale``, 65,536) without a
      checkpoint. NaN while the precision is undecided: a comparison with NaN is false,
      so no alert fires on it.

    Reads the newest checkpoint's summary file only for fp16's scale; a checkpoint
    without one is loaded (written before summary files). An unreadable one counts as
    none. Checkpoints are the core's (``CheckpointManager``, ``checkpoint_keys``); a
    plugin that writes its own format has none here, as for ``resumed_totals`` in
    genesis_fp16/jobs/recording.py.

    >>> next_loss_scale(AgentFolder(Path("state"), "se_darwin"), "fp32")
    1.0
    """
    if precision is None:
        return math.nan
    said = structlog.get_logger("genesis_fp16.next_run")
    # The resume point a run's plan reads (the folder the served-model pointer names).
    scale, unread, pointer_error = resume_loss_scale(folder.checkpoint_dir, precision)
    if unread is not None:  # a folder we may not read: no checkpoint
        said.warning(
            "cannot read the agent's checkpoints", path=str(folder.checkpoint_dir), error=unread
        )
    if pointer_error is not None:
        said.warning("cannot follow the served-model pointer", error=pointer_error)
    return scale


def plan_request(
    settings: Settings,
    agent: str,
    plugin: AgentPlugin,
    capabilities: Capabilities,
    device: str,
    overrides: RequestOverrides | None = None,
    config: AgentConfig | None = None,
    folder: AgentFolder | None = None,
) -> TrainRequest:
    """The request of one run, built once per job and kept on the daemon's run
    (``genesis_fp16.jobs.job_state.Run.request``): its inputs read once (what the plugin declares,
    ``capabilities``: the loader's record of it, config/plugins.py's ``LoadedPlugin``; the
    agent's state folder, with the pointer and resume point of the folder the run
    trains in; the plugin's data check, :func:`with_data_check`), its fields worked out from
    the settings (``config``: the agent's, as the run keeps them; None: read here; ``folder``:
    the agent's, as the run holds it, ``Run.folder``; None: made here). Every
    library type of the run is built here, from the snapshot, which travels in the request
    (``snapshot.state.resume``: the checkpoint its counters start from)."""
    o = overrides or RequestOverrides()
    config = config or settings.agent(agent)
    folder = AgentFolder(settings.state_dir, agent) if folder is None else folder
    checkpoint_dir = o.checkpoint_dir or folder.checkpoint_dir
    snapshot = read_snapshot(folder, checkpoint_dir)
    state = snapshot.state
    assert state is not None  # read_snapshot reads it
    options = resolve_options(agent, capabilities.options, config.own.options, o.options)
    precision, reason = precision_request(settings, agent, o.precision, state, config, folder)
    quarantine = folder.new_quarantine_file(o.checkpoint_dir)  # beside a run's own checkpoints
    data = o.data_path or config.own.data_path
    if data is None:
        # The agent's data folder (se_darwin: the sample and every pool dropped beside
        # it), or its generated sample file (an agent that reads one file).
        data = default_data_path(
            plugin, folder, settings.sample_count, settings.seed, capabilities.data_folder
        )
    flagged = o.steps is not None or o.epochs is not None  # flags, else the settings' budget
    steps, epochs = (o.steps, o.epochs) if flagged else (config.steps, config.own.epochs)
    ignored = capabilities.ignored_request_fields
    if ignored:  # the plugin ignores a field: did the operator set it?
        warn_ignored(ignored, agent, _operator_set(settings, o))
    request = TrainRequest(
        agent=agent,
        precision=precision,
        precision_reason=reason,
        state_dir=settings.state_dir,
        checkpoint_dir=checkpoint_dir,
        device=device,
        data_path=Path(data),
        steps=steps,
        epochs=epochs,
        seed=settings.seed if o.seed is None else o.seed,
        resume=o.resume,
        forced=o.forced,
        log_interval=o.log_interval or settings.log_interval,
        quarantine_path=quarantine,
        guard=settings.guard,  # None: the guard is turned off
        cuda_graph=o.cuda_graph or config.cuda_graph,
        compile=o.compile or config.compile,
        options=options,
        checkpoint_steps=o.checkpoint_steps or settings.checkpoint_steps,
        checkpoint_seconds=o.checkpoint_seconds or settings.checkpoint_seconds,
        memory_limit_bytes=settings.run_memory_limit_bytes,
        # The agent's last fp16 scale, when this run asks what that run asked for.
        initial_loss_scale=state.initial_scale(precision.requested),
        golden_data_path=config.own.golden_data,
        snapshot=snapshot,
        range_stats=settings.range_stats,
    )
    # The data scanned once, and whether anything changed: the last piece of the snapshot.
    return replace(request, snapshot=with_data_check(snapshot, capabilities, request))


def default_data_path(
    plugin: AgentPlugin,
    folder: AgentFolder,
    count: int,
    seed: int,
    data_folder: bool,
) -> Path:
    """What ``plugin`` trains on when no data path is configured: its data folder
    (``<state>/agents/<agent>/data/``) when it reads a folder of pools (``data_folder``:
    it declares ``data_folder = True``, plugin_api's ``ReadsDataFolder``, as the plan's
    ``Capabilities`` read it) and its sample lies inside it, else the generated sample
    file itself (``AgentFolder.sample_data`` generates it on first use, either way, and
    keeps its marker)."""
    sample = folder.sample_data(plugin.generate_sample_data, count, seed)
    if not data_folder:
        return sample
    try:
        Path(sample).resolve().relative_to(folder.data_dir.resolve())
    except ValueError:  # a plugin that writes its sample elsewhere: that file, as before
        return sample
    return folder.data_dir


def with_data_check(
    snapshot: AgentSnapshot, capabilities: Capabilities, request: TrainRequest
) -> AgentSnapshot:
    """``snapshot`` with the plugin's own data check, when it has one
    (``Capabilities.data_check``, plugin_api's ``ChecksData``: the data files scanned once
    and, when nothing changed since its served model, the run's result), asked once by the
    plan: an up-to-date run then costs no process start, and the run reads neither the
    manifest nor the files' bytes again. A check that fails is logged and the run goes on
    in full (no data check in the snapshot), where the plugin decides."""
    try:
        return replace(snapshot, data=capabilities.data_check(request))
    except Exception:  # a plugin's: whatever it raises, the run reads its data
        log.warning("the plugin's data check failed: the run reads its data", exc_info=True)
        return snapshot


def _operator_set(settings: Settings, overrides: RequestOverrides) -> dict[str, str]:
    """The request fields the operator set, each with the setting or flag that set it."""
    given = {}
    for name, (setting, flag) in _OPERATOR_FIELDS.items():
        if flag is not None and getattr(overrides, flag) is not None:
            given[name] = f"--{flag.replace('_', '-')}"
        elif setting in settings.model_fields_set:
            given[name] = f"GENESIS_FP16_{setting.upper()}"
    return given


def warn_ignored(ignored: Mapping[str, str], agent: str, given: Mapping[str, str]) -> None:
    """Warn, one line per field, where the operator set what this agent does not use.

    ``ignored`` is what the plugin declares (``Capabilities.ignored_request_fields``);
    ``given`` maps request fields to what set them (a setting, a flag,
    the probe). The run goes on: the field is harmless to the agent, only the operator's
    intent is lost.
    """
    for name, source in given.items():
        if name in ignored:
            log.warning(
                "agent ignores a request field",
                field=name,
                set_by=source,
                instead=f"{agent}: {ignored[name]}",
            )


def parse_option_flags(flags: Iterable[str]) -> dict[str, str]:
    """``["preset=bf16_fp32_kl", ...]`` from ``--option`` as ``{key: text}``."""
    out: dict[str, str] = {}
    for flag in flags:
        key, sep, value = flag.partition("=")
        if not sep or not key.strip():
            raise TrainRequestError(f"--option {flag!r}: expected KEY=VALUE, e.g. preset=bf16_pure")
        out[key.strip().lower()] = value.strip()
    return out


def resolve_options(
    agent: str,
    declared: Sequence[AgentOption],
    configured: Mapping[str, Any],
    flags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A run's typed options (``TrainRequest.options``): ``configured`` (settings), then
    ``flags`` (CLI) on top, checked against the options the plugin ``declared``
    (``Capabilities.options``, or ``declared_options(plugin)``).

    Raises :class:`TrainRequestError`, one line naming the setting or flag, the agent,
    the option and what is valid.
    """
    out: dict[str, Any] = {}
    for origin, given in (("settings", configured), ("flags", flags or {})):
        for key, value in given.items():
            try:
                out.update(parse_options(agent, declared, {key: value}))
            except TrainRequestError as exc:
                where = f"--option {key}={value}"
                if origin == "settings":
                    where = f"{AGENT_VARIABLE_PREFIX}{agent.upper()}__OPTIONS__{key.upper()}"
                raise TrainRequestError(f"{where}: {exc}") from None
    return out


def check_configured_options(
    settings: Settings, plugins: Mapping[str, Capabilities], known: Iterable[str] | None = None
) -> None:
    """Every configured option of every loaded agent, checked; :class:`SettingsError` if bad.

    ``known`` (the installed agents' names) also makes settings for an agent that is not
    installed an error (``GENESIS_FP16_AGENTS__SE_DARVIN__STEPS`` would do nothing). The
    daemon calls it at start-up and on each reload, so that a bad option is a start-up
    error or a failed reload, never a failed run.
    """
    errors = []
    if known is not None:
        names = list(known)
        for agent in sorted(set(settings.agents) - set(names)):
            near = difflib.get_close_matches(agent, names, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            errors.append(
                f"{AGENT_VARIABLE_PREFIX}{agent.upper()}__*: no agent {agent!r} is installed; "
                f"{hint}installed: {', '.join(names) or 'none'}"
            )
    for agent, declared in plugins.items():
        try:
            resolve_options(agent, declared.options, settings.agent(agent).own.options)
        except TrainRequestError as exc:
            errors.append(str(exc))
    if errors:
        raise SettingsError(errors)
