"""Settings for the commands that only read (``status``, ``agents``, ``model list``,
``precision show``, ``events list``...: genesis_fp16/commands/reading.py's
``SETTINGS_USE`` names them all) and for ``config check`` when the ``.env`` file is refused.

A typo in ``.env`` makes the running daemon refuse the reload and keep its settings; the
read-only commands must not go blind meanwhile. They use the file's other lines: every
line the errors do not name is kept (the state folder, the port, the allowlist stay what
the daemon most likely runs with), and what the errors name is left out. When that still
does not load, they use the environment and the defaults alone. A bad value in the
process environment is not the file's fault: it stays an error (exit 2).

The allowlist is never widened: when the file's ``GENESIS_FP16_PLUGIN_ALLOWLIST`` is not
used as written (its line is left out, unparsable, or the file is left out whole) and the
environment sets none, only that line's valid agent names are allowed, or none when it
cannot be read. Without this a typo in one name would let the commands import every
installed plugin.

``load_settings_for_reading`` says what it did in one line (``SettingsRead.note``), which
the commands print on stderr, so their ``--json`` stays one object on stdout::

    read = load_settings_for_reading()
    if read.note is not None:
        print(f"genesis-fp16: warning: {read.note}", file=sys.stderr)

The commands that act (``train``, ``model promote``, ``events redeliver``...) keep
refusing a bad file: they must act on the settings the operator wrote.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from genesis_fp16.config.settings import (
    Settings,
    SettingsError,
    load_settings_with_sources,
)
from genesis_fp16.config.settings_sources import (
    MAX_SHOWN,
    EnvFileLine,
    SettingsSources,
    bounded,
)
from genesis_fp16_infrastructure.api import is_agent_name

# A variable an error is about: the name it starts with (settings.py's messages do), or
# failing that any it mentions.
_LEADING = re.compile(r"^((?:GENESIS|ENABLE)_FP16_\w*)")
_MENTIONED = re.compile(r"\b((?:GENESIS|ENABLE)_FP16_\w*)")
# Each round leaves out what the errors name; a pair refused together (TLS) takes two.
MAX_ROUNDS = 5
ALLOWLIST = "GENESIS_FP16_PLUGIN_ALLOWLIST"


@dataclass(frozen=True)
class SettingsRead:
    """The settings a read-only command uses, and why they may not be the file's.

    ``refused``: the file's error (one line), None when the file loaded as it is;
    ``left_out``: the file's variables not used (all of them: ``whole_file``);
    ``allowed_only``: the plugins allowed when the file's allowlist was not used as
    written (its valid names; none when it cannot be read), else None.
    """

    settings: Settings
    sources: SettingsSources  # its env_file: the operator's file, never a kept copy
    refused: str | None = None
    left_out: tuple[str, ...] = ()
    whole_file: bool = False
    allowed_only: tuple[str, ...] | None = None

    @property
    def note(self) -> str | None:
        """One line for stderr: the file is refused, why, and which settings are used;
        each part cut (a file of a thousand bad lines is not echoed whole)."""
        if self.refused is None:
            return None
        if self.whole_file:
            used = "using the environment and the defaults only"
        elif not self.left_out:  # only lines that are not NAME=value: never used
            used = "using its other lines, the environment and the defaults"
        else:
            used = "using its other lines, the environment and the defaults (left out: "
            used += f"{bounded(', '.join(self.left_out), MAX_SHOWN // 2)})"
        if self.allowed_only is not None:
            names = bounded(", ".join(self.allowed_only), MAX_SHOWN // 2) or "none"
            used += f"; plugins allowed: its {ALLOWLIST}'s valid names only ({names})"
        return f"{self.sources.env_file} is refused ({bounded(self.refused)}); {used}"


def load_settings_for_reading(env_file: Path | str | None = None) -> SettingsRead:
    """:func:`load_settings_with_sources`, or, when the ``.env`` file is what it refuses,
    the settings without the file's bad lines (:class:`SettingsRead`). Raises the first
    :class:`SettingsError` when the environment itself is bad, or the file is missing."""
    try:
        settings, sources = load_settings_with_sources(env_file)
        return SettingsRead(settings, sources)
    except SettingsError as exc:
        first = exc
    if first.sources is None or not first.sources.env_file_read:
        raise first  # the environment's error, or a named file that is not there
    path = first.sources.env_file
    # The file's NAME=value lines by upper-cased name, as the load read them (a name set
    # twice: its later line); none when it is not UTF-8 or too big.
    lines = dict(first.sources.file)
    refused = "; ".join(first.errors)
    left_out = _blamed(first, set(lines))
    with tempfile.TemporaryDirectory(prefix="genesis-fp16-env-") as folder:
        kept = Path(folder) / ".env"
        for _ in range(MAX_ROUNDS):  # the unparsable lines are never among ``lines``
            loaded = _load_lines(kept, lines, left_out, path)
            if not isinstance(loaded, SettingsError):
                shown, whole = tuple(sorted(left_out)), not set(lines) - left_out
                read = SettingsRead(*loaded, refused, shown, whole)
                return _allowlist_kept(read, path, lines, used=set(lines) - left_out)
            blamed = _blamed(loaded, set(lines) - left_out)
            if not blamed:
                break
            left_out |= blamed
        loaded = _load_lines(kept, {}, set(), path)
    if isinstance(loaded, SettingsError):
        raise first
    read = SettingsRead(*loaded, refused, (), whole_file=True)
    return _allowlist_kept(read, path, lines, used=set())


def _allowlist_kept(
    read: SettingsRead, path: Path, lines: dict[str, EnvFileLine], used: set[str]
) -> SettingsRead:
    """``read``, its allowlist narrowed to the file's when the file's line is not used:
    that line's valid names, or none when the line cannot be read (module docstring)."""
    if ALLOWLIST in used or read.sources.source(ALLOWLIST) == "environment":
        return read
    if ALLOWLIST in lines:
        names = [n.strip() for n in lines[ALLOWLIST].value.split(",") if n.strip()]
        allowed = tuple(n for n in names if is_agent_name(n))
    elif ALLOWLIST in path.read_bytes().decode("utf-8", "replace").upper():
        allowed = ()  # named on a line that is not NAME=value, or in a file not UTF-8
    else:
        return read  # the file has no allowlist: the default is what it asks for
    settings = read.settings.model_copy(update={"plugin_allowlist": list(allowed)})
    return replace(read, settings=settings, allowed_only=allowed)


def _blamed(error: SettingsError, names: set[str]) -> set[str]:
    """The file's variables ``error`` is about: each message's leading variable, or the
    JSON object that holds it (``GENESIS_FP16_AGENTS`` for ``..._AGENTS__X__STEPS``);
    when no message leads with one of ``names``, every one a message mentions (a pair
    refused together: "..._TLS_CERT_FILE and ..._TLS_KEY_FILE must be set together")."""
    leading = {m.group(1) for m in map(_LEADING.match, error.errors) if m is not None}
    blamed = _within(leading, names)
    if not blamed:
        blamed = _within({v for e in error.errors for v in _MENTIONED.findall(e)}, names)
    return blamed


def _within(variables: set[str], names: set[str]) -> set[str]:
    """The ``names`` that are one of ``variables``, or hold one, or are held by one."""
    found = set()
    for variable in (v.rstrip("_") for v in variables):
        found |= {
            name
            for name in names
            if name == variable
            or variable.startswith(name + "__")
            or name.startswith(variable + "__")
        }
    return found


def _load_lines(
    kept: Path, lines: dict[str, EnvFileLine], left_out: set[str], shown: Path
) -> tuple[Settings, SettingsSources] | SettingsError:
    """The settings with ``kept`` holding the file's lines but ``left_out``; the sources
    name the operator's file, not this copy."""
    kept.write_text("".join(line.text for name, line in lines.items() if name not in left_out))
    try:
        settings, sources = load_settings_with_sources(kept)
    except SettingsError as exc:
        return exc
    return settings, replace(sources, env_file=shown)
