"""The long-running service behind ``genesis-fp16 serve``.

Start-up: load plugins (failures are counted, the rest go on), start the HTTP endpoints
and the scheduler, then tell systemd READY=1. The main thread then only waits, pings the
watchdog and dispatches: SIGHUP (or a change of the ``.env`` file) re-reads the settings
and asks for a rescan of the installed plugins (each tick asks too), which runs on the
``plugin-scan`` thread (agent_rescan.py), never here: a plugin whose import hangs costs
neither a watchdog ping nor a signal. SIGTERM and SIGINT shut down. Shutdown
pauses the agent jobs, sends STOPPING=1, asks running jobs to stop at their next step
boundary (they checkpoint), and waits for them at most ``shutdown_timeout_seconds``;
past that it kills the runs' processes and exits 1. The state folder's lock is released
only after every process a run started, and the run worker, has ended.

>>> Daemon(load_settings(), env_file=Path(".env")).run()  # doctest: +SKIP
0
"""

from __future__ import annotations

import errno
import math
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

import structlog
from prometheus_client import CollectorRegistry, ProcessCollector

from genesis_fp16 import __version__
from genesis_fp16.config.plugins import LoadedPlugin, known_agent_names
from genesis_fp16.config.settings import (
    Settings,
    SettingsError,
    load_settings_with_sources,
    precision_switched,
    resolve_device,
)
from genesis_fp16.config.settings_sources import SettingsSources
from genesis_fp16.events.delivery import start_delivery
from genesis_fp16.jobs.agent_job import DeviceSlots, JobContext, run_agent_job
from genesis_fp16.jobs.run_request import (
    check_configured_options,
    expected_precision,
    next_loss_scale,
    precision_request,
)
from genesis_fp16.launch.devices import check_devices
from genesis_fp16.launch.run_worker import WORKER
from genesis_fp16.metrics.daemon_metrics import DaemonMetrics
from genesis_fp16.metrics.http import StatusServer, raise_open_file_limit, tls_context
from genesis_fp16.service.agent_rescan import AgentRescan
from genesis_fp16.service.logsetup import on_thread_exception
from genesis_fp16.service.run_now import (
    Answer,
    NotAFolder,
    Outcome,
    not_scheduled,
    prune_answers,
    take_requests,
    write_answer,
)
from genesis_fp16.service.scheduler import AgentScheduler
from genesis_fp16.service.state_lock import StateFolderBusy, acquire_state_folder
from genesis_fp16.service.systemd import Notifier
from genesis_fp16.status.serving import status_documents
from genesis_fp16.status.when import clock
from genesis_fp16_infrastructure.api import AgentFolder, Capabilities, on_set_aside

log = structlog.get_logger("genesis_fp16.daemon")

# Settings read once at start-up; a reload that changes them logs that a restart is needed.
RESTART_ONLY = (
    "state_dir",
    "metrics_addr",
    "metrics_port",
    "tls_cert_file",
    "tls_key_file",
    "tls_key_password",
    "log_format",
    "log_level",
    "plugin_allowlist",
    "plugin_import_deadline_seconds",
    "device_concurrency",
    "heartbeat_seconds",
    "misfire_grace_seconds",
)
# Names in the run-now folder that are no request, each logged once (a bound on memory).
MAX_STRAYS_SAID = 1000
# The heartbeat is stale after this many missed intervals.
HEARTBEAT_TOLERANCE = 3
# How long the shutdown waits for a killed run's job, and for the run worker, to end.
KILLED_SECONDS = 10.0


class StartupError(Exception):
    """A setting the daemon cannot start with, found only when used: one line naming it."""


class Daemon:
    """Wires settings, plugins, metrics, scheduler, HTTP and systemd together."""

    def __init__(
        self,
        settings: Settings,
        env_file: Path,
        registry: CollectorRegistry | None = None,
        notifier: Notifier | None = None,
        sources: SettingsSources | None = None,
    ) -> None:
        self.sources = sources
        self.env_file = env_file
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = DaemonMetrics(self.registry, __version__)
        # process_resident_memory_bytes, process_open_fds, process_cpu_seconds_total, ...:
        # a leaking plugin or a flood of sockets shows on the dashboard before it kills us.
        ProcessCollector(registry=self.registry)
        on_thread_exception(self.metrics.thread_exceptions.inc)
        on_set_aside(
            lambda event: self.metrics.state_files_skipped.labels(
                agent=event.agent, file=event.label
            ).inc()
        )
        self.metrics.fp32_rollback.set(settings.enable_fp16_training is False)
        self.notifier = notifier if notifier is not None else Notifier.from_environment()
        self.stopping = threading.Event()
        self.context = JobContext(
            settings=settings,
            metrics=self.metrics,
            slots=DeviceSlots(settings.device_concurrency),
            stopping=self.stopping,
        )
        self._wake = threading.Event()
        self._reload_requested = False
        # (since, the one-line error) while the .env file is refused; None once it loads.
        self.reload_refused: tuple[float, str] | None = None
        # Whether the running settings were read from the env file (a vanished file is
        # then refused, not read as "no file").
        self._env_file_in_force = sources.env_file_read if sources else env_file.is_file()
        # Agents whose run-now request brought their job forward, until the job returns.
        self._run_now_asked: dict[str, float] = {}
        self._strays_said: set[str] = set()
        self._run_now_refused = False  # run_now/ is a link (said once until it is not)
        self._heartbeat = 0.0
        self._ready = False
        self.agents = AgentRescan(
            settings.plugin_allowlist, self.metrics, settings.plugin_import_deadline_seconds
        )

    @property
    def settings(self) -> Settings:
        return self.context.settings

    @property
    def plugins(self) -> dict[str, LoadedPlugin]:
        """The loaded agents, each with what it declares, replaced whole when a plugin is
        installed or uninstalled (agent_rescan.py)."""
        return self.agents.plugins

    # -- health -----------------------------------------------------------------------
    def beat(self) -> None:
        self._heartbeat = time.time()
        self.metrics.heartbeat.set(self._heartbeat)

    def _stale_heartbeat(self) -> str | None:
        age = time.time() - self._heartbeat  # read once: the verdict and its words agree
        fresh = age <= HEARTBEAT_TOLERANCE * self.settings.heartbeat_seconds
        return None if fresh else f"scheduler heartbeat is {age:.0f} s old"

    def liveness(self) -> tuple[bool, str]:
        """/livez: what a restart mends (a stale heartbeat), not what it cannot (a full disk)."""
        if stale := self._stale_heartbeat():
            return False, f"not alive: {stale}"
        return True, "alive: scheduler heartbeat is fresh"

    def health(self) -> tuple[bool, str]:
        """/healthz. A refused reload is said in the body, not the code: the daemon works
        on with its running settings, and a restart would only refuse the file again."""
        refused = self.reload_refused
        said = f"; reload refused since {clock(refused[0])}: {refused[1]}" if refused else ""
        if stale := self._stale_heartbeat():
            return False, f"unhealthy: {stale}{said}"
        degraded = self.context.problems()
        if degraded:
            reasons = "; ".join(f"{agent}: {why}" for agent, why in sorted(degraded.items()))
            return False, f"degraded: {reasons}{said}"
        return True, f"ok: scheduler heartbeat is fresh{said}"

    def readiness(self) -> tuple[bool, str]:
        if self.stopping.is_set():
            return False, "not ready: shutting down"
        if not self._ready:
            return False, "not ready: starting"
        return True, f"ready: agents {', '.join(sorted(self.plugins)) or 'none'}"

    # -- lifecycle --------------------------------------------------------------------
    def _show_precisions(
        self, switched: frozenset[str] = frozenset(), startup: bool = False
    ) -> None:
        """Show each idle agent's next run: its precision and the loss scale it starts with
        (genesis_fp16/jobs/run_request.py: next_loss_scale). A running agent's gauges
        follow its run, unless the agent is in ``switched``: a reload changed its
        precision, so its run is stopping and is rerun at once (genesis_fp16/jobs/
        agent_job.py), and the precision gauge shows the rerun's from the reload on (the
        stopping run's last reports leave it alone).

        ``startup``: an agent whose ``auto`` is not decided yet shows every precision 0 and
        a NaN scale, so that both series exist from the first scrape; a reload leaves such
        an agent's gauges as its last run set them.
        """
        with self.context.running_changed:
            running = set(self.context.running)
        for agent in self.plugins:
            # What the next run will request: the guard's remembered demotion included.
            device = resolve_device(self.settings.agent(agent).device)
            try:
                request, reason = precision_request(self.settings, agent)
            except OSError as exc:  # the run will fail and count it; the daemon stays up
                log.error("cannot read the agent's precision state", agent=agent, error=str(exc))
                precision = None  # undecided: at start-up exported as such, else left alone
            else:
                log.info(
                    "agent precision",
                    agent=agent,
                    requested=request.requested,
                    reason=reason,
                    floor=request.floor,
                )
                precision = expected_precision(request, device)
            if agent in running:
                if agent in switched and precision is not None:
                    self.metrics.set_precision(agent, precision)
                continue
            if precision is None and not startup:
                continue
            self.metrics.set_precision(agent, precision)
            folder = AgentFolder(self.settings.state_dir, agent)
            self.metrics.loss_scale.labels(agent=agent).set(next_loss_scale(folder, precision))

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; returns the exit code."""
        self._install_signal_handlers()
        settings = self.settings
        check_devices(settings)  # a device this torch cannot run: serve exits 2, in one line
        self._own_state_folder()
        raise_open_file_limit()
        if self.sources is not None:
            _warn_shadowed(self.sources)
        self.agents.load(settings)
        # A bad agent option stops start-up (serve exits 2), before anything is served.
        check_configured_options(settings, self._declared(), known_agent_names())
        tls = None
        if settings.tls_cert_file is not None and settings.tls_key_file is not None:
            password = settings.tls_key_password
            tls = tls_context(
                settings.tls_cert_file,
                settings.tls_key_file,
                password.get_secret_value() if password else None,
            )
        try:
            server = StatusServer(
                (settings.metrics_addr, settings.metrics_port),
                self.registry,
                self.health,
                self.readiness,
                tls,
                live=self.liveness,
                documents=status_documents(self),
            )
        except OSError as exc:  # taken, no such address, not ours to bind
            why = f" (GENESIS_FP16_METRICS_ADDR, GENESIS_FP16_METRICS_PORT): {exc.strerror or exc}"
            if exc.errno == errno.EADDRINUSE:
                why = (
                    ": address already in use (another genesis-fp16 or service holds it); set "
                    "GENESIS_FP16_METRICS_PORT (or GENESIS_FP16_METRICS_ADDR) to a free one"
                )
            where = f"{settings.metrics_addr}:{settings.metrics_port}"
            raise StartupError(f"cannot serve metrics on {where}{why}") from exc
        # Before the first scrape can come: precision and loss scale exist from start-up,
        # whenever the first run is (RUN_AT_START=false: up to a schedule interval away).
        self._show_precisions(startup=True)
        server.start()
        # Webhooks of the agents' events, on a thread of their own: never on a run's path.
        self.delivery = start_delivery(lambda: self.settings, self.metrics.events)
        self.scheduler = AgentScheduler(settings, self._job, self.beat, self._skipped, self._owner)
        self.scheduler.start(settings, self.plugins)
        self.agents.start(self.scheduler, self.context.gauge_lock, self._agents_changed)
        self._ready = True
        self.notifier.notify("READY=1")
        log.info(
            "daemon ready",
            version=__version__,
            address=settings.metrics_addr,
            port=server.port,
            tls=tls is not None,
            state_dir=str(settings.state_dir),
            agents=sorted(self.plugins),
        )
        try:
            self._wait()
        finally:
            code = self._shutdown()
            server.stop()
            os.close(self._owner)
        return code

    def _own_state_folder(self) -> None:
        """Make the state folder and take its lock for the daemon's life (genesis_fp16/
        service/state_lock.py): a second daemon, or a ``train`` there, is refused in one
        line naming this pid, and a folder that cannot be made or locked in one line
        naming the setting."""
        state_dir = self.settings.state_dir
        try:
            # Held until run() returns; the kernel drops it if we die first (kill -9 too).
            self._owner = acquire_state_folder(state_dir, "serve")
        except StateFolderBusy as exc:
            raise StartupError(
                f"{exc}: stop that one first, or give this daemon another state folder "
                "(GENESIS_FP16_STATE_DIR)"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):  # a filesystem without flock
                log.warning(
                    "the state folder cannot be locked: a second daemon or a train there "
                    "would not be refused",
                    state_dir=str(state_dir),
                    error=exc.strerror or str(exc),
                )
                self._owner = os.open(os.devnull, os.O_RDONLY)  # closed by run() as the lock
                return
            raise StartupError(  # not a folder, not ours to write, a read-only disk
                f"GENESIS_FP16_STATE_DIR={state_dir}: cannot be the state folder "
                f"({exc.strerror or exc})"
            ) from exc

    def _skipped(self, agent: str) -> None:
        self.metrics.jobs_skipped.labels(agent=agent, reason="still_running").inc()
        log.warning("job skipped: the agent's previous run is still training", agent=agent)

    def _job(self, agent: str, loaded: LoadedPlugin) -> None:
        try:
            run_agent_job(self.context, agent, loaded.plugin, loaded.capabilities)
        finally:
            self._run_now_asked.pop(agent, None)

    def _answer_run_requests(self) -> None:
        """Take the run-now requests in the state folder and answer each
        (genesis_fp16/service/run_now.py); nothing here raises into the main loop."""
        state_dir = self.settings.state_dir
        try:
            taken, strays = take_requests(state_dir)
        except NotAFolder as exc:  # a link: refused, nothing where it points is touched
            if not self._run_now_refused:
                log.error("run-now requests refused", error=str(exc))
            self._run_now_refused = True
            return
        self._run_now_refused = False
        if strays:
            log.debug("run-now folder: entries that are no request skipped", count=len(strays))
        for name in strays:
            if name in self._strays_said:  # a folder at a request's name stays: said once
                continue
            if len(self._strays_said) < MAX_STRAYS_SAID:
                self._strays_said.add(name)
            log.warning("run-now request refused: its name is not AGENT@ID.json", file=name)
        for agent, idents in taken.items():
            outcome, detail = self._run_now(agent)
            say = log.info if outcome == "started" else log.warning
            say(f"run now {outcome}", agent=agent, detail=detail, requests=len(idents))
            answer = Answer(outcome, detail, time.time())
            for ident in idents:
                try:
                    write_answer(state_dir, ident, answer)
                except OSError as exc:  # a full disk, a linked answers/: no answer
                    log.error("cannot answer a run-now request", agent=agent, error=str(exc))

    def _run_now(self, agent: str) -> tuple[Outcome, str]:
        """Bring ``agent``'s job forward to now, or say in one line why not."""
        if self.stopping.is_set():
            return "refused", "the daemon is shutting down"
        scheduled = self.scheduler.scheduled_agents()
        if agent not in scheduled:
            return "refused", not_scheduled(agent, scheduled, known_agent_names())
        with self.context.running_changed:
            running = agent in self.context.running
        if running:
            return "refused", f"{agent} is running now; see `genesis-fp16 status`"
        asked = self._run_now_asked.get(agent)
        # A job brought forward starts within a tick, or waits for a device slot; one not
        # started within the misfire grace is asked for again.
        if asked is not None and time.time() - asked < self.settings.misfire_grace_seconds:
            return "started", f"{agent}: joins the run asked for {time.time() - asked:.1f} s ago"
        if not self.scheduler.run_now(agent):
            return "refused", not_scheduled(agent, [], known_agent_names())
        self._run_now_asked[agent] = time.time()
        return "started", f"{agent}: the daemon (pid {os.getpid()}) starts its run now"

    def _wait(self) -> None:
        """The main loop: it waits, pings and dispatches, and calls no plugin code (the
        rescan runs on its own thread), so nothing a plugin does holds a ping or a signal."""
        env_mtime = self._env_mtime()
        # A ping every quarter of the watchdog's period: a late wake-up on a loaded host
        # still leaves a ping within every half period.
        period = self.notifier.watchdog_seconds
        interval = period / 4 if period else math.inf
        last_ping = last_scan = -math.inf
        while not self.stopping.is_set():
            timeout = 0.5
            if period:  # until the next ping is due (at least 50 ms: a stale heartbeat)
                timeout = min(timeout, max(0.05, last_ping + interval - time.monotonic()))
            self._wake.wait(timeout=timeout)
            self._wake.clear()
            if period and time.monotonic() - last_ping >= interval and not self._stale_heartbeat():
                # A stuck scheduler stops the pings, and systemd restarts the service.
                self.notifier.notify("WATCHDOG=1")
                last_ping = time.monotonic()
            mtime = self._env_mtime()
            if self.settings.watch_env_file and mtime != env_mtime:
                log.info("env file changed", path=str(self.env_file))
                self._reload_requested = True
            env_mtime = mtime
            if self._reload_requested and not self.stopping.is_set():
                self._reload_requested = False
                before = self.settings
                self.reload()
                # After a reload that changed a setting, the next run forks from a worker
                # started after it: one that sees the settings now in force. One that
                # changed none (logrotate's SIGHUP, a config tool writing the same file)
                # keeps a live worker and its resident runs' reads and device warm: what is
                # installed is checked at every run anyway. Either gives a worker that
                # could not start another try.
                WORKER.renew(
                    "the daemon reloaded (SIGHUP or an edited .env file)",
                    live=self.settings != before,
                )
                self.agents.request(self.settings, retry_failed=True)  # the new settings' options
            elif time.monotonic() - last_scan >= self.settings.heartbeat_seconds:
                last_scan = time.monotonic()
                self.agents.request(self.settings)
                prune_answers(self.settings.state_dir, time.time())
            self._answer_run_requests()  # one listing of a folder that is mostly empty

    def _agents_changed(self) -> None:
        """A rescan changed the plugin set: the next run forks from a new run worker, which
        imports what is installed now."""
        WORKER.renew("the plugin set changed")
        self._show_precisions()

    def _declared(self) -> dict[str, Capabilities]:
        """Each loaded agent's declared options as the scan thread read them: an option
        check on the main thread never calls into a plugin."""
        return {name: loaded.capabilities for name, loaded in self.plugins.items()}

    def plugin_notes(self) -> dict[str, str]:
        """What the status page says of an agent the daemon has not loaded: its import is
        stuck, and for how long."""
        now = time.monotonic()
        return {
            name: f"its plugin's import has not returned after {now - pending.started:.0f} s "
            "(see `agents`)"
            for name, pending in dict(self.agents.stuck).items()
        }

    def _env_mtime(self) -> float | None:
        try:
            return self.env_file.stat().st_mtime
        except OSError:
            return None

    def _env_file_to_read(self) -> Path | None:
        """The env file a reload reads; None when there is none and the running settings
        came from none. A file that vanished under settings read from it is refused like
        a typo (the rollback switch must not drop with it): an empty file means the
        defaults. A link to /dev/zero, a folder, an unreadable or huge file is refused
        by the reading itself."""
        if os.path.lexists(self.env_file):
            return self.env_file
        if self._env_file_in_force:
            raise SettingsError(
                [
                    f"env file {self.env_file} was deleted; the running settings stay "
                    "(write an empty file for the defaults)"
                ]
            )
        return None

    def reload(self) -> bool:
        """Re-read the settings; an invalid file keeps the old ones. True on success."""
        try:
            new, sources = load_settings_with_sources(self._env_file_to_read())
            check_configured_options(new, self._declared(), known_agent_names())
            check_devices(new)  # an edit naming a GPU this host lacks is refused like a typo
        except SettingsError as exc:
            self.metrics.config_reloads.labels(outcome="failure").inc()
            self.metrics.config_last_reload_successful.set(0)
            log.error("config reload failed, keeping the running configuration", error=str(exc))
            # The page, /status.json, `status` and /healthz say it until a reload succeeds;
            # "since" is the first refusal of the row, the error the latest.
            since = time.time() if self.reload_refused is None else self.reload_refused[0]
            self.reload_refused = (since, _one_line(str(exc)))
            return False
        self.reload_refused = None
        self._env_file_in_force = sources.env_file_read
        old = self.settings
        ignored = [name for name in RESTART_ONLY if getattr(old, name) != getattr(new, name)]
        if ignored:
            log.warning("changed settings take effect after a restart", settings=ignored)
            # In force until then: the state folder the daemon locked, the port it bound.
            new = new.model_copy(update={name: getattr(old, name) for name in ignored})
        # A running job's progress waits while the settings and the gauge change together
        # (JobContext.gauge_lock).
        with self.context.gauge_lock:
            self.context.settings = new
            changes = self.scheduler.sync(new, self.plugins)
            self.metrics.config_reloads.labels(outcome="success").inc()
            self.metrics.config_last_reload_successful.set(1)
            self.metrics.fp32_rollback.set(new.enable_fp16_training is False)
            log.info("config reloaded", schedule_changes=changes)
            _warn_shadowed(sources)
            self._show_precisions(
                frozenset(a for a in self.plugins if precision_switched(old, new, a))
            )
        return True

    def _shutdown(self) -> int:
        log.info("shutting down", timeout_seconds=self.settings.shutdown_timeout_seconds)
        self.notifier.notify("STOPPING=1")
        self.stopping.set()
        self.agents.stop()
        self.scheduler.pause()  # the lock file says it stops: `run` exits 2
        deadline = time.monotonic() + self.settings.shutdown_timeout_seconds
        ctx = self.context
        late = _wait_for_jobs(ctx, deadline)
        # The lock outlives every process a run started: those past the timeout are
        # killed (and any run's started from now on), then the run worker ends.
        killed = ctx.processes.kill_all()
        still_running = _wait_for_jobs(ctx, time.monotonic() + KILLED_SECONDS) if killed else late
        WORKER.close(wait=KILLED_SECONDS)
        self.scheduler.shutdown()
        self.delivery.stop(self.settings.events_timeout_seconds + 1.0)  # its post in flight
        if late:
            log.error(
                "jobs did not stop within the shutdown timeout; their processes were killed"
                if killed and not still_running
                else "jobs did not stop within the shutdown timeout; exiting without them",
                agents=late,
                killed=killed,
            )
            return 1
        log.info("stopped cleanly")
        return 0

    def _install_signal_handlers(self) -> None:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            self.stopping.set()
            self._wake.set()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self._reload_requested = True
            self._wake.set()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)


def _wait_for_jobs(ctx: JobContext, deadline: float) -> list[str]:
    """Wait until no job runs, or until ``deadline``; the agents still running."""
    with ctx.running_changed:
        while ctx.running and time.monotonic() < deadline:
            ctx.running_changed.wait(timeout=deadline - time.monotonic())
        return sorted(ctx.running)


def _one_line(text: str, limit: int = 300) -> str:
    """An error for a status line: its first line, cut at ``limit`` characters."""
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _warn_shadowed(sources: SettingsSources) -> None:
    """Say which ``.env`` values the process environment overrides, and which removed
    settings are still set: editing either does nothing."""
    for line in sources.describe_shadowed():
        log.warning("env file value shadowed by the environment", detail=line)
    for line in sources.describe_removed():
        log.warning("removed setting ignored", detail=line)
