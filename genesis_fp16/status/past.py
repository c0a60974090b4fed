"""An agent's past on the status page: the rows that say it in words (the last run's
demotions, the quarantined records, the last drift warning), shown by
``genesis-fp16 status`` too, and what the page alone draws below them: the last runs
as a table and three charts (:mod:`genesis_fp16.status.charts`). One function per part,
so a later part is one more function::

    rows = past_rows(agent.history, now)          # (label, value) rows, text and page
    html = agent_past_html(agent)                 # the runs table and the charts
"""

from __future__ import annotations

import html
from typing import Any

from genesis_fp16.status.charts import quality_chart, scale_chart, watch_chart
from genesis_fp16.status.history import CACHE_AGENTS, TABLE_RUNS, AgentHistory, last_drift
from genesis_fp16.status.report import AgentStatus
from genesis_fp16.status.svg import Chart, draw_chart, legend
from genesis_fp16.status.when import clock, span, when
from genesis_fp16_infrastructure.api import Outcome, RunEntry

Row = tuple[str, str]
PAST_STYLE = (
    "table.runs{border-collapse:collapse;font-size:.9em}"
    "table.runs td,table.runs th{border-bottom:1px solid #eaeef2;padding:.15em .6em}"
    ".charts{display:flex;flex-wrap:wrap;gap:.5em 1.5em}"
    "figure{margin:.3em 0;width:540px}figcaption{font-size:.85em}"
)


def past_rows(history: AgentHistory, now: float) -> list[Row]:
    """The agent's past in words (none before its first recorded run)."""
    if not history.runs:
        return []
    return [*_precision_rows(history), _quarantine_row(history), _drift_row(history, now)]


def _precision_rows(history: AgentHistory) -> list[Row]:
    """The last run's demotions, one row each (why it trained in its precision is the
    last run's own row: the rollback switch, the guard's memory, a measured ``auto``)."""
    return [("demoted", demotion) for demotion in history.runs[-1].demotions]


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
    return ("drift", f"{warning} ({when(at, now)})")


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
        ended = f"{clock(run.finished_at)[:19]}, took {span(run.duration_seconds)}"
        cells = (ended, run.outcome, precision, steps, run.reason)
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    parts.append("</tbody></table>")
    return parts


# The marks a gate verdict or a rollback draws on the quality chart (charts._gate_points).
_VERDICT_MARKS = (Outcome.PROMOTED, Outcome.REJECTED, Outcome.HELD, Outcome.ROLLED_BACK)


def charts_html(history: AgentHistory, watch: dict[str, Any] | None) -> list[str]:
    """The three charts, each with its legend of the marks it can hold; ``watch``: the
    served model's watch state, the one its watch row says."""
    charts: list[tuple[Chart, tuple[str, ...]]] = [
        (quality_chart(history), (*_VERDICT_MARKS, "repair")),
        (scale_chart(history), ("demoted",)),
        (watch_chart(history, watch), ("regression", Outcome.ROLLED_BACK)),
    ]
    parts = ['<div class="charts">']
    for chart, kinds in charts:
        parts.append(
            f"<figure>{draw_chart(chart)}<figcaption>{legend(kinds)}</figcaption></figure>"
        )
    parts.append("</div>")
    return parts
