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

None of this runs on the daemon's main thread, which only waits, pings systemd's watchdog
and handles signals: :meth:`AgentRescan.request` hands a rescan to the ``plugin-scan``
thread and returns. Each import runs on a thread of its own (config/plugins.py's
:class:`PendingImport`) and is waited for at most the import deadline (the setting
``plugin_import_deadline_seconds``, 30 s by default); one that has not returned by then
is *stuck*: logged once, shown by ``genesis_fp16_plugin_load_stuck``, by the status page
and by ``genesis-fp16 agents``, and looked at again at each rescan, which takes its result
(loaded or failed) whenever the import ends. A hung import cannot be stopped or started
twice (the interpreter's lock on that module is held), so a plugin stays stuck until its
import returns or the daemon restarts; the other agents' loading, scheduling and runs go
on meanwhile.

A plugin already loaded keeps the code the daemon imported until a restart; each run in
a child process (the default) imports the installed code afresh. The state folder's lock
file lists the scheduled agents, so that a ``train`` refused beside the daemon is told
whether the daemon trains that agent itself.

>>> agents = AgentRescan(settings.plugin_allowlist, metrics)  # doctest: +SKIP
>>> agents.load(settings)  # doctest: +SKIP
>>> agents.rescan(settings, scheduler, retry_failed=True)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import importlib
import site
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from importlib.metadata import EntryPoint
from pathlib import Path

import structlog

from genesis_fp16.config.plugins import (
    IMPORT_DEADLINE_SECONDS,
    LoadedPlugin,
    PendingImport,
    PluginRecord,
    say_once,
    scan_entry_points,
    wait_all,
)
from genesis_fp16.config.settings import Settings, SettingsError
from genesis_fp16.jobs.run_request import check_configured_options
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.service.scheduler import AgentScheduler
from genesis_fp16_infrastructure.api import AgentFolder, SetAside

log = structlog.get_logger("genesis_fp16.daemon")


def _pth_files() -> set[Path]:
    found: set[Path] = set()
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    for folder in map(Path, [*site.getsitepackages(), *user]):
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
    reader on another thread sees the old set or the new one, never one in between), and
    the imports still running past their deadline (:attr:`stuck`: name to its import, its
    ``started`` on ``time.monotonic``). Each loaded plugin comes with what it declares,
    read once when it was loaded: the main thread's option checks (start-up, reload) and
    each run's plan read these, never the plugin's own declarations."""

    def __init__(
        self,
        allowlist: Iterable[str] | None,
        metrics: DaemonMetrics,
        deadline: float = IMPORT_DEADLINE_SECONDS,
    ) -> None:
        self.allowlist = None if allowlist is None else frozenset(allowlist)
        self.metrics = metrics
        self.deadline = deadline
        self.plugins: dict[str, LoadedPlugin] = {}
        self.stuck: dict[str, PendingImport] = {}  # imports past their deadline, not taken yet
        self.refused: set[str] = set()  # entry-point names that are not agent names
        self.shadowed: dict[str, str] = {}  # name -> which of its registrations is used
        self._tried: dict[str, str] = {}  # name -> _key of the entry point last tried
        # The .pth files site.py read when this interpreter started: not read again.
        self._pth = _pth_files()
        self._asked = threading.Condition()
        self._request: tuple[Settings, bool] | None = None
        self._closed = False

    def load(self, settings: Settings) -> None:
        """Start-up: import every allowed plugin, waiting at most the deadline for them
        all; failures are logged and counted, a stuck import is taken by a later rescan."""
        # A bad option of a plugin loaded now stops start-up: the daemon checks them all.
        self.plugins = self._scan(settings, retry_failed=True, check_options=False)
        if not self.plugins:
            log.warning("no agent plugin loaded; the daemon runs but trains nothing")

    def start(
        self,
        scheduler: AgentScheduler,
        lock: AbstractContextManager[object],
        on_change: Callable[[], None],
    ) -> None:
        """Start the ``plugin-scan`` thread: each :meth:`request` becomes one :meth:`rescan`
        there, its changes made under ``lock`` and followed by ``on_change()`` (under it too)."""

        def serve() -> None:
            while (asked := self._next_request()) is not None:
                settings, retry_failed = asked
                if self.rescan(settings, scheduler, retry_failed, lock):
                    with lock:
                        on_change()

        threading.Thread(target=serve, name="plugin-scan", daemon=True).start()

    def request(self, settings: Settings, retry_failed: bool = False) -> None:
        """Ask the scan thread for a rescan with ``settings``; returns at once. Requests made
        while one runs are merged into the next (a SIGHUP's ``retry_failed`` kept)."""
        with self._asked:
            earlier = self._request is not None and self._request[1]
            self._request = (settings, retry_failed or earlier)
            self._asked.notify()

    def stop(self) -> None:
        """No rescan starts or changes the schedule after this (the daemon shuts down)."""
        with self._asked:
            self._closed = True
            self._asked.notify()

    def _next_request(self) -> tuple[Settings, bool] | None:
        with self._asked:
            while self._request is None and not self._closed:
                self._asked.wait()
            if self._closed:
                return None
            asked, self._request = self._request, None
            return asked

    def rescan(
        self,
        settings: Settings,
        scheduler: AgentScheduler,
        retry_failed: bool = False,
        lock: AbstractContextManager[object] | None = None,
    ) -> bool:
        """Load new plugins, drop uninstalled ones and schedule accordingly; True when
        the set of agents changed. The imports run before ``lock`` is taken."""
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
        with lock if lock is not None else contextlib.nullcontext():
            if self._closed:  # shutting down: the scheduler is being stopped
                return False
            changes = scheduler.sync(settings, found, first=settings.run_at_start)
            self.plugins = found  # /readyz names them once scheduled and in the lock file
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
    ) -> dict[str, LoadedPlugin]:
        found: dict[str, LoadedPlugin] = {}
        scan = scan_entry_points()
        say_once(scan)  # a refused or shadowed name: one line for the daemon's life
        self.metrics.plugin_names_refused.inc(len(set(scan.refused) - self.refused))
        self.refused, self.shadowed = set(scan.refused), dict(scan.shadowed)
        eps = scan.found
        for name in set(self._tried) - set(eps):
            del self._tried[name]  # uninstalled: a reinstall is tried afresh
        for name in set(self.stuck) - set(eps):
            self._unstuck(name)  # uninstalled while stuck: its import, if it ends, is not used
        waiting = {}
        for name, ep in eps.items():
            if name in self.plugins:
                found[name] = self.plugins[name]
            elif name in self.stuck:
                waiting[name] = self.stuck[name]
            elif self._tried.get(name) != (key := _key(ep)) or retry_failed:
                self._tried[name] = key  # one read of the RECORD file
                if self.allowlist is not None and name not in self.allowlist:
                    log.info("plugin not in allowlist, not imported", plugin=name)
                    continue
                waiting[name] = PendingImport(ep)
            # else: failed, or not allowed, as installed: said once already
        # An import already stuck is only looked at; new ones get the whole deadline.
        fresh = any(name not in self.stuck for name in waiting)
        done = wait_all(waiting, time.monotonic() + (self.deadline if fresh else 0.0))
        for name, record in done.items():
            if record is None:
                self._still_stuck(name, eps[name], waiting[name])
                continue
            self._unstuck(name)
            plugin = self._load_one(settings, record, check_options)
            if plugin is not None:
                found[name] = plugin
        return found

    def _still_stuck(self, name: str, ep: EntryPoint, pending: PendingImport) -> None:
        """Said once per stuck import; the gauge shows it until the import ends."""
        if name in self.stuck:
            return
        self.stuck[name] = pending
        self.metrics.plugin_load_stuck.labels(plugin=name).set(1)
        log.error(
            "plugin import stuck: the daemon goes on without it and takes it when it returns",
            plugin=name,
            value=ep.value,
            waited_seconds=round(time.monotonic() - pending.started, 1),
        )

    def _unstuck(self, name: str) -> None:
        pending = self.stuck.pop(name, None)
        if pending is not None:
            self.metrics.plugin_load_stuck.labels(plugin=name).set(0)
            log.info(
                "stuck plugin import returned",
                plugin=name,
                after_seconds=round(time.monotonic() - pending.started, 1),
            )

    def _load_one(
        self, settings: Settings, record: PluginRecord, check_options: bool
    ) -> LoadedPlugin | None:
        plugin, name = record.plugin, record.name
        if record.state != "loaded" or plugin is None:
            self._failed(record.name, record.state, record.error, record.location)
            if record.trace:
                log.debug("plugin import traceback", plugin=name, traceback=record.trace)
            return None
        declared = record.capabilities  # read off the main thread, at load
        if check_options:  # a bad option keeps this one plugin out; the daemon goes on
            try:
                check_configured_options(settings, {name: declared})
            except SettingsError as exc:
                self._failed(name, "bad_options", str(exc), None)
                return None
        self.metrics.add_agent(name, _stored_success(settings, name))
        # Loaded: not stuck, and its failures' series exists (at 0 until one happens).
        self.metrics.plugin_load_stuck.labels(plugin=name).set(0)
        self.metrics.plugin_load_failures.labels(plugin=name)
        self.metrics.verdicts.export_folder(name, AgentFolder(settings.state_dir, name))
        log.info("plugin loaded", plugin=name, value=record.value)
        return LoadedPlugin(plugin, declared)

    def _failed(self, name: str, state: str, error: str | None, location: str | None) -> None:
        self.metrics.plugin_load_failures.labels(plugin=name).inc()
        log.error("plugin failed to load", plugin=name, state=state, error=error, location=location)


def _stored_success(settings: Settings, agent: str) -> float:
    """The agent's last success time from the state folder; 0 when it never succeeded,
    or when its file is unusable (logged and counted: the daemon starts all the same)."""

    def skipped(event: SetAside) -> None:
        log.warning(
            "skipping the last-success file: the agent starts at 0", agent=agent, error=event.why
        )

    return AgentFolder(settings.state_dir, agent).stored_last_success(skipped)
