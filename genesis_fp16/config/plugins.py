"""Agent plugins, found through the ``genesis_fp16.agents`` entry-point group.

Discovery reads only package metadata; the allowlist is applied before anything is
imported, and a plugin is imported only when it is allowed. A plugin that fails to
import, has the wrong API version, or does not implement :class:`AgentPlugin` is
recorded with its state and error, and the others are unaffected.

>>> states = {r.name: r.state for r in discover_plugins(allowlist=["se_darwin"])}
>>> states["se_darwin"], states["rlhf_ppo"]
('loaded', 'not_allowed')
>>> load_plugin("se_darwin").name
'se_darwin'
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from typing import Literal

from genesis_fp16_infrastructure.contract.judging import judging_of
from genesis_fp16_infrastructure.contract.plugin_api import (
    SUPPORTED_API_VERSIONS,
    AgentPlugin,
    api_version_error,
)

ENTRY_POINT_GROUP = "genesis_fp16.agents"
OWN_DISTRIBUTION = "genesis-fp16"  # registers the built-in agents

log = logging.getLogger(__name__)

PluginState = Literal["loaded", "failed", "wrong_api", "not_allowed"]


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
    # Where a failed import failed, in the plugin's own code: "path/to/file.py:12".
    location: str | None = None
    # The failed import's whole traceback, for the daemon's DEBUG log.
    trace: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "value": self.value,
            "distribution": self.distribution,
            "state": self.state,
            "error": self.error,
            "location": self.location,
            "description": getattr(self.plugin, "description", None),
        }


def installed_entry_points() -> dict[str, EntryPoint]:
    """One entry point per agent name; the project's own built-ins cannot be shadowed.

    The same distribution can be visible twice (an editable install plus the source
    tree's egg-info on sys.path): the first one on the path wins. A name that another
    distribution registers too is the project's own when genesis-fp16 registers it (a
    package earlier on the path must not replace the built-in se_darwin), and otherwise
    the first found, with a warning naming both.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        first = found.setdefault(ep.name, ep)
        if first is ep or _distribution_name(first) == _distribution_name(ep):
            continue
        if _distribution_name(ep) == OWN_DISTRIBUTION:
            found[ep.name] = ep
            first, ep = ep, first
        log.warning(
            "plugin %r is registered by %s (%s) and by %s (%s); using %s's",
            ep.name,
            _distribution_name(first),
            first.value,
            _distribution_name(ep),
            ep.value,
            _distribution_name(first),
        )
    return dict(sorted(found.items()))


def _distribution_name(ep: EntryPoint) -> str | None:
    dist = ep.dist
    return dist.metadata["Name"] if dist is not None else None


def load_entry_point(ep: EntryPoint) -> PluginRecord:
    """Import one entry point's plugin and check its API: its record, ``loaded`` or why not."""
    found = PluginRecord(
        name=ep.name, value=ep.value, distribution=_distribution_name(ep), state="failed"
    )
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
    api = getattr(obj, "api_version", None)
    if api not in SUPPORTED_API_VERSIONS:
        return replace(
            found,
            state="wrong_api",
            error=api_version_error(api),
        )
    if not isinstance(obj, AgentPlugin):
        missing = [
            attr
            for attr in ("name", "description", "generate_sample_data", "train", "probe_setup")
            if not hasattr(obj, attr)
        ]
        return replace(found, error=f"not an AgentPlugin: missing {', '.join(missing)}")
    try:  # the judged-model capability, when declared, declared whole
        judging_of(obj)
    except TypeError as exc:
        return replace(found, error=f"judged models: {exc}")
    return replace(found, state="loaded", plugin=obj)


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


def discover_plugins(allowlist: Iterable[str] | None = None) -> list[PluginRecord]:
    """Find every agent plugin and import the allowed ones; sorted by name.

    ``allowlist=None`` allows all. Names outside the allowlist are listed with the state
    ``not_allowed`` and are never imported.
    """
    allowed = None if allowlist is None else set(allowlist)
    records = []
    for name, ep in installed_entry_points().items():
        if allowed is not None and name not in allowed:
            records.append(
                PluginRecord(
                    name=name,
                    value=ep.value,
                    distribution=_distribution_name(ep),
                    state="not_allowed",
                    error="not in GENESIS_FP16_PLUGIN_ALLOWLIST",
                )
            )
        else:
            records.append(load_entry_point(ep))
    return records


def known_agent_names() -> list[str]:
    return list(installed_entry_points())


def load_plugin(name: str, allowlist: Iterable[str] | None = None) -> AgentPlugin:
    """Import and return one agent plugin; only that plugin's code is imported.

    Raises :class:`PluginError` naming the known agents when ``name`` is unknown, and
    the reason when the plugin is not allowed or cannot be loaded.
    """
    eps = installed_entry_points()
    if name not in eps:
        known = ", ".join(eps) or "none installed"
        raise PluginError(f"unknown agent {name!r}; known agents: {known}")
    if allowlist is not None and name not in set(allowlist):
        raise PluginError(f"agent {name!r} is not in GENESIS_FP16_PLUGIN_ALLOWLIST")
    record = load_entry_point(eps[name])
    if record.plugin is None:
        raise PluginError(f"agent {name!r} cannot be loaded ({record.state}): {record.error}")
    return record.plugin
