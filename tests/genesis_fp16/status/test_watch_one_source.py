"""The status page's watch row and its watch chart say one thing: both are drawn from the
served model's watch state, computed once per report (issue 69: the chart said "not
watching: no model replaced another yet" under a row saying "watched, last records ...")."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from status_pages import page_rows

from genesis_fp16.status.render import render_html
from genesis_fp16.status.report import DaemonStatus, NextRun, gather_status
from genesis_fp16_infrastructure.agent_folder.run_history import append_run
from genesis_fp16_infrastructure.agent_folder.run_records import LastRun, RunEntry

AGENT = "se_darwin"
IDLE = DaemonStatus(False, None, None, None, None, None, "not running")
DAY = 86400.0


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _seed(state: Path, served_at: float, live: dict[str, object] | None) -> None:
    """se_darwin serving b in place of a (served at ``served_at``, the watch's figures
    ``live``), one run in its history: the page draws its charts."""
    root = state / "agents" / AGENT
    (root / "checkpoints").mkdir(parents=True)
    served = {
        "id": "b",
        "checkpoint": "candidates/b/ckpt-0000000010.pt",
        "how": "gate",
        "served_at": _stamp(served_at),
        "scores": {"auc": 0.92, "log_loss": 0.3},
        **({"live": live} if live is not None else {}),
    }
    earlier = {"id": "a", "checkpoint": "candidates/a/ckpt-0000000010.pt", "how": "first"}
    pointer = {"version": 1, "served": served, "history": [earlier], "pinned": None}
    (root / "checkpoints" / "served.json").write_text(json.dumps(pointer))
    run = LastRun("success", "fp32", "fp32", served_at, 2.0, "promoted", "daemon", 10)
    append_run(root, RunEntry(run))


def _row_and_chart(state: Path, idle_seconds: float) -> tuple[str, str]:
    """The page's watch row and its watch chart (the agent's third chart's markup)."""
    report = gather_status(state, [], IDLE, lambda _: NextRun(None, "none"), None, idle_seconds)
    page = render_html(report).decode()
    rows = dict(dict(page_rows(page)[0])[f"{AGENT} (plugin not installed)"])
    charts = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(charts) == 3, page
    return rows["watch"], charts[2]


def _said(svg: str) -> str:
    """What the chart says of the watch: its title and its note, unescaped."""
    title = re.search(r"<title>(.*?)</title>", svg)
    notes = re.findall(r'<text[^>]*class="note"[^>]*>(.*?)</text>', svg)
    said = " | ".join([title.group(1) if title else "", *notes])
    return said.replace("&amp;", "&").replace("&quot;", '"').replace("&#x27;", "'")


@pytest.mark.parametrize(
    ("served_ago", "live", "idle_seconds", "row_starts"),
    [
        (60.0, None, DAY, "watched since"),  # they disagreed here
        (
            60.0,
            {
                "difference": 0.01,
                "lower": -0.02,
                "upper": 0.04,
                "margin": 0.03,
                "records": 120,
                "updated_at": None,
                "alpha": 0.05,
                "regression": False,
                "against": "a",
                "new_records": 120,
            },
            DAY,
            "watched, last records",
        ),
        (3 * DAY, None, DAY, "NOT WATCHED: no new labelled record"),
    ],
    ids=["served-no-records-yet", "records-scored", "idle"],
)
def test_the_watch_chart_says_what_the_watch_row_says(
    tmp_path: Path,
    served_ago: float,
    live: dict[str, object] | None,
    idle_seconds: float,
    row_starts: str,
) -> None:
    """Served b over a: with no record scored yet (the chart said "not watching: no model
    replaced another yet" under "watched, last records ..."), with figures, and idle for
    longer than the limit: the chart says the row's words, word for word."""
    served_at = time.time() - served_ago
    if live is not None:
        live = {**live, "updated_at": _stamp(served_at + 30)}
    _seed(tmp_path / "state", served_at, live)
    row, chart = _row_and_chart(tmp_path / "state", idle_seconds)
    assert row.startswith(row_starts), row
    assert row in _said(chart), (row, _said(chart))
