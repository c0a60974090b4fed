"""Whether an agent is still learning: the window of its last judged runs' verdicts, as
the page, ``status`` and ``genesis_fp16_recent_verdicts`` show it (issue 93)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
from daemon_harness import DaemonFactory, daemon_env
from prometheus_client import CollectorRegistry

from genesis_fp16.metrics.recent_verdicts import RECENT_RUNS, RecentVerdicts
from genesis_fp16.metrics.served_metrics import RecentVerdictMetrics
from genesis_fp16.status.history import CHART_RUNS
from genesis_fp16_infrastructure.agent_folder.run_records import GateMark, RunEntry
from genesis_fp16_infrastructure.folder import AgentFolder


def _entry(verdict: str | None, outcome: str = "success") -> RunEntry:
    """A history entry: a run that judged a candidate (``verdict``) or judged nothing."""
    entry = RunEntry.of_error(outcome, "test", 1.0, "daemon")
    return entry if verdict is None else msgspec.structs.replace(entry, gate=GateMark(verdict))


def test_the_window_keeps_the_last_judged_runs_and_skips_runs_that_judged_nothing() -> None:
    """Up-to-date and failed runs are not verdicts; only the last RECENT_RUNS verdicts count."""
    entries = [
        _entry("promoted"),
        *(_entry("rejected") for _ in range(RECENT_RUNS - 1)),
        _entry(None, "up_to_date"),
        _entry(None, "failed"),
        _entry("inconclusive"),
    ]
    recent = RecentVerdicts.of_history(entries)
    assert recent.verdicts == ("rejected",) * (RECENT_RUNS - 1) + ("inconclusive",)
    assert recent.counts()["rejected"] == RECENT_RUNS - 1
    assert recent.counts()["promoted"] == 0  # pushed out of the window
    assert not recent.all_rejected
    assert recent.line() == "last 5 judged runs: 1 inconclusive, 4 rejected"


def test_all_rejected_needs_a_full_window() -> None:
    """Four rejections of four judged runs are not yet "stopped learning"; five are."""
    four = RecentVerdicts.of(["rejected"] * (RECENT_RUNS - 1))
    assert not four.all_rejected and "not learning" not in four.line()
    five = four.then("rejected")
    assert five.all_rejected
    assert five.line().startswith("last 5 judged runs: 5 rejected (not learning")
    assert five.then("promoted").all_rejected is False


def test_words_the_gate_does_not_give_are_left_out() -> None:
    """An edited history's unknown verdict is no verdict; no judged run: an empty line."""
    assert RecentVerdicts.of(["promoted", "banana", ""]).verdicts == ("promoted",)
    assert RecentVerdicts().line() == ""
    assert RecentVerdicts.of(["held"]).line() == "last 1 judged run: 1 held"


def test_the_gauge_exports_every_verdict_and_reads_an_unreadable_history_as_empty(
    tmp_path: Path,
) -> None:
    """From a folder: every verdict's series (0 included); a history that is a folder
    (unusable) exports zeros instead of failing the daemon."""
    registry = CollectorRegistry()
    metrics = RecentVerdictMetrics(registry)
    folder = AgentFolder(tmp_path, "se_darwin")
    for verdict in ("promoted", "rejected", "rejected"):
        folder.save_run(_entry(verdict))
    metrics.export_folder("se_darwin", folder)

    def value(verdict: str) -> float | None:
        labels = {"agent": "se_darwin", "verdict": verdict}
        return registry.get_sample_value("genesis_fp16_recent_verdicts", labels)

    assert (value("promoted"), value("rejected"), value("undecided")) == (1, 2, 0)
    folder.history_path.unlink()
    folder.history_path.mkdir()
    metrics.export_folder("se_darwin", folder)
    assert (value("promoted"), value("rejected")) == (0, 0)


def test_the_page_and_the_gauge_read_the_same_history_lines() -> None:
    """The gauge's history window is the page's, so the two never disagree."""
    from genesis_fp16.metrics.recent_verdicts import HISTORY_LINES

    assert HISTORY_LINES == CHART_RUNS


def test_a_daemon_exports_and_shows_an_agent_that_stopped_learning(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A state folder whose agent's last five judged runs were rejected: from start-up, the
    gauge says 5 rejected, and the page and `status` say the agent is not learning."""
    folder = AgentFolder(tmp_path / "state", "se_darwin")
    folder.save_run(_entry("promoted"))
    for _ in range(RECENT_RUNS):
        folder.save_run(_entry("rejected"))
        folder.save_run(_entry(None, "up_to_date"))
    daemon = daemon_factory(
        {"GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin", "GENESIS_FP16_RUN_AT_START": "false"},
        fixtures=False,
    )
    sample = "genesis_fp16_recent_verdicts"
    assert daemon.sample(sample, agent="se_darwin", verdict="rejected") == RECENT_RUNS
    assert daemon.sample(sample, agent="se_darwin", verdict="promoted") == 0
    line = "last 5 judged runs: 5 rejected (not learning: every candidate refused by the gate)"
    assert line in daemon.get("/")[1]
    shown = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "status"],
        cwd=daemon.workdir,
        env=daemon_env({"GENESIS_FP16_METRICS_PORT": str(daemon.port)}, fixtures=False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    rows = [row.split(":", 1) for row in shown.stdout.splitlines() if ":" in row]
    assert ["verdicts", line] in [[label.strip(), value.strip()] for label, value in rows]
