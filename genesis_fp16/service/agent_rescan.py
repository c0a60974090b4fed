"""The daemon's agents, kept in step with the installed plugins while it runs.

At start-up every allowed entry point of ``genesis_fp16.agents`` is imported
(genesis_fp16/config/plugins.py). After that the daemon rescans the entry points at each
scheduler tick (every ``GENESIS_FP16_HEARTBEAT_SECONDS``) and on SIGHUP:

- a plugin installed since (``pip install``, ``pip install -e``: its new ``.pth`` file is
  read too) is imported, its configured options are checked, and it gets its schedule;
  with ``RUN_AT_START`` its first run starts at once;
- a plugin uninstalled since loses its schedule; a run of it in progress finishes (or
  stops as the daemon stops runs), and no new one starts;
- a plugin that failed to load is tried again when its entry point changes (a
  reinstall) or on SIGHUP, not at every tick: its error is logged once per try, with
  the file and line of the plugin's code, and its whole traceback at DEBUG.

A plugin already loaded keeps the code the daemon imported until a restart; each run in
a child process (the default) imports the installed code afresh. The state folder's lock
file lists the scheduled agents, so that a ``train`` refused beside the daemon is told
whether the daemon trains that agent itself.

>>> agents = AgentRescan(settings.plugin_allowlist, metrics, stored_success)  # doctest: +SKIP
>>> agents.load(settings)  # doctest: +SKIP
>>> agents.rescan(settings, scheduler, owner_fd, retry_failed=True)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import site
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint
from pathlib import Path

import structlog

from genesis_fp16.config.plugins import PluginRecord, installed_entry_points, load_entry_point
from genesis_fp16.config.settings import Settings, SettingsError
from genesis_fp16.jobs.run_request import check_configured_options
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.service.scheduler import AgentScheduler
from genesis_fp16.service.state_lock import record_scheduled
from genesis_fp16_infrastructure.contract import AgentPlugin

log = structlog.get_logger("genesis_fp16.daemon")


def _site_dirs() -> list[Path]:
    dirs = [Path(d) for d in site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(site.getusersitepackages()))
    return dirs


def _pth_files() -> set[Path]:
    found: set[Path] = set()
    for folder in _site_dirs():
        try:
            found.update(folder.glob("*.pth"))
        except OSError:
            continue
    return found


def _key(ep: EntryPoint) -> str:
    """What identifies an entry point's install: a reinstall changes it. pip writes the
    RECORD (the list of installed files) last, so a plugin tried while pip was still
    copying it is tried again once pip is done."""
    if ep.dist is None:
        return ep.value
    record = ep.dist.read_text("RECORD") or ""
    return f"{ep.value} {ep.dist.version} {hash(record)}"


class AgentRescan:
    """The loaded plugins by name (:attr:`plugins`, replaced whole on each change, so a
    reader on another thread sees the old set or the new one, never one in between)."""

    def __init__(
        self,
        allowlist: Iterable[str] | None,
        metrics: DaemonMetrics,
        stored_success: Callable[[str], float],
    ) -> None:
        self.allowlist = None if allowlist is None else frozenset(allowlist)
        self.metrics = metrics
        self.stored_success = stored_success
        self.plugins: dict[str, AgentPlugin] = {}
        self._tried: dict[str, str] = {}  # name -> _key of the entry point last tried
        # The .pth files site.py read when this interpreter started: not read again.
        self._pth = _pth_files()

    def load(self, settings: Settings) -> None:
        """Start-up: import every allowed plugin; failures are logged and counted."""
        # A bad option of a plugin loaded now stops start-up: the daemon checks them all.
        self.plugins = self._scan(settings, retry_failed=True, check_options=False)
        if not self.plugins:
            log.warning("no agent plugin loaded; the daemon runs but trains nothing")

    def rescan(
        self,
        settings: Settings,
        scheduler: AgentScheduler,
        owner_fd: int,
        retry_failed: bool = False,
    ) -> bool:
        """Load new plugins, drop uninstalled ones and schedule accordingly; True when
        the set of agents changed."""
        try:
            importlib.invalidate_caches()  # new files on sys.path, new dist-info folders
            self._read_new_pth_files()
            found = self._scan(settings, retry_failed, check_options=True)
        except Exception:  # unreadable metadata, say: the agents loaded go on as they are
            log.exception("plugin rescan failed; the loaded agents are kept")
            return False
        added = sorted(set(found) - set(self.plugins))
        removed = sorted(set(self.plugins) - set(found))
        if not added and not removed:
            return False
        self.plugins = found
        scheduler.set_plugins(found)
        changes = scheduler.sync(settings, first=settings.run_at_start)
        record_scheduled(owner_fd, scheduler.scheduled_agents())
        for agent in removed:
            log.info("agent removed: plugin uninstalled; a run in progress finishes", agent=agent)
        log.info("agents changed", added=added, removed=removed, schedule_changes=changes)
        return True

    def _read_new_pth_files(self) -> None:
        """Read the ``.pth`` files installed since start-up, as site.py would have: an
        editable install (``pip install -e``) puts its package on the path through one."""
        for path in sorted(_pth_files() - self._pth):
            self._pth.add(path)
            try:
                site.addpackage(str(path.parent), path.name, None)
            except Exception as exc:  # a broken .pth file is its package's, not ours
                log.error("cannot read a new .pth file", path=str(path), error=str(exc))

    def _scan(
        self, settings: Settings, retry_failed: bool, check_options: bool
    ) -> dict[str, AgentPlugin]:
        found: dict[str, AgentPlugin] = {}
        eps = installed_entry_points()
        for name in set(self._tried) - set(eps):
            del self._tried[name]  # uninstalled: a reinstall is tried afresh
        for name, ep in eps.items():
            if name in self.plugins:
                found[name] = self.plugins[name]
                continue
            if self._tried.get(name) == _key(ep) and not retry_failed:
                continue  # failed, or not allowed, as installed: said once already
            self._tried[name] = _key(ep)
            if self.allowlist is not None and name not in self.allowlist:
                log.info("plugin not in allowlist, not imported", plugin=name)
                continue
            plugin = self._load_one(settings, load_entry_point(ep), check_options)
            if plugin is not None:
                found[name] = plugin
        return found

    def _load_one(
        self, settings: Settings, record: PluginRecord, check_options: bool
    ) -> AgentPlugin | None:
        plugin, name = record.plugin, record.name
        if record.state != "loaded" or plugin is None:
            self._failed(record.name, record.state, record.error, record.location)
            if record.trace:
                log.debug("plugin import traceback", plugin=name, traceback=record.trace)
            return None
        if check_options:  # a bad option keeps this one plugin out; the daemon goes on
            try:
                check_configured_options(settings, {name: plugin})
            except SettingsError as exc:
                self._failed(name, "bad_options", str(exc), None)
                return None
        self.metrics.add_agent(name, self.stored_success(name))
        log.info("plugin loaded", plugin=name, value=record.value)
        return plugin

    def _failed(self, name: str, state: str, error: str | None, location: str | None) -> None:
        self.metrics.plugin_load_failures.labels(plugin=name).inc()
        log.error("plugin failed to load", plugin=name, state=state, error=error, location=location)
