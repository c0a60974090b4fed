"""Agent plugins, found through the ``genesis_fp16.agents`` entry-point group.

Discovery reads only package metadata; the allowlist is applied before anything is
imported, and a plugin is imported only when it is allowed. A plugin that fails to
import, has the wrong API version, or does not implement :class:`AgentPlugin` is
recorded with its state and error, and the others are unaffected. Each import runs on
its own thread, waited for at most the import deadline (the setting
``plugin_import_deadline_seconds``, by default ``IMPORT_DEADLINE_SECONDS``): a plugin
whose import hangs is recorded ``stuck`` (its thread goes on; :class:`PendingImport`
holds its result for whoever asks again), and the caller goes on without it.

>>> states = {r.name: r.state for r in discover_plugins(allowlist=["se_darwin"])}
>>> states["se_darwin"], states["rlhf_ppo"]
('loaded', 'not_allowed')
>>> load_plugin("se_darwin").plugin.name
'se_darwin'
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Literal, NamedTuple

from genesis_fp16.plugin_api import AgentPlugin
from genesis_fp16_infrastructure.api import (
    Capabilities,
    api_version_error,
    capabilities_of,
    check_agent_name,
)

ENTRY_POINT_GROUP = "genesis_fp16.agents"
OWN_DISTRIBUTION = "genesis-fp16"  # registers the built-in agents

log = logging.getLogger(__name__)

PluginState = Literal["loaded", "failed", "wrong_api", "not_allowed", "stuck", "refused"]
# How long one wait for a plugin's import lasts by default
# (GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS). Importing the built-in agents (torch
# first) took 8 s of wall time on a loaded 2-core host (`time genesis-fp16 agents`), so 10
# s reported healthy plugins stuck; one that takes longer than this is reported
# ``stuck`` and taken whenever it ends.
IMPORT_DEADLINE_SECONDS = 30.0
# Its ceiling: start-up waits the deadline before READY=1, and the shipped systemd unit
# gives start-up 300 s (TimeoutStartSec), so a longer wait would have systemd kill a
# daemon whose plugin hangs instead of it going on without that plugin.
MAX_IMPORT_DEADLINE_SECONDS = 240.0


class PluginError(Exception):
    """An agent that cannot be used: unknown, not allowed, failed or wrong API."""


@dataclass(frozen=True)
class PluginRecord:
    """What discovery found under one entry-point name."""

    name: str
    value: str
    distribution: str | None
    state: PluginState
    error: str | None = None
    plugin: AgentPlugin | None = None
    # What the loaded plugin declares, read and checked once, at load (none otherwise).
    capabilities: Capabilities = field(default_factory=Capabilities)
    # Where a failed import failed, in the plugin's own code: "path/to/file.py:12".
    location: str | None = None
    # The failed import's whole traceback, for the daemon's DEBUG log.
    trace: str | None = None
    # Another distribution registers this name too: which one is used (EntryPointScan).
    shadowed: str | None = None

    @classmethod
    def of(cls, ep: EntryPoint, state: PluginState, error: str | None = None) -> PluginRecord:
        """The record of ``ep`` in ``state`` (``error``: why it is not loaded)."""
        return cls(ep.name, ep.value, _distribution_name(ep), state, error)

    def to_json(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "value": self.value,
            "distribution": self.distribution,
            "state": self.state,
            "error": self.error,
            "location": self.location,
            "shadowed": self.shadowed,
            "description": None if self.plugin is None else self.plugin.description,
        }


@dataclass(frozen=True)
class EntryPointScan:
    """The entry points of ``genesis_fp16.agents`` as found: one per agent name
    (``found``), the names refused (not agent names: ``refused``, name to its one-line
    error) and the names registered twice (``shadowed``, name to which one is used)."""

    found: dict[str, EntryPoint]
    refused: dict[str, str]
    shadowed: dict[str, str]

    def problems(self) -> list[str]:
        """Each refused or shadowed name in one line, for a log or a listing."""
        lines = [f"entry point refused: {why}" for why in self.refused.values()]
        return lines + [f"plugin {name!r} {note}" for name, note in self.shadowed.items()]


def scan_entry_points() -> EntryPointScan:
    """Every entry point of the group, read from package metadata only (nothing imported).

    A name that is not an agent name (genesis_fp16/config/agent_names.py: ``../x``,
    ``a/b``) is refused: it would be a path out of the state folder. The same
    distribution can be visible twice (an editable install plus the source tree's
    egg-info on sys.path): the first one on the path wins. A name that another
    distribution registers too is the project's own when genesis-fp16 registers it (a
    package earlier on the path must not replace the built-in se_darwin), and otherwise
    the first found; ``shadowed`` names both.
    """
    found: dict[str, EntryPoint] = {}
    refused: dict[str, str] = {}
    shadowed: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            check_agent_name(ep.name)
        except ValueError as exc:
            where = f"{_distribution_name(ep)} ({ep.value})"
            refused[ep.name] = f"{exc}; registered by {where}, not loaded"
            continue
        first = found.setdefault(ep.name, ep)
        if first is ep or _distribution_name(first) == _distribution_name(ep):
            continue
        if _distribution_name(ep) == OWN_DISTRIBUTION:
            found[ep.name] = ep
            first, ep = ep, first
        shadowed[ep.name] = (
            f"is registered by {_distribution_name(first)} ({first.value}) and by "
            f"{_distribution_name(ep)} ({ep.value}); using {_distribution_name(first)}'s"
        )
    return EntryPointScan(dict(sorted(found.items())), refused, shadowed)


# What this process has said of the entry points: each line once, not at every rescan.
_said: set[str] = set()
_said_lock = threading.Lock()


def say_once(scan: EntryPointScan) -> None:
    """Log each refused or shadowed name of ``scan`` as a warning, once in this process's
    life however often it is scanned (the daemon scans at every tick)."""
    with _said_lock:
        new = [line for line in scan.problems() if line not in _said]
        _said.update(new)
    for line in new:
        log.warning("%s", line)


def installed_entry_points() -> dict[str, EntryPoint]:
    """One entry point per agent name (:func:`scan_entry_points`, its problems said once)."""
    scan = scan_entry_points()
    say_once(scan)
    return scan.found


def _distribution_name(ep: EntryPoint) -> str | None:
    dist = ep.dist
    return dist.metadata["Name"] if dist is not None else None


def load_entry_point(ep: EntryPoint) -> PluginRecord:
    """Import one entry point's plugin and check its API: its record, ``loaded`` or why not."""
    found = PluginRecord.of(ep, "failed")
    try:
        obj = ep.load()
        # The entry point names the plugin itself or a zero-argument factory.
        if callable(obj) and not hasattr(obj, "api_version"):
            obj = obj()
    except Exception as exc:  # any error in third-party import code is the plugin's
        where = failure_location(exc, ep.module)
        if where is not None:
            why = f" (at {where})"
        elif isinstance(exc, ModuleNotFoundError) and f"{ep.module}.".startswith(f"{exc.name}."):
            # The entry point's own module: installed for another Python, or its files gone.
            why = f" (the entry point's module is not importable by {sys.executable})"
        else:
            why = ""
        return replace(
            found,
            error=f"{type(exc).__name__}: {exc}{why}",
            location=where,
            trace="".join(traceback.format_exception(exc)),
        )
    wrong_api = api_version_error(getattr(obj, "api_version", None))
    if wrong_api is not None:
        return replace(found, state="wrong_api", error=wrong_api)
    if not isinstance(obj, AgentPlugin):
        missing = [
            attr
            for attr in ("name", "description", "generate_sample_data", "train", "probe_setup")
            if not hasattr(obj, attr)
        ]
        return replace(found, error=f"not an AgentPlugin: missing {', '.join(missing)}")
    try:  # each optional capability, when declared, declared whole (plugin_api's protocol)
        capabilities = capabilities_of(obj)
    except Exception as exc:  # a property that raises is the plugin's too
        return replace(found, error=f"capabilities: {type(exc).__name__}: {exc}")
    return replace(found, state="loaded", plugin=obj, capabilities=capabilities)


class PendingImport:
    """One entry point imported on its own daemon thread (a hung import cannot be
    stopped; as a daemon thread it never holds the process's exit).

    >>> pending = PendingImport(installed_entry_points()["se_darwin"])
    >>> pending.wait(60).state
    'loaded'
    """

    def __init__(self, ep: EntryPoint) -> None:
        self.name = ep.name
        self.started = time.monotonic()
        self._done = threading.Event()
        self._record: PluginRecord | None = None

        def run() -> None:
            try:
                self._record = load_entry_point(ep)
            except BaseException as exc:  # sys.exit() at import: on this thread, ends only it
                why = f"{type(exc).__name__}: {exc} (raised while importing)"
                self._record = PluginRecord.of(ep, "failed", why)
            finally:
                self._done.set()

        thread = threading.Thread(target=run, name=f"plugin-import-{ep.name}", daemon=True)
        thread.start()

    def wait(self, timeout: float) -> PluginRecord | None:
        """The import's record, or None when it has not ended within ``timeout`` seconds."""
        return self._record if self._done.wait(max(0.0, timeout)) else None

    def stuck(self, ep: EntryPoint) -> PluginRecord:
        """The record of an import still running: state ``stuck``, for how long."""
        seconds = time.monotonic() - self.started
        return PluginRecord.of(ep, "stuck", f"its import has not returned after {seconds:.0f} s")


def wait_all(
    pending: Mapping[str, PendingImport], deadline: float
) -> dict[str, PluginRecord | None]:
    """Each import's record, all waited for together until ``deadline`` (time.monotonic);
    None for those still running then."""
    return {name: p.wait(deadline - time.monotonic()) for name, p in pending.items()}


def failure_location(exc: BaseException, module: str) -> str | None:
    """The file and line of the plugin's own code where loading ``module`` failed.

    A syntax error names its own line. Otherwise it is the innermost frame of the
    plugin's top-level package: the line that raised, or the plugin's ``import`` of a
    dependency that is missing or broken (the frames inside importlib and inside the
    dependency say less to its author). None when no frame is the plugin's (its module
    itself is not on the path).

    >>> failure_location(SyntaxError("x", ("agent.py", 3, 1, "x")), "agent")
    'agent.py:3'
    """
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    top = module.split(".")[0]
    where = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        name = str(frame.f_globals.get("__name__", ""))
        if name == top or name.startswith(f"{top}."):
            where = f"{frame.f_code.co_filename}:{line}"
    return where


def discover_plugins(
    allowlist: Iterable[str] | None = None, deadline: float = IMPORT_DEADLINE_SECONDS
) -> list[PluginRecord]:
    """Find every agent plugin and import the allowed ones; sorted by name, then the
    names refused (not agent names: state ``refused``, never imported).

    ``allowlist=None`` allows all. Names outside the allowlist are listed with the state
    ``not_allowed`` and are never imported. The imports run together; one that has not
    returned after ``deadline`` seconds is listed ``stuck``.
    """
    allowed = None if allowlist is None else set(allowlist)
    scan = scan_entry_points()
    eps = scan.found
    pending = {
        name: PendingImport(ep) for name, ep in eps.items() if allowed is None or name in allowed
    }
    done = wait_all(pending, time.monotonic() + deadline)
    records = []
    for name, ep in eps.items():
        if name in pending:
            record = done[name] or pending[name].stuck(ep)
        else:
            record = PluginRecord.of(ep, "not_allowed", "not in GENESIS_FP16_PLUGIN_ALLOWLIST")
        records.append(replace(record, shadowed=scan.shadowed.get(name)))
    refused = [
        PluginRecord(name=name, value="", distribution=None, state="refused", error=why)
        for name, why in scan.refused.items()
    ]
    return records + refused


def known_agent_names() -> list[str]:
    return list(installed_entry_points())


class LoadedPlugin(NamedTuple):
    """A plugin :func:`load_plugin` loaded, and what it declares, read and checked once
    at load: a run's plan and its judged run take these, not the plugin's own."""

    plugin: AgentPlugin
    capabilities: Capabilities


def load_plugin(name: str, allowlist: Iterable[str] | None = None) -> LoadedPlugin:
    """Import one agent plugin, with what it declares; only that plugin's code is imported.

    Raises :class:`PluginError` naming the known agents when ``name`` is unknown, and
    the reason when the plugin is not allowed or cannot be loaded.
    """
    try:  # every way in checked it already: here for a library caller
        check_agent_name(name)
    except ValueError as exc:
        raise PluginError(str(exc)) from None
    eps = installed_entry_points()
    if name not in eps:
        known = ", ".join(eps) or "none installed"
        raise PluginError(f"unknown agent {name!r}; known agents: {known}")
    if allowlist is not None and name not in set(allowlist):
        raise PluginError(f"agent {name!r} is not in GENESIS_FP16_PLUGIN_ALLOWLIST")
    record = load_entry_point(eps[name])
    if record.plugin is None:
        raise PluginError(f"agent {name!r} cannot be loaded ({record.state}): {record.error}")
    return LoadedPlugin(record.plugin, record.capabilities)
