"""The status report as lines of text (``genesis-fp16 status``) and as the page at ``/``.

Both print the same rows (:func:`status_sections`): a title per part (the daemon, then
each agent) and (label, value) pairs under it, so the terminal and the browser say the
same things in the same words. The page is plain HTML: no script, every value escaped
(an agent's name or a run's reason is text, never markup), links to the other endpoints.

An agent's past: the rows that say it in words (the last run's demotions, the quarantined
records, the last drift warning: :func:`past_rows`, in the text too), and what the page
alone draws below them (:func:`agent_past_html`): the last runs as a table and three
charts (:mod:`genesis_fp16.status.charts`). One function per part, so a later part is one
more function.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from genesis_fp16.metrics.recent_verdicts import RecentVerdicts
from genesis_fp16.status.charts import quality_chart, scale_chart, watch_chart
from genesis_fp16.status.history import CACHE_AGENTS, TABLE_RUNS, AgentHistory, last_drift
from genesis_fp16.status.report import (
    AgentStatus,
    DaemonStatus,
    ServedModel,
    StatusReport,
    watch_words,
)
from genesis_fp16.status.svg import draw_chart, legend
from genesis_fp16.status.when import clock as _clock
from genesis_fp16.status.when import span as _span
from genesis_fp16.status.when import when as _when
from genesis_fp16_infrastructure.api import RunEntry

Row = tuple[str, str]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
ENDPOINTS = ("/metrics", "/livez", "/healthz", "/readyz", "/status.json")
RUN_NOW_HINT = "genesis-fp16 run AGENT, beside this daemon's .env: trains the agent at once"


@dataclass(frozen=True)
class Section:
    """One part of the status: its title and its (label, value) rows; an agent's section
    carries the agent, whose runs and charts the page draws below the rows."""

    title: str
    rows: tuple[Row, ...]
    agent: AgentStatus | None = None


def status_sections(report: StatusReport) -> list[Section]:
    """The daemon's section, then one per agent, then a line for agents not shown."""
    now = report.generated_at
    sections = [Section("daemon", _daemon_rows(report.daemon, report.state_dir))]
    sections += [_agent_section(agent, now) for agent in report.agents]
    if not report.agents:
        sections.append(Section("agents", (("agents", "none installed, none in the folder"),)))
    if report.agents_not_shown:
        more = f"{report.agents_not_shown} more not shown"
        sections.append(Section("agents", (("not shown", more),)))
    return [_printable(section) for section in sections]


def _printable(section: Section) -> Section:
    """Control characters (a newline, a terminal's escape sequences) in a name or a reason
    shown as ``\\xNN``: a value stays on its row, and a terminal prints it as it is."""
    clean = _CONTROL.sub
    rows = tuple((label, clean(_escape_control, value)) for label, value in section.rows)
    return Section(clean(_escape_control, section.title), rows, section.agent)


def _escape_control(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def render_text(report: StatusReport) -> str:
    """The report for a terminal: each section's title, then its rows indented."""
    lines = []
    for section in status_sections(report):
        width = max(len(label) for label, _ in section.rows) + 1
        lines.append(section.title)
        lines += [f"  {label + ':':<{width}} {value}" for label, value in section.rows]
    return "\n".join(lines)


def render_html(report: StatusReport) -> bytes:
    """The report as one small HTML page (no script; every value escaped)."""
    e = html.escape
    links = " · ".join(f'<a href="{path}">{path}</a>' for path in ENDPOINTS)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>genesis-fp16 status</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>genesis-fp16 {e(report.version)}</h1>",
        f'<p class="links">{links}</p>',
        f'<p class="generated">as of {e(_clock(report.generated_at))}</p>',
    ]
    for section in status_sections(report):
        parts.append(f'<section><h2>{e(section.title)}</h2><table class="status">')
        parts += [
            f'<tr><th scope="row">{e(label)}</th><td>{e(value)}</td></tr>'
            for label, value in section.rows
        ]
        parts.append("</table>")
        if section.agent is not None:
            parts += agent_past_html(section.agent)
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts).encode("utf-8")


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:72em;color:#24292f}"
    "th{text-align:left;padding-right:1.5em;vertical-align:top;font-weight:600}"
    "td{font-family:ui-monospace,monospace;overflow-wrap:anywhere}"
    "h2{margin-top:1.5em;font-size:1.1em}h3{font-size:1em;margin:1em 0 .3em}"
    # an agent's past: its runs table and its charts
    "table.runs{border-collapse:collapse;font-size:.9em}"
    "table.runs td,table.runs th{border-bottom:1px solid #eaeef2;padding:.15em .6em}"
    ".charts{display:flex;flex-wrap:wrap;gap:.5em 1.5em}"
    "figure{margin:.3em 0;width:540px}figcaption{font-size:.85em}"
)


def _daemon_rows(daemon: DaemonStatus, state_dir: str) -> tuple[Row, ...]:
    if daemon.running:
        state = f"running, pid {daemon.pid}"
    elif daemon.owner is not None:
        state = f"not running; genesis-fp16 {daemon.owner} (pid {daemon.pid}) owns the folder"
    else:
        state = "not running: no process owns the state folder"
    rows: list[Row] = [("state", state), ("state folder", state_dir)]
    if daemon.running:
        started = "unknown" if daemon.started_at is None else _clock(daemon.started_at)
        rows.append(("up", f"{_span(daemon.uptime_seconds)} (since {started})"))
        rows.append(("health", daemon.health))
        # Issue 60 parts 4-5: a refused .env (the running settings stay) and "run now".
        if daemon.reload_refused_at is not None:
            when = _clock(daemon.reload_refused_at)
            rows.append(("reload", f"refused since {when}: {daemon.reload_error}"))
        rows.append(("run now", RUN_NOW_HINT))
    if daemon.rollback is not None:  # the daemon's, or without one the settings' own
        rows.append(("rollback", daemon.rollback))
    if daemon.ready is not None:
        rows.append(("ready", daemon.ready))
    return tuple(rows)


def _agent_section(agent: AgentStatus, now: float) -> Section:
    title = agent.name if agent.installed else f"{agent.name} (plugin not installed)"
    rows = [*_served_rows(agent.served)]
    run = agent.last_run
    if run is None:
        rows.append(("last run", "none recorded"))
    else:
        shown: str = run.precision or "no precision"
        if run.precision_requested and run.precision_requested != run.precision:
            shown += f" (asked {run.precision_requested})"
        steps = "" if run.steps is None else f", {run.steps} steps"
        rows.append(("last run", f"{run.outcome} in {shown}{steps}, by {run.source}"))
        rows.append(("ended", f"{_when(run.finished_at, now)}, took {_span(run.duration_seconds)}"))
        rows.append(("why", run.reason))
        if run.precision_reason:
            rows.append(("precision", run.precision_reason))
    if agent.last_success_at is not None:
        rows.append(("last success", _when(agent.last_success_at, now)))
    if recent := RecentVerdicts(agent.history.verdicts).line():
        rows.append(("verdicts", recent))
    nxt = agent.next_run
    rows.append(("next run", nxt.note if nxt.at is None else f"{_when(nxt.at, now)}, {nxt.note}"))
    rows += past_rows(agent.history, now)
    rows += [("problem", problem) for problem in agent.problems]
    return Section(title, tuple(rows), agent)


def _served_rows(served: ServedModel | None) -> list[Row]:
    if served is None:
        return [("served", "nothing served yet")]
    if served.error is not None:
        return [("served", served.error)]
    when = f"{served.how or 'served'} at {served.served_at}" if served.served_at else served.how
    how = ", ".join(x for x in (served.precision, when) if x)
    rows: list[Row] = [("served", f"{served.id or 'no id'} ({how})" if how else str(served.id))]
    if served.quality is not None:
        rows.append(("quality", _figures(served.quality) or "none recorded in the pointer"))
    if served.live:
        rows.append(("live", _figures(served.live)))
    rows += _watch_rows(served.watch)
    if served.pinned is not None:
        rows.append(("pinned", served.pinned))
    if served.judging is not None:
        rows.append(("judging", served.judging))
    if served.evidence is not None:
        rows.append(("evidence", served.evidence))
    return rows


def _watch_rows(watch: dict[str, Any] | None) -> list[Row]:
    """The live watch: NOT WATCHED and why, or watched; then one row per segment."""
    if watch is None:
        return []
    rows: list[Row] = [("watch", watch_words(watch))]  # the watch chart says the same
    for seg in (watch.get("segments") or [])[:16]:  # the watch's slots: 16 at most
        if isinstance(seg, dict):
            flag = ", REGRESSION" if seg.get("regression") else ""
            shown = {k: seg.get(k) for k in ("records", "difference", "lower", "upper")}
            rows.append((f"segment {seg.get('name')}", _figures(shown) + flag))
    return rows


def _figures(figures: dict[str, Any]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "-" if value is None else str(value)

    return ", ".join(f"{name} {shown(value)}" for name, value in figures.items())


def past_rows(history: AgentHistory, now: float) -> list[Row]:
    """The agent's past in words (none before its first recorded run)."""
    if not history.runs:
        return []
    # The last run's demotions, one row each (why it trained in its precision is the
    # last run's own row: the rollback switch, the guard's memory, a measured ``auto``).
    demoted = [("demoted", demotion) for demotion in history.runs[-1].demotions]
    return [*demoted, _quarantine_row(history), _drift_row(history, now)]


def _quarantine_row(history: AgentHistory) -> Row:
    total = sum(e.quarantined or 0 for e in history.runs)
    last = history.runs[-1].quarantined or 0
    said = (
        f"{last} in the last run, {total} in {_runs(history)}"
        if total
        else f"none in {_runs(history)}"
    )
    if history.quarantine_file is not None:
        said += f"; newest file {history.quarantine_file}"
    return ("quarantined", said)


def _drift_row(history: AgentHistory, now: float) -> Row:
    found = last_drift(history.runs)
    if found is None:
        return ("drift", f"none flagged in {_runs(history)}")
    at, warning = found
    return ("drift", f"{warning} ({_when(at, now)})")


def _runs(history: AgentHistory) -> str:
    count = len(history.runs)
    return "the last run" if count == 1 else f"the last {count} runs"


# The last drawing per agent, by the history object and the watch state it drew:
# gather_history hands the same object back while nothing it reads changed. Bounded
# like its cache.
_DRAWN: dict[str, tuple[AgentHistory, dict[str, Any] | None, list[str]]] = {}


def agent_past_html(agent: AgentStatus) -> list[str]:
    """The page's runs table and charts for ``agent`` (nothing before its first run or
    served model); drawn again only when its history changed."""
    history = agent.history
    if not history.runs and not history.transitions:
        return []
    watch = agent.served.watch if agent.served is not None else None
    drawn = _DRAWN.get(agent.name)
    if drawn is not None and drawn[0] is history and drawn[1] == watch:
        return drawn[2]
    parts = [*runs_table(history.runs), *charts_html(history, watch)]
    if len(_DRAWN) >= CACHE_AGENTS:
        _DRAWN.clear()
    _DRAWN[agent.name] = (history, watch, parts)
    return parts


def runs_table(runs: tuple[RunEntry, ...]) -> list[str]:
    """The last TABLE_RUNS runs, newest first: when, outcome, precision, steps, why."""
    if not runs:
        return []
    e = html.escape
    head = "".join(f"<th>{h}</th>" for h in ("ended", "outcome", "precision", "steps", "why"))
    shown = min(len(runs), TABLE_RUNS)
    parts = [f"<h3>last {shown} run{'s' if shown > 1 else ''}</h3>", '<table class="runs">']
    parts.append(f"<thead><tr>{head}</tr></thead><tbody>")
    for entry in reversed(runs[-TABLE_RUNS:]):
        run = entry.run
        precision: str = run.precision or "-"
        if run.precision_requested and run.precision_requested != run.precision:
            precision += f" (asked {run.precision_requested})"
        if entry.demotions:
            precision += ", demoted"
        steps = "-" if run.steps is None else str(run.steps)
        if entry.skipped_steps:
            steps += f" ({entry.skipped_steps} skipped)"
        ended = f"{_clock(run.finished_at)[:19]}, took {_span(run.duration_seconds)}"
        cells = (ended, run.outcome, precision, steps, run.reason)
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    parts.append("</tbody></table>")
    return parts


def charts_html(history: AgentHistory, watch: dict[str, Any] | None) -> list[str]:
    """The three charts, each with its legend of the marks it can hold; ``watch``: the
    served model's watch state, the one its watch row says."""
    charts = (quality_chart(history), scale_chart(history), watch_chart(history, watch))
    figures = [
        f"<figure>{draw_chart(c)}<figcaption>{legend(c.kinds)}</figcaption></figure>"
        for c in charts
    ]
    return ['<div class="charts">', *figures, "</div>"]
