"""The daemon's configuration: environment variables and a ``.env`` file, read once.

Every setting except ``ENABLE_FP16_TRAINING`` has the prefix ``GENESIS_FP16_``. Per-agent
settings nest with a double underscore, or come as one JSON object::

    GENESIS_FP16_AGENTS__SE_DARWIN__SCHEDULE=600
    GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION=bf16
    GENESIS_FP16_AGENTS='{"se_darwin": {"schedule": "*/30 * * * *", "steps": 500}}'

>>> settings = load_settings()
>>> requested_precision(settings, "se_darwin", None).reason
'default: auto (no flag, no ENABLE_FP16_TRAINING, no per-agent override)'

A bad value raises :class:`SettingsError`, whose message names the variable.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# The choices keep their import path here too (commands/train.py reads them from settings).
from genesis_fp16.config.agent_settings import (
    AgentSettings,
    Compile,
    CudaGraph,
    Device,
    Schedule,
)
from genesis_fp16.config.agent_settings import check_device_name as check_device_name
from genesis_fp16.config.agent_settings import parse_schedule as parse_schedule
from genesis_fp16.config.extras import tensorboard_missing
from genesis_fp16.config.guard_settings import GuardSettings
from genesis_fp16.config.plugins import (
    ENTRY_POINT_GROUP,
    IMPORT_DEADLINE_SECONDS,
    MAX_IMPORT_DEADLINE_SECONDS,
)
from genesis_fp16.config.settings_sources import (
    MAX_SHOWN,
    SettingsSources,
    bounded,
    check_name,
    env_file_problem,
    ours,
    read_env_file,
    shown_url,
)
from genesis_fp16_infrastructure.api import (
    CHOICES,
    RequestedName,
    check_agent_name,
    machine_memory_bytes,
)

ENV_PREFIX = "GENESIS_FP16_"
AGENT_VARIABLE_PREFIX = ENV_PREFIX + "AGENTS__"
ENV_FILE_VARIABLE = "GENESIS_FP16_ENV_FILE"
DEFAULT_ENV_FILE = ".env"
_NO_ENTRY = AgentSettings()  # an agent without settings of its own (frozen: one is enough)
PRECISION_CHOICES: tuple[RequestedName, ...] = CHOICES


class SettingsError(Exception):
    """Invalid configuration; ``str(exc)`` is one line naming each bad setting, cut at
    two errors' worth (a thousand bad lines are not echoed whole; with a command's or a
    log line's words around it, it stays within ``LOG_VALUE_BOUND``, not cut twice).
    ``sources``: what was read before the error, when the ``.env`` file was read."""

    def __init__(self, errors: list[str], sources: SettingsSources | None = None) -> None:
        self.errors = [bounded(error) for error in errors]  # a 1 MB value is not echoed
        self.sources = sources  # settings_reading goes on from it: the file is read once
        super().__init__(bounded("; ".join(self.errors), 2 * MAX_SHOWN))


class OperatorPrecision(NamedTuple):
    """What the operator asks an agent's run to compute in (``requested``), who asked
    (``reason``), and whether the precision guard's remembered demotion may floor it
    (``floored``)."""

    requested: RequestedName
    reason: str
    floored: bool


class AgentConfig(NamedTuple):
    """One agent's settings as a run reads them (:meth:`Settings.agent`; a run keeps its
    own in ``Run.config``): its own (``own``), and the daemon's where it leaves one unset,
    with the precision the operator asks its runs for (``precision``: resolved once here,
    so that a run's plan asks nothing more of the settings).

    >>> load_settings().agent("se_darwin").run_timeout_seconds
    21600.0
    """

    own: AgentSettings
    schedule: str
    device: str  # as configured: ``auto`` is resolve_device's to resolve
    cuda_graph: str
    compile: str
    run_timeout_seconds: float
    steps: int | None  # None: epochs (``own.epochs``) or the agent's own budget
    precision: OperatorPrecision  # without a flag: requested_precision's answer


class Settings(BaseSettings, GuardSettings):
    """Resolved daemon settings. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        # An uncommented `NAME=` from .env.example means "unset", not an empty value.
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
    )

    # Genesis already uses this name, so it has no prefix. None: not set.
    enable_fp16_training: bool | None = Field(
        default=None, validation_alias=AliasChoices("ENABLE_FP16_TRAINING")
    )
    state_dir: Path = Path("state")
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = Field(default=9464, ge=1, le=65535)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_key_password: SecretStr | None = None
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    plugin_allowlist: Annotated[list[str] | None, NoDecode] = None
    # How long start-up, each rescan and `agents` wait for a plugin's import before
    # listing it ``stuck`` and going on without it (read at start-up).
    plugin_import_deadline_seconds: float = Field(
        default=IMPORT_DEADLINE_SECONDS, gt=0, le=MAX_IMPORT_DEADLINE_SECONDS
    )
    device: Device = "auto"
    device_concurrency: int = Field(default=1, ge=1)
    cuda_graph: CudaGraph = "auto"
    # on: the model compiled with torch.compile (max-autotune-no-cudagraphs) inside the
    # captured step; it needs a step that can be captured. off until measured on a GPU.
    compile: Compile = "off"
    # How precision 'auto' resolves: time the agent's own steps in each native precision
    # (cached per agent) or the device rule (genesis_fp16_infrastructure.training.run.calibration).
    auto_precision: Literal["measure", "rule"] = "measure"
    schedule: Schedule = "3600"
    schedule_jitter_seconds: float = Field(default=30.0, ge=0)
    misfire_grace_seconds: float = Field(default=600.0, gt=0)
    run_at_start: bool = True
    # None: the agent's own budget (se_darwin: early stopping within 100 epochs)
    steps_per_run: int | None = Field(default=None, ge=1)
    log_interval: int = Field(default=50, ge=1)
    # Per-run curves (genesis_fp16/metrics/tracking.py): TensorBoard event files, one run per job
    # under <dir>/<agent>/<run_id>. Unset or empty: none. Needs the tensorboard extra.
    tracking_dir: Path | None = None
    # Per-layer range statistics (how near fp16's limits each module runs), sampled at a
    # rate chosen so that they cost <= 1% of a run's step time, with a first sample early
    # in every run; exported as genesis_fp16_range_* (docs/precision-forensics.md).
    range_stats: bool = True
    # Periodic checkpoints: every N optimizer steps or after S seconds, whichever comes
    # first, and at the run's end (None: by S seconds alone; under torchrun, whose ranks'
    # clocks disagree, a tenth of the run's steps or each validation of early stopping).
    checkpoint_steps: int | None = Field(default=None, ge=1)
    checkpoint_seconds: float = Field(default=60.0, gt=0)
    # Every run's wall-clock limit (an agent's RUN_TIMEOUT_SECONDS overrides it): past it
    # the run stops at its next step with a checkpoint; one that reaches no step within
    # SHUTDOWN_TIMEOUT_SECONDS more is killed and counted (reason hung).
    run_timeout_seconds: float = Field(default=6 * 3600.0, gt=0)
    # One isolation model (docs/daemon.md, "Where a run trains"): a run with NPROC=1 is
    # served by its device's resident run process, which the run worker forks
    # (genesis_fp16/commands/zygote.py, resident.py) and replaces after a run it does not
    # trust; a torchrun job execs its ranks. No setting chooses another way: the old
    # RUN_ISOLATION, RUN_WORKER and RUN_RESIDENT are ignored with a warning
    # (settings_sources.REMOVED_SETTINGS says why).
    # A resident run process over this resident memory (MiB) after a run ends after it.
    run_resident_max_mib: int = Field(default=8192, ge=1)
    # A run's process (and its children) killed past this resident memory, in bytes (a
    # resident run process, a forked or exec'd child, a torchrun job). Unset: the machine's
    # memory, or its cgroup limit, shared by the runs that may train at once (one per agent
    # plugin; see default_run_memory_limit); 0: no limit (None once resolved).
    run_memory_limit_bytes: int | None = Field(default=None, ge=0, validate_default=True)
    # What a resident run process keeps in memory from its runs for the next ones (each data
    # file's records, the joined pool, calibration records: kept_in_memory), in MiB per
    # device; least recently used evicted first, each eviction logged. 0: nothing kept.
    # Unset: default_keep_mib, sized by the run's memory (None never stays once resolved).
    run_resident_keep_mib: int | None = Field(default=None, ge=0, validate_default=True)
    # Helper processes that parse a run's new data files beside it (data.read_workers:
    # started at a run's first large read, kept by its resident run process, counted in
    # its memory). 0: the run parses alone. Unset: default_read_workers.
    read_workers: int | None = Field(default=None, ge=0, validate_default=True)
    sample_count: int = Field(default=2000, ge=1)
    # Bounded model history (agent_folder.candidates.prune, after every run): the last K
    # served models are kept for rollback, rejected candidates for N days of inspection.
    served_history_keep: int = Field(default=5, ge=1)
    rejected_keep_days: float = Field(default=7.0, ge=0)
    # A served model whose live watch saw no new labelled record for this long (or that
    # has no predecessor to watch against) is reported as not watched: the page, `model
    # list`, genesis_fp16_live_watch_not_watching (docs/judging.md). One day by default.
    live_watch_idle_seconds: float = Field(default=86400.0, gt=0)
    seed: int = 0
    shutdown_timeout_seconds: float = Field(default=30.0, gt=0)
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    probe_steps: int = Field(default=10, ge=1)
    watch_env_file: bool = True
    # Webhook receivers of the agents' events (promotions, rejections, rollbacks, pins,
    # demotions, fault bundles: genesis_fp16/events, docs/events.md), comma-separated
    # http(s) URLs; each body is signed with HMAC-SHA256 under the secret, which they need.
    events_urls: Annotated[list[str] | None, NoDecode] = None
    events_secret: SecretStr | None = None
    events_timeout_seconds: float = Field(default=10.0, gt=0)
    events_backoff_max_seconds: float = Field(default=600.0, gt=0)
    events_keep: int = Field(default=1000, ge=1)
    agents: dict[str, AgentSettings] = Field(default_factory=dict)

    @field_validator("run_memory_limit_bytes")
    @classmethod
    def _resolve_run_memory_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:  # unset: resolved once, here, to a number the launcher enforces
            return default_run_memory_limit(info.data.get("plugin_allowlist"))
        if value == 0:
            return None
        if value < 2**20:
            raise ValueError("must be 0 (no limit) or at least 1048576 (1 MiB)")
        return value

    @field_validator("run_resident_keep_mib")
    @classmethod
    def _resolve_resident_keep(cls, value: int | None, info: ValidationInfo) -> int:
        if value is not None:
            return value
        return default_keep_mib(_run_memory(info), info.data.get("run_resident_max_mib", 8192))

    @field_validator("read_workers")
    @classmethod
    def _resolve_read_workers(cls, value: int | None, info: ValidationInfo) -> int:
        return default_read_workers(run_memory_bytes=_run_memory(info)) if value is None else value

    @field_validator("state_dir")
    @classmethod
    def _check_state_dir(cls, value: Path) -> Path:
        # Every command reads settings first: one line here, not a traceback at first use.
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} exists and is not a folder")
        return value

    @field_validator("tracking_dir")
    @classmethod
    def _check_tracking(cls, value: Path | None) -> Path | None:
        # At start-up (and on reload), not at the first run's first write.
        missing = tensorboard_missing() if value is not None else None
        if missing is not None:
            raise ValueError(missing)
        return value

    @field_validator("plugin_allowlist", "events_urls", mode="before")
    @classmethod
    def _split_list(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()] or None
        # An agent name that could never match an entry point, or a URL no post reaches.
        check = check_agent_name if info.field_name == "plugin_allowlist" else check_webhook_url
        for item in value or ():
            check(item)
        if info.field_name == "events_urls":
            _distinct_as_shown(value or ())
        return value

    @field_validator("events_secret")
    @classmethod
    def _check_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # A signing secret of at least 16 characters, not all whitespace; never shown.
        secret = None if value is None else value.get_secret_value()
        if secret is not None and not secret.strip():
            raise ValueError("is empty or all whitespace: give a long random string")
        if secret is not None and len(secret) < MIN_SECRET_CHARACTERS:
            raise ValueError(
                f"has {len(secret)} characters, fewer than {MIN_SECRET_CHARACTERS}: give a long "
                "random string"
            )
        return value

    @field_validator("agents", mode="before")
    @classmethod
    def _lowercase_agent_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            value = {str(name).lower(): spec for name, spec in value.items()}
            for name in value:  # GENESIS_FP16_AGENTS__../X__STEPS: a path, refused here
                try:
                    check_agent_name(name)
                except ValueError as exc:
                    raise ValueError(f"{ENV_PREFIX}AGENTS__<AGENT>__*: {exc}") from None
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                "GENESIS_FP16_TLS_CERT_FILE and GENESIS_FP16_TLS_KEY_FILE must be set together"
            )
        tls_files = (("tls_cert_file", self.tls_cert_file), ("tls_key_file", self.tls_key_file))
        for name, path in tls_files:
            if path is not None and not path.is_file():
                raise ValueError(f"{_env_name((name,))}: file {str(path)!r} does not exist")
        if self.events_urls and self.events_secret is None:
            raise ValueError(
                "GENESIS_FP16_EVENTS_SECRET: required with GENESIS_FP16_EVENTS_URLS "
                "(each event's body is signed with it)"
            )
        return self

    def agent(self, name: str) -> AgentConfig:
        """What a run of ``name`` is configured with: its own settings, else the daemon's."""
        own = self.agents.get(name.lower(), _NO_ENTRY)
        return AgentConfig(
            own,
            schedule=own.schedule or self.schedule,
            device=own.device or self.device,
            cuda_graph=own.cuda_graph or self.cuda_graph,
            compile=own.compile or self.compile,
            run_timeout_seconds=own.run_timeout_seconds or self.run_timeout_seconds,
            steps=None if own.epochs is not None else own.steps or self.steps_per_run,
            precision=_operator_precision(self, name, own),
        )


def resolve_device(device: str) -> str:
    """``auto`` becomes ``cuda`` when a CUDA device is present, else ``cpu``; others stay."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


MIN_SECRET_CHARACTERS = 16


def check_webhook_url(url: str) -> str:
    """An http(s) URL with a host and without credentials, or ValueError naming it (its
    credentials replaced: the error is printed and logged)."""
    parts = urllib.parse.urlsplit(url)
    credentials = "@" in parts.netloc
    shown = url
    if credentials:
        shown = urllib.parse.urlunsplit(
            parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2])
        )
    shown = shown_url(shown)  # a token in its query too
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not an http:// or https:// URL with a host")
    if credentials:
        raise ValueError(
            f"{shown!r} carries credentials (user:password@), which would be sent and "
            "logged: receivers check each event's signature under GENESIS_FP16_EVENTS_SECRET"
        )
    return url


def _distinct_as_shown(urls: Iterable[str]) -> None:
    """Receivers an event's file tells apart: two that differ only in a secret (their
    ``shown_url``, which the file names them by, the same) raise ValueError."""
    seen: dict[str, str] = {}
    for url in urls:
        if seen.setdefault(shown_url(url), url) != url:
            raise ValueError(
                f"two receivers differ only in a secret ({shown_url(url)!r} twice): an "
                "event's file names each receiver with its secrets replaced; give each its own path"
            )


def default_run_memory_limit(allowlist: list[str] | None = None, memory: int | None = None) -> int:
    """Each run's share of ``memory`` (None: the machine's, or its cgroup limit): the daemon
    trains at most one run per agent plugin at once, so the share is ``memory`` divided
    by the allowed plugins, or by the installed ones without an allowlist. ::

        default_run_memory_limit(["se_darwin", "rlhf_ppo"], 16 * 2**30) == 8 * 2**30
    """
    runs = len(allowlist) if allowlist else len(entry_points(group=ENTRY_POINT_GROUP))
    return (machine_memory_bytes() if memory is None else memory) // max(1, runs)


def _run_memory(info: ValidationInfo) -> int:
    """A run's memory, for what is sized by it: its limit (resolved before the fields
    after it), or its share of the machine where the limit is off."""
    limit = info.data.get("run_memory_limit_bytes")
    if limit is None:
        limit = default_run_memory_limit(info.data.get("plugin_allowlist"))
    return int(limit)


def default_keep_mib(run_memory_bytes: int, resident_max_mib: int) -> int:
    """What a resident run process keeps for its next runs when RUN_RESIDENT_KEEP_MIB is
    unset, in MiB: a quarter of a run's memory (``run_memory_bytes``, its limit or share:
    the run itself needs the rest, and the process is killed past the limit with what it
    keeps), at most half of RUN_RESIDENT_MAX_MIB (what it keeps alone never ends it). A
    fixed 1,024 MiB held a 100,000-record se_darwin pool but not a 1,000,000-record one
    (about 2 GiB kept), which every later run then read again. ::

        default_keep_mib(12 * 2**30, 8192) == 3072  # 24 GiB, two agents
        default_keep_mib(64 * 2**30, 8192) == 4096  # 128 GiB, two agents
        default_keep_mib(2 * 2**30, 8192) == 512  # a 4 GiB pod, two agents
    """
    return min(resident_max_mib // 2, run_memory_bytes // 4 // 2**20)


def default_read_workers(cpus: float | None = None, run_memory_bytes: int | None = None) -> int:
    """A run's read helpers when READ_WORKERS is unset: the CPUs this process may use
    (``cpus``; by default its affinity, or its cgroup's quota where lower), less the
    run's own, at most ``MAX_READ_WORKERS``, and one per GiB of a run's memory
    (``run_memory_bytes``, its limit or share: a helper is ~80 MB at its peak, counted in
    the run's memory). ::

        default_read_workers(2) == 1
        default_read_workers(16) == 4
        default_read_workers(1.5) == 0  # a pod limited to one and a half CPUs
        default_read_workers(16, 2 * 2**30) == 2  # a 4 GiB pod, two agents
    """
    if cpus is None:
        cpus = min(len(os.sched_getaffinity(0)), _cgroup_cpus())
    by_memory = MAX_READ_WORKERS if run_memory_bytes is None else run_memory_bytes // 2**30
    return max(0, min(MAX_READ_WORKERS, int(cpus) - 1, by_memory))


MAX_READ_WORKERS = 4  # a read shared five ways; more processes per device's runs buy little


def _cgroup_cpus() -> float:
    """The CPUs a cgroup v2 quota allows (``cpu.max``); infinity without one."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return float("inf") if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return float("inf")


def _env_name(loc: tuple[Any, ...]) -> str:
    """The environment variable behind a pydantic error location."""
    parts = [str(part) for part in loc if not isinstance(part, int)]
    if not parts:
        return "configuration"
    if parts[0] == "enable_fp16_training" or parts[0] == "ENABLE_FP16_TRAINING":
        return "ENABLE_FP16_TRAINING"
    return ENV_PREFIX + "__".join(part.upper() for part in parts)


def _describe(error: Any) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    loc = tuple(error.get("loc", ()))
    # Pydantic puts the precision Literal's choices in the message; errors raised by the
    # model validators already carry the variable name.
    if not loc or message.startswith(ENV_PREFIX) or message.startswith("ENABLE_FP16"):
        return message
    if error.get("type") == "missing":
        return f"{_env_name(loc)}: required"
    value = error.get("input")
    # Our own validators quote the value already; pydantic's built-in checks do not.
    quote = error.get("type") != "value_error" and isinstance(value, str | int | float)
    shown = f" (got {value!r})" if quote else ""
    return f"{_env_name(loc)}: {message}{shown}"


def setting_variables() -> dict[str, str]:
    """Every top-level variable name, mapped to its field name."""
    names = {ENV_FILE_VARIABLE: ""}
    for name in Settings.model_fields:
        names[_env_name((name,))] = name
    return names


def settings_sources(env_file: Path | str | None = None) -> SettingsSources:
    """The ``.env`` file :func:`load_settings` reads, its values, the environment's, and
    one error per unknown ``GENESIS_FP16_*``/``ENABLE_FP16_*`` name or unparsable line."""
    explicit = env_file is not None or ENV_FILE_VARIABLE in os.environ
    path = resolve_env_file(env_file)
    problem = env_file_problem(path)  # a link to /dev/zero is refused, never "no file"
    if problem is not None:
        raise SettingsError([problem])
    is_file = path.is_file()
    if explicit and not is_file:
        # Blame what named it: the commands pass their --env-file flag as ``env_file``.
        named_by = "--env-file" if env_file is not None else ENV_FILE_VARIABLE
        raise SettingsError([f"{named_by}: env file {str(path)!r} does not exist"])
    file, errors, repeated = read_env_file(path) if is_file else ({}, [], [])
    unparsable = bool(errors)
    known, agent_fields = setting_variables(), AgentSettings.model_fields
    environ = {name.upper(): value for name, value in os.environ.items() if ours(name)}
    named = [(name, f"{path}, line {entry.line}") for name, entry in file.items()]
    for name, where in named + [(name, "in the environment") for name in sorted(environ)]:
        problem = check_name(name, known, agent_fields)
        if problem is not None:
            errors.append(f"{problem} ({where})")
    return SettingsSources(
        path.resolve(), is_file, file, environ, tuple(errors), unparsable, tuple(repeated)
    )


def load_settings(env_file: Path | str | None = None) -> Settings:
    """Read the environment and the ``.env`` file into :class:`Settings`.

    ``env_file`` defaults to ``$GENESIS_FP16_ENV_FILE``, or ``.env`` in the working
    directory. A missing default file is fine; a missing named one is an error.
    Environment variables win over the file. A ``GENESIS_FP16_*`` or ``ENABLE_FP16_*``
    name that is not a setting, or a line of the file that is not ``NAME=value``, is an
    error (a misspelt rollback switch must not be ignored).
    """
    return load_settings_with_sources(env_file)[0]


def load_settings_with_sources(
    env_file: Path | str | None = None,
) -> tuple[Settings, SettingsSources]:
    """:func:`load_settings`, and where each value came from (``config check``, reloads)."""
    sources = settings_sources(env_file)
    if sources.unparsable:  # the file itself is broken: its values mean nothing yet
        raise SettingsError(list(sources.errors), sources)
    errors = list(sources.errors)
    settings = None
    file = sources.env_file if sources.env_file_read else None
    try:
        settings = Settings(_env_file=file)  # type: ignore[call-arg]
    except ValidationError as exc:
        for error in exc.errors():
            # A name flagged above ("did you mean") needs no second "Extra inputs" line.
            if error.get("type") == "extra_forbidden" and _env_name(error["loc"]) in str(errors):
                continue
            errors.append(_describe(error))
    except ValueError as exc:  # a value pydantic-settings could not decode (bad JSON)
        match = re.search(r'field "(\w+)"', str(exc))
        name = _env_name((match.group(1),)) if match else "configuration"
        errors.append(f"{name}: not valid JSON ({exc.__cause__ or exc})")
    if errors or settings is None:
        raise SettingsError(errors, sources)
    return settings, sources


def resolve_env_file(env_file: Path | str | None = None) -> Path:
    """The ``.env`` path the daemon reads (and watches), whether or not it exists:
    ``env_file``, else ``$GENESIS_FP16_ENV_FILE``, else ``.env``."""
    return Path(env_file or os.environ.get(ENV_FILE_VARIABLE) or DEFAULT_ENV_FILE)


def requested_precision(
    settings: Settings,
    agent: str,
    cli_precision: RequestedName | None,
    config: AgentConfig | None = None,
) -> OperatorPrecision:
    """The operator's precision for one run of ``agent``: the one place its precedence
    is worked out (the run's request, the reload's comparison and the gauge ask it).

    Precedence: the CLI ``--precision`` flag, then ``ENABLE_FP16_TRAINING=false`` (the
    rollback switch: fp32), then the agent's own precision override, then
    ``ENABLE_FP16_TRAINING=true`` (fp16), then ``auto``. The guard's remembered floor
    (``genesis_fp16.jobs.guard_state``) applies below those, while the guard is on,
    except under a flag (what the operator asked for in so many words) and under
    ``ENABLE_FP16_TRAINING=false`` (fp32, which no floor lowers). Without a flag it is
    the agent's config's ``precision``, resolved with it (``config``: the run's; None:
    ``settings.agent(agent)``).

    >>> requested_precision(load_settings(), "se_darwin", "bf16")
    OperatorPrecision(requested='bf16', reason='--precision bf16 on the command line', \
floored=False)
    """
    if cli_precision is not None:  # train's --precision, checked by train_checks
        flag = cli_precision
        return OperatorPrecision(flag, f"--precision {flag} on the command line", False)
    return (config or settings.agent(agent)).precision


def _operator_precision(settings: Settings, agent: str, own: AgentSettings) -> OperatorPrecision:
    """What the operator asks ``agent``'s runs for without a flag (its config's
    ``precision``: :func:`requested_precision` says the precedence)."""
    if settings.enable_fp16_training is False:
        return OperatorPrecision("fp32", "ENABLE_FP16_TRAINING=false (rollback to fp32)", False)
    floored = settings.guard_enabled
    override = own.precision
    if override is not None:
        variable = _env_name(("agents", agent, "precision"))
        return OperatorPrecision(override, f"{variable}={override}", floored)
    if settings.enable_fp16_training is True:
        return OperatorPrecision("fp16", "ENABLE_FP16_TRAINING=true", floored)
    why = "default: auto (no flag, no ENABLE_FP16_TRAINING, no per-agent override)"
    return OperatorPrecision("auto", why, floored)


def precision_switched(old: Settings, new: Settings, agent: str) -> bool:
    """Whether a reload from ``old`` to ``new`` changes what ``agent``'s planned
    request asks for (:func:`requested_precision`'s answer, without a flag)."""
    before, after = old.agent(agent).precision, new.agent(agent).precision
    return (before.requested, before.floored) != (after.requested, after.floored)
