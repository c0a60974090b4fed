"""The daemon's own status report, served at ``/`` (HTML) and ``/status.json``.

Built only when one of them is asked for, on the HTTP server's page thread (never the
``/metrics`` one): it reads a few small state files per agent and takes no lock a run
holds for longer than a dictionary copy (the scheduler's job list, the running agents).

>>> StatusServer(..., documents=status_documents(daemon))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import msgspec

from genesis_fp16.config.plugins import known_agent_names
from genesis_fp16.config.settings import Settings, parse_schedule
from genesis_fp16.service.state_lock import LOCK_NAME, folder_owner
from genesis_fp16.status.render import render_html
from genesis_fp16.status.report import DaemonStatus, NextRun, StatusReport, gather_status


class Daemon(Protocol):
    """What the report reads of ``genesis_fp16.service.daemon.Daemon`` (which imports this
    module, hence a protocol): its settings, checks and plugins; its ``context`` and
    ``scheduler`` once it has started them."""

    @property
    def settings(self) -> Settings: ...

    @property
    def plugins(self) -> Mapping[str, Any]: ...

    def health(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...


Document = Callable[[], tuple[bytes, str]]
HTML = "text/html; charset=utf-8"
JSON = "application/json"


def status_documents(daemon: Daemon) -> Mapping[str, Document]:
    """The page at ``/`` and its JSON twin, each built from one :func:`daemon_report` (the
    JSON encoded straight from its records: a number that is not finite, which the report
    never keeps, would be ``null``)."""
    return {
        "/": lambda: (render_html(daemon_report(daemon)), HTML),
        "/status.json": lambda: (msgspec.json.encode(daemon_report(daemon)), JSON),
    }


def daemon_report(daemon: Daemon) -> StatusReport:
    """The status of the daemon's state folder, with its health and schedule."""
    report = settings_status(daemon.settings, _daemon_status(daemon), _schedule(daemon))
    return _with_shadows(report, getattr(getattr(daemon, "agents", None), "shadowed", None))


def settings_status(
    settings: Settings, daemon: DaemonStatus, schedule: Callable[[str], NextRun]
) -> StatusReport:
    """The report of the state folder of ``settings``, its allowed agents installed (the
    daemon's, and ``genesis-fp16 status``'s without one)."""
    allowed = settings.plugin_allowlist
    installed = [n for n in known_agent_names() if allowed is None or n in set(allowed)]
    state_dir = settings.state_dir.resolve()
    idle = settings.live_watch_idle_seconds
    return gather_status(state_dir, installed, daemon, schedule, idle_seconds=idle)


def _with_shadows(report: StatusReport, shadowed: Mapping[str, str] | None) -> StatusReport:
    """A plugin name two distributions register is the agent's problem on the page (the log
    says it once): which registration the daemon uses, and which it leaves out."""
    if not shadowed:
        return report
    notes = dict(shadowed)  # one copy: the scan thread replaces it whole
    agents = tuple(
        replace(a, problems=(*a.problems, f"plugin name {a.name} {notes[a.name]}"))
        if a.name in notes
        else a
        for a in report.agents
    )
    return replace(report, agents=agents)


def _daemon_status(daemon: Daemon) -> DaemonStatus:
    now = time.time()
    try:  # when this daemon took the state folder's lock: its start
        started: float | None = (daemon.settings.state_dir / LOCK_NAME).stat().st_mtime
    except OSError:
        started = None
    healthy, health = daemon.health()
    _, ready = daemon.readiness()
    uptime = None if started is None else max(0.0, now - started)
    refused: tuple[float, str] | None = getattr(daemon, "reload_refused", None)
    since, error = refused if refused is not None else (None, None)
    return DaemonStatus(
        True,
        os.getpid(),
        "serve",
        started,
        uptime,
        healthy,
        health,
        ready,
        since,
        error,
        _rollback(daemon.settings),
    )


def owner_status(state_dir: Path, now: float | None = None) -> DaemonStatus:
    """The daemon part of a report read from the state folder's lock alone (a command
    without the daemon: genesis_fp16/service/state_lock.py's :func:`folder_owner`): its
    health is the caller's to ask (the daemon serves it), so it says where to look."""
    now = time.time() if now is None else now
    owned = folder_owner(state_dir)
    if owned is None:
        return DaemonStatus(False, None, None, None, None, None, "not running")
    holder, taken = owned
    if holder.command != "serve":
        return DaemonStatus(False, holder.pid, holder.command, None, None, None, "not running")
    return DaemonStatus(True, holder.pid, "serve", taken, max(0.0, now - taken), None, "unknown")


def _rollback(settings: Settings) -> str | None:
    """The rollback switch, when the settings turn it on: before any run says so."""
    if settings.enable_fp16_training is not False:
        return None
    return "on: ENABLE_FP16_TRAINING=false, every agent's next run trains in fp32"


def _schedule(daemon: Daemon) -> Callable[[str], NextRun]:
    """Each agent's next run as the scheduler holds it (read once for the whole report)."""
    context = getattr(daemon, "context", None)
    scheduler = getattr(daemon, "scheduler", None)
    running: dict[str, tuple[str, ...]] = {}  # each running agent's held device slots
    waiting: dict[str, tuple[str, ...]] = {}
    if context is not None:
        with context.running_changed:
            running, waiting = dict(context.running), dict(context.waiting)
    due = scheduler.next_run_times() if scheduler is not None else {}
    loaded = set(dict(daemon.plugins))  # one C-level copy: a rescan may change it meanwhile
    notes: Mapping[str, str] = getattr(daemon, "plugin_notes", dict)()  # an import stuck

    def next_run(agent: str) -> NextRun:
        if agent in running:
            return NextRun(None, "running now")
        if agent in waiting:  # its job started and waits for a device slot
            return NextRun(None, _queued(waiting[agent], running))
        if agent not in loaded:
            why = notes.get(agent, "the daemon has not loaded this agent (see `agents`)")
            return NextRun(None, f"none: {why}")
        config = daemon.settings.agent(agent)
        if not config.own.enabled:
            return NextRun(None, "none: disabled in the settings")
        when = due.get(agent)
        if when is None:
            return NextRun(None, "none scheduled (starting, or shutting down)")
        return NextRun(when, _every(config.schedule))

    return next_run


def _queued(slots: tuple[str, ...], holding: Mapping[str, tuple[str, ...]]) -> str:
    """``queued behind se_darwin's run (cpu)``: the agents whose runs hold the slots a
    queued job waits for (none named: a slot just freed, or one a reload moved)."""
    behind = sorted(agent for agent, held in holding.items() if set(held) & set(slots))
    where = ", ".join(slots)
    if not behind:
        return f"queued for a device slot ({where}): starts when one is free"
    whose = ", ".join(agent + "'s" for agent in behind)
    return f"queued behind {whose} {'run' if len(behind) == 1 else 'runs'} ({where})"


def _every(schedule: str) -> str:
    """The schedule as a reader says it: ``every 3600 s`` or ``cron 0 * * * *``."""
    kind, value = parse_schedule(schedule)
    return f"every {float(value):g} s" if kind == "interval" else f"cron {value}"
