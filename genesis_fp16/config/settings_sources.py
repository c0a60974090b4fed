"""Where each setting comes from, and the names that are not settings at all.

pydantic-settings ignores a variable it has no field for, so ``ENABLE_FP16_TRAINIG=false``
(a typo of the rollback switch) would leave training in 16-bit without a word. This
module reads the ``.env`` file and the environment itself, before pydantic does, and
turns every ``GENESIS_FP16_*`` or ``ENABLE_FP16_*`` name that is not a setting, and every
line of the file it cannot parse, into an error naming the line and the nearest setting::

    >>> check_name("ENABLE_FP16_TRAINIG", ["ENABLE_FP16_TRAINING"], ["steps"])
    'ENABLE_FP16_TRAINIG is not a setting; did you mean ENABLE_FP16_TRAINING?'

It also says which of the three sources (default, .env, environment) each value came
from, and which ``.env`` values the process environment shadows; and how a value that
may hold a secret is shown: a receiver URL with its password and query secrets
replaced (:func:`shown_url`, which every place that shows a receiver URL uses).
"""

from __future__ import annotations

import difflib
import functools
import io
import os
import re
import stat
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Names this module owns; settings.py passes the field lists in (no import cycle).
PREFIXES = ("GENESIS_FP16_", "ENABLE_FP16_")
AGENTS_VARIABLE = "GENESIS_FP16_AGENTS"
# GENESIS_FP16_AGENTS__<AGENT>__OPTIONS__<KEY>: checked against the agent's declared options.
OPTIONS_PART = "OPTIONS"

Source = str  # "default", ".env" or "environment"

# Settings that no longer exist, and why: a ``.env`` file or environment that still names
# one starts as before, and the daemon and ``config check`` say, in one line each, that it
# is ignored (:meth:`SettingsSources.describe_removed`). Issue 91: one isolation model.
_ONE_MODEL = (
    "a run with NPROC=1 is always served by its device's resident run process, forked by "
    'the run worker; torchrun jobs exec their ranks (docs/daemon.md, "Where a run trains")'
)
REMOVED_SETTINGS = {
    "GENESIS_FP16_RUN_ISOLATION": _ONE_MODEL,
    "GENESIS_FP16_RUN_WORKER": _ONE_MODEL,
    "GENESIS_FP16_RUN_RESIDENT": _ONE_MODEL,
}
# The same, per agent: GENESIS_FP16_AGENTS__<AGENT>__<FIELD>.
REMOVED_AGENT_FIELDS = {"ISOLATION": _ONE_MODEL}

# An env file is a few kilobytes; a bigger one is a mistake or an attack (a link to
# /dev/zero never ends), refused before it is read whole.
MAX_ENV_FILE_BYTES = 256 * 1024
# The most characters of one settings error or one value shown from the file.
MAX_SHOWN = 400
# The most characters of any one value of a daemon's log line (genesis_fp16/service/
# logsetup.py cuts every value, ours and the library's) and of a command's one-line error
# on stderr: what is logged is cut, never the data itself.
LOG_VALUE_BOUND = 1000


def bounded(text: str, limit: int = MAX_SHOWN) -> str:
    """``text``, or its first ``limit`` characters and how many more there were.

    >>> bounded("x" * 500, 10)
    'xxxxxxxxxx… (490 more characters)'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def env_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as an env file, in one line; None when it is a regular
    file, or when nothing at all is there (a dangling link is something: it is refused).
    Whether it can be opened, and its size, :func:`read_env_file` says as it reads."""
    try:
        info = path.stat()  # follows a link: what would be read
    except FileNotFoundError:
        if path.is_symlink():
            return f"env file {path} is a link to {os.readlink(path)}, which does not exist"
        return None
    except OSError as exc:
        return f"env file {path} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return f"env file {path} is not a regular file (a folder, a device or a pipe)"
    return None


@dataclass(frozen=True)
class EnvFileLine:
    """One ``NAME=value`` line of the ``.env`` file: its value, number and ``text`` as
    written (quotes, comments), which the read-only commands copy."""

    value: str
    line: int
    text: str


@dataclass(frozen=True)
class SettingsSources:
    """The ``.env`` file read (if any), its values and the process environment's."""

    env_file: Path
    env_file_read: bool
    file: Mapping[str, EnvFileLine] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    unparsable: bool = False  # a line of the file is not NAME=value
    # A name the file sets twice: (name, the earlier line, the later line, which wins).
    repeated: tuple[tuple[str, int, int], ...] = ()

    def source(self, variable: str) -> Source:
        """``environment``, ``.env`` or ``default`` for one variable name."""
        name = variable.upper()
        if name in self.environ:
            return "environment"
        if name in self.file:
            return ".env"
        return "default"

    def describe_removed(self) -> list[str]:
        """One line per removed setting (:data:`REMOVED_SETTINGS`) the file or the
        environment still sets: ignored, and why."""
        lines = []
        for name in sorted(set(self.file) | set(self.environ)):
            why = removed_setting(name)
            if why is not None:
                where = "the environment" if name in self.environ else str(self.env_file)
                lines.append(f"{name} (in {where}) is ignored: it was removed; {why}")
        return lines

    def describe_shadowed(self) -> list[str]:
        """One line per variable set in ``.env`` whose value the process environment
        replaces, with both values (secrets not shown), then each name set twice."""
        lines = []
        for name in sorted(self.file):
            if self.environ.get(name, self.file[name].value) == self.file[name].value:
                continue  # not in the environment, or the same value there
            secret = "PASSWORD" in name
            file_value = "**********" if secret else _shown(name, self.file[name].value)
            env_value = "**********" if secret else _shown(name, self.environ[name])
            lines.append(
                f"{name}={file_value} in {self.env_file} (line {self.file[name].line}) is "
                f"shadowed by {name}={env_value} in the process environment, which wins"
            )
        for name, earlier, later in self.repeated:
            lines.append(
                f"{name} is set twice in {self.env_file}, lines {earlier} and {later}: "
                f"line {later} wins"
            )
        return lines


def ours(name: str) -> bool:
    """Whether a variable name belongs to genesis-fp16 (case-insensitive, as pydantic reads)."""
    return name.upper().startswith(PREFIXES)


def read_env_file(
    path: Path,
) -> tuple[dict[str, EnvFileLine], list[str], list[tuple[str, int, int]]]:
    """The ``NAME=value`` lines of ``path`` (names upper-cased), one error per bad line, and
    each name set twice with both lines (the later wins, as python-dotenv reads it)."""
    from dotenv.parser import parse_stream

    values: dict[str, EnvFileLine] = {}
    errors: list[str] = []
    repeated: list[tuple[str, int, int]] = []
    try:
        with path.open("rb") as stream:  # never more than the bound, whatever it grew to
            raw, size = stream.read(MAX_ENV_FILE_BYTES + 1), os.fstat(stream.fileno()).st_size
    except OSError as exc:
        return {}, [f"env file {path} cannot be read ({exc.strerror or exc})"], []
    if len(raw) > MAX_ENV_FILE_BYTES:
        return {}, [f"env file {path} is {size} bytes; at most {MAX_ENV_FILE_BYTES} are read"], []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        byte = raw[exc.start : exc.start + 1].hex()
        return {}, [f"{path}, line {line}: byte 0x{byte} is not UTF-8; save the file as UTF-8"], []
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        shown = bounded(binding.original.string.strip())
        if binding.error:
            errors.append(f"{path}, line {line}: cannot parse {shown!r}; expected NAME=value")
        elif binding.key is not None and binding.value is None:
            errors.append(f"{path}, line {line}: {shown!r} has no '='; expected NAME=value")
        elif binding.key is not None and binding.value is not None:
            name = binding.key.upper()
            if name in values:
                repeated.append((name, values[name].line, line))
            text = binding.original.string.rstrip("\n") + "\n"
            values[name] = EnvFileLine(binding.value, line, text)
    return values, errors, repeated


def removed_setting(name: str) -> str | None:
    """Why ``name`` is a removed setting (:data:`REMOVED_SETTINGS`), or None.

    >>> removed_setting("GENESIS_FP16_AGENTS__SE_DARWIN__ISOLATION") is not None
    True
    """
    upper = name.upper()
    if upper in REMOVED_SETTINGS:
        return REMOVED_SETTINGS[upper]
    parts = upper.removeprefix(AGENTS_VARIABLE + "__").split("__")
    if upper.startswith(AGENTS_VARIABLE + "__") and len(parts) == 2 and parts[0]:
        return REMOVED_AGENT_FIELDS.get(parts[1])
    return None


def check_name(name: str, known: Collection[str], agent_fields: Iterable[str]) -> str | None:
    """None when ``name`` is a setting (or a removed one, which is ignored with a warning:
    :meth:`SettingsSources.describe_removed`), else one line saying so with the nearest one."""
    upper = name.upper()
    if not ours(upper) or upper in known or removed_setting(upper) is not None:
        return None
    if upper.startswith(AGENTS_VARIABLE + "__"):
        parts = upper.removeprefix(AGENTS_VARIABLE + "__").split("__")
        fields = [f.upper() for f in agent_fields]
        if parts[0] and (len(parts) == 1 or (len(parts) == 2 and parts[1] in fields)):
            return None
        if len(parts) >= 3 and parts[1] == OPTIONS_PART and all(parts[2:]):
            return None  # the option itself is checked against the agent's declaration
        if len(parts) >= 2 and parts[0]:
            candidates = [f"{AGENTS_VARIABLE}__{parts[0]}__{f}" for f in fields]
            candidates.append(f"{AGENTS_VARIABLE}__{parts[0]}__{OPTIONS_PART}__{parts[-1]}")
            return _unknown(upper, candidates)
        shape = f"{AGENTS_VARIABLE}__<AGENT>__<FIELD>"
        return f"{upper} is not a setting; per-agent settings are {shape}"
    return _unknown(upper, known)


def _unknown(name: str, candidates: Iterable[str]) -> str:
    near = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else "see .env.example for every setting"
    return f"{name} is not a setting; {hint}"


# A query parameter whose name says it holds a secret (?token=, ?api_key=, ?sig=): its
# value is shown as a URL's password is.
_SECRET_PARAMETER = re.compile(r"token|key|secret|sig|pass|pwd|auth|credential", re.IGNORECASE)


@functools.lru_cache(maxsize=256)  # the deliverer asks it of each event's receivers, each pass
def shown_url(url: str) -> str:
    """``url`` for a log line, an event file or ``config check``: a password in it, and
    the value of each query parameter whose name says it is a secret, replaced.

    >>> shown_url("http://user:hunter2@hooks.example/x")
    'http://user:***@hooks.example/x'
    >>> shown_url("https://hooks.example/x?token=abc123&team=ml&api_key=k")
    'https://hooks.example/x?token=***&team=ml&api_key=***'
    """
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username}:***@{host}")
    if parts.query:  # each name=value pair as written: nothing else re-encoded
        pairs = [_shown_pair(pair) for pair in re.split(r"([&;])", parts.query)]
        parts = parts._replace(query="".join(pairs))
    return urllib.parse.urlunsplit(parts)


def _shown_pair(pair: str) -> str:
    name, equals, value = pair.partition("=")
    secret = equals and value and _SECRET_PARAMETER.search(urllib.parse.unquote_plus(name))
    return f"{name}=***" if secret else pair


def _shown(name: str, value: str) -> str:
    """A shadowed variable's value as shown: a receiver URL's secrets replaced."""
    if name.endswith("EVENTS_URLS"):
        value = ",".join(shown_url(url.strip()) for url in value.split(","))
    return bounded(value)
