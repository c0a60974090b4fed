"""`genesis-fp16 status` without a daemon: the state folder after a real `train`, a folder
a foreground run owns, unreadable state files, and a hostile agent's text."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from status_pages import (
    HOSTILE_AGENT,
    HOSTILE_MODEL,
    HOSTILE_REASON,
    page_rows,
    seed_hostile_agent,
    steady,
    text_rows,
)

from genesis_fp16.service.state_lock import acquire_state_folder
from genesis_fp16.status.render import render_html, render_text
from genesis_fp16.status.report import (
    MAX_AGENTS,
    DaemonStatus,
    NextRun,
    ServedModel,
    StatusReport,
    gather_status,
)
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedPointer
from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
from genesis_fp16_infrastructure.agent_folder.run_history import append_run
from genesis_fp16_infrastructure.agent_folder.run_records import REASON_CHARS, RunEntry
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.folder import AgentFolder

ROOT = Path(__file__).resolve().parents[3]
IDLE = DaemonStatus(False, None, None, None, None, None, "not running")


def _cli(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GENESIS_FP16_") and k != "ENABLE_FP16_TRAINING"
    }
    clean.update(
        {
            "GENESIS_FP16_STATE_DIR": str(cwd / "state"),
            "GENESIS_FP16_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
        }
    )
    clean.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _no_schedule(agent: str) -> NextRun:
    return NextRun(None, "none: no daemon")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A state folder after one real foreground `train rlhf_ppo --steps 8`, and its --json."""
    folder = tmp_path_factory.mktemp("trained")
    out = _cli(folder, "train", "rlhf_ppo", "--steps", "8", "--precision", "fp32", "--json")
    return folder, json.loads(out.splitlines()[-1])


def test_status_json_tells_the_last_train_and_its_model(
    trained: tuple[Path, dict[str, object]],
) -> None:
    """After a real `train`, `status --json` names no daemon, the run's outcome, precision,
    steps and reason, and the checkpoint it serves."""
    folder, run = trained
    report = json.loads(_cli(folder, "status", "--json"))
    assert report["daemon"]["running"] is False and report["daemon"]["owner"] is None
    agents = {agent["name"]: agent for agent in report["agents"]}
    ppo = agents["rlhf_ppo"]
    assert ppo["installed"] is True
    last = ppo["last_run"]
    assert (last["outcome"], last["precision"], last["steps"]) == ("success", "fp32", 8)
    # rlhf_ppo is judged: the run's reason is its gate's verdict on its first model
    assert last["source"] == "train" and last["reason"] == "promoted: the first model"
    assert last["precision"] == run["precision_used"]
    # rlhf_ppo is judged: its first model is served from its candidate folder
    assert ppo["served"]["id"] == Path(str(run["checkpoint"])).parent.name
    assert ppo["next_run"] == {"at": None, "note": ppo["next_run"]["note"]}
    assert "no daemon" in ppo["next_run"]["note"]
    assert agents["se_darwin"]["last_run"] is None  # never trained here


def test_status_text_says_what_the_json_says(trained: tuple[Path, dict[str, object]]) -> None:
    """The text of `status` is the JSON's report rendered: the same rows, the same words."""
    folder, _ = trained
    report = StatusReport.from_json(json.loads(_cli(folder, "status", "--json")))
    text = _cli(folder, "status")
    assert steady(text_rows(text)) == steady(text_rows(render_text(report)))
    assert "not running: no process owns the state folder" in text
    assert re.search(r"last run: +success in fp32, 8 steps, by train", text)
    assert re.search(r"precision: +--precision fp32 on the command line; fp32 requested", text)


def test_status_names_the_foreground_run_that_owns_the_folder(tmp_path: Path) -> None:
    """A `train` holding the state folder is named as its owner, not taken for a daemon,
    and its agent's next run says it trains now."""
    state = tmp_path / "state"
    state.mkdir()
    owner = acquire_state_folder(state, "train se_darwin")
    try:
        report = json.loads(_cli(tmp_path, "status", "--json"))
    finally:
        os.close(owner)
    daemon = report["daemon"]
    assert (daemon["running"], daemon["owner"], daemon["pid"]) == (
        False,
        "train se_darwin",
        os.getpid(),
    )
    agents = {agent["name"]: agent for agent in report["agents"]}
    assert agents["se_darwin"]["next_run"]["note"].startswith("training now")
    assert "no daemon" in agents["rlhf_ppo"]["next_run"]["note"]


def test_status_says_when_the_daemon_does_not_answer(tmp_path: Path) -> None:
    """A daemon that owns the folder but does not answer at the configured port is shown
    running, with its pid, and its health and next runs as unknown, naming the address."""
    state = tmp_path / "state"
    state.mkdir()
    port = "9"  # discard: nothing listens there
    owner = acquire_state_folder(state, "serve")
    try:
        report = json.loads(
            _cli(tmp_path, "status", "--json", env={"GENESIS_FP16_METRICS_PORT": port})
        )
    finally:
        os.close(owner)
    daemon = report["daemon"]
    assert (daemon["running"], daemon["pid"], daemon["healthy"]) == (True, os.getpid(), None)
    assert daemon["health"].startswith(
        f"unknown: the daemon did not answer http://127.0.0.1:{port}/"
    )
    assert all(a["next_run"]["note"] == daemon["health"] for a in report["agents"])


def test_status_without_the_daemon_says_the_rollback_switch_its_settings_turn_on(
    tmp_path: Path,
) -> None:
    """ENABLE_FP16_TRAINING=false in the settings `status` reads, no daemon answering: the
    report says the switch is on, as the daemon's page does, in the JSON and the text
    (it said nothing, while the next run would train in fp32; issue 92)."""
    (tmp_path / "state").mkdir()
    env = {"ENABLE_FP16_TRAINING": "false"}
    report = json.loads(_cli(tmp_path, "status", "--json", env=env))
    assert report["daemon"]["rollback"].startswith("on in these settings: ENABLE_FP16_TRAINING")
    assert "ENABLE_FP16_TRAINING=false" in _cli(tmp_path, "status", env=env)
    assert json.loads(_cli(tmp_path, "status", "--json"))["daemon"]["rollback"] is None


def test_unreadable_state_files_are_named_not_read(tmp_path: Path) -> None:
    """A FIFO as the last-run record and a torn served pointer are problems on the
    report, read without blocking (a FIFO would hang a plain read)."""
    root = tmp_path / "agents" / "se_darwin"
    (root / "checkpoints").mkdir(parents=True)
    os.mkfifo(root / "last_run.json")
    (root / "checkpoints" / "served.json").write_text('{"version": 1, "serv')
    report = gather_status(tmp_path, ["se_darwin"], IDLE, _no_schedule)
    (agent,) = report.agents
    assert agent.last_run is None and "not a regular file" in agent.problems[0]
    assert agent.served is not None and "unreadable" in (agent.served.error or "")
    assert ("problem", agent.problems[0]) in text_rows(render_text(report))[1][1]


def test_a_pointer_the_daemon_refuses_is_an_error_naming_why(tmp_path: Path) -> None:
    """A pointer of another version reads as the daemon's reader refuses it: an error
    naming the reason and the repair, no served model's fields, no history from it."""
    folder = AgentFolder(tmp_path, "se_darwin").checkpoint_dir
    folder.mkdir(parents=True)
    served = {"id": "m2", "checkpoint": "candidates/m2/ckpt-0000000001.pt", "how": "gate"}
    (folder / "served.json").write_text(json.dumps({"version": 2, "served": served}))
    with pytest.raises(ServedPointerError, match="not version 1"):
        read_pointer(folder)  # what the daemon's plan reads (and then sets aside)
    (agent,) = gather_status(tmp_path, ["se_darwin"], IDLE, _no_schedule).agents
    assert agent.served == ServedModel(
        error="served-model pointer unusable: not version 1 (found 2); `genesis-fp16 model "
        "promote se_darwin ID` or `genesis-fp16 model rollback se_darwin` repairs it"
    )
    assert agent.history.transitions == () and agent.history.metric is None


def test_report_round_trips_through_json(tmp_path: Path) -> None:
    """What the daemon serves as JSON reads back as the same report (the CLI renders it)."""
    seed_hostile_agent(tmp_path)
    report = gather_status(tmp_path, ["se_darwin"], IDLE, _no_schedule, now=1_800_000_000.0)
    assert StatusReport.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_page_shows_hostile_text_escaped_and_the_text_rows(tmp_path: Path) -> None:
    """The page carries the same rows as the text, and a hostile agent name, model id or
    reason is text on it: no element comes from the state folder."""
    seed_hostile_agent(tmp_path)
    report = gather_status(tmp_path, [], IDLE, _no_schedule, now=1_800_000_000.0)
    page = render_html(report).decode()
    sections, tags = page_rows(page)
    assert sections == text_rows(render_text(report))
    assert "img" not in tags and "script" not in tags and "b" not in tags
    hostile = dict(sections)[f"{HOSTILE_AGENT} (plugin not installed)"]
    assert ("why", HOSTILE_REASON) in hostile
    assert ("live", "auc 0.87, window.records 412") in hostile
    pinned = f"{HOSTILE_MODEL} pinned by `{HOSTILE_REASON}` at 2026-11-25T07:00:00Z"
    assert ("pinned", f"{pinned}; no candidate held by the pin yet") in hostile
    assert ("quality", "auc 0.9113, log_loss 0.31") in hostile
    # The history's texts too: the runs table's reason, the marks' titles, the drift row.
    assert any(label == "drift" and value.startswith(HOSTILE_REASON) for label, value in hostile)
    assert page.count(html.escape(HOSTILE_REASON)) >= 4  # why, drift, runs table, marks
    assert "rolled back to &lt;b&gt;bold&lt;/b&gt;" in page


def test_the_report_is_bounded(tmp_path: Path) -> None:
    """However many agent folders there are, the report shows 100 and counts the rest."""
    for index in range(MAX_AGENTS + 5):
        (tmp_path / "agents" / f"agent{index:03d}").mkdir(parents=True)
    report = gather_status(tmp_path, [], IDLE, _no_schedule)
    assert (len(report.agents), report.agents_not_shown) == (MAX_AGENTS, 5)
    assert ("not shown", "5 more not shown") in text_rows(render_text(report))[-1][1]


def test_a_long_reason_is_kept_to_one_bounded_line(tmp_path: Path) -> None:
    """A failure's reason (a traceback's lines, say) is kept as one line of at most
    REASON_CHARS characters, and reads back as it was written."""
    folder = AgentFolder(tmp_path, "se_darwin")
    folder.save_last_run(
        RunEntry.of_error("failed", "line one\nline two " + "x" * 1000, 1.0, "daemon").run
    )
    record = folder.last_run()
    assert record is not None and record.reason.startswith("line one line two xx")
    assert len(record.reason) == REASON_CHARS and "\n" not in record.reason


def test_an_unchanged_history_is_not_read_or_drawn_again(tmp_path: Path) -> None:
    """A second page over an unchanged folder reuses the agent's history (the same
    object, its drawing with it); a run appended since is on the next page."""
    seed_hostile_agent(tmp_path)
    first = gather_status(tmp_path, [], IDLE, _no_schedule, now=1_800_000_000.0)
    again = gather_status(tmp_path, [], IDLE, _no_schedule, now=1_800_000_000.0)
    assert again.agents[0].history is first.agents[0].history
    assert render_html(again) == render_html(first)
    folder = AgentFolder(tmp_path, HOSTILE_AGENT)
    append_run(folder.root, RunEntry.of_error("failed", "the newest run", 1.0, "daemon"))
    later = gather_status(tmp_path, [], IDLE, _no_schedule)
    assert [e.run.reason for e in later.agents[0].history.runs][-1] == "the newest run"
    assert "the newest run" in render_html(later).decode()


def test_a_real_train_leaves_its_run_in_the_history_and_on_the_chart(
    trained: tuple[Path, dict[str, object]],
) -> None:
    """After a real `train rlhf_ppo`, its history holds the run (the gate's first-model
    promotion, its loss, the precision's reason) and the page marks the promotion on the
    served model's loss chart; `status` prints the precision's cause."""
    folder, run = trained
    report = gather_status(folder / "state", ["rlhf_ppo"], IDLE, _no_schedule)
    (agent,) = [a for a in report.agents if a.name == "rlhf_ppo"]
    (entry,) = agent.history.runs
    assert entry.gate is not None and entry.gate.outcome == "promoted"
    assert entry.gate.primary == "loss" and entry.gate.candidate["loss"] is not None
    assert entry.run.precision_reason == run["precision_reason"]
    page = render_html(report).decode()
    assert page.count('class="mark promoted"') == 1 and "<h3>last 1 run</h3>" in page
    rows = dict(text_rows(_cli(folder, "status")))["rlhf_ppo"]
    assert ("precision", run["precision_reason"]) in rows


def _pointer(state: Path, served_at: str, history: list[dict[str, object]]) -> None:
    """A served-model pointer whose watch kept two segments, one of them a regression."""
    segments = [
        {"name": "se_darwin", "records": 120, "difference": 0.9, "lower": 0.3, "upper": 1.5,
         "alpha": 0.0016, "evidence": 900.0, "records_needed": 0, "regression": True},
        {"name": "qa", "records": 600, "difference": -0.01, "lower": -0.2, "upper": 0.2,
         "alpha": 0.0016, "evidence": 0.1, "records_needed": 4000, "regression": False},
    ]  # fmt: skip
    served = {"id": "m2", "checkpoint": "candidates/m2/ckpt-0000000001.pt", "how": "gate",
              "served_at": served_at,
              "live": {"records": 720, "updated_at": served_at, "segments": segments,
                       "against": "m1", "new_records": 720, "alpha": 0.05, "regression": True,
                       "difference": 0.2, "lower": 0.05, "upper": 0.35,
                       "margin": 0.01}}  # fmt: skip
    folder = AgentFolder(state, "se_darwin").checkpoint_dir
    folder.mkdir(parents=True)
    pointer = {"version": 1, "served": served, "history": history, "pinned": None}
    (folder / "served.json").write_text(json.dumps(pointer))


def test_the_page_says_per_segment_and_when_the_model_is_not_watched(tmp_path: Path) -> None:
    """The watch's segments are rows of the page (the regression flagged); a model served
    long ago with no record since reads NOT WATCHED with the reason, and so does a model
    with no predecessor; a fresh one with a predecessor reads watched."""
    fresh = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _pointer(tmp_path / "a", fresh, [{"id": "m1"}])
    text = render_text(gather_status(tmp_path / "a", ["se_darwin"], IDLE, _no_schedule))
    assert "watched, last records" in text and "NOT WATCHED" not in text
    assert "segment se_darwin" in text and "REGRESSION" in text and "segment qa" in text
    _pointer(tmp_path / "b", "2020-01-01T00:00:00Z", [{"id": "m1"}])
    report = gather_status(tmp_path / "b", ["se_darwin"], IDLE, _no_schedule, idle_seconds=60)
    assert b"NOT WATCHED: no new labelled record for" in render_html(report)
    _pointer(tmp_path / "c", fresh, [])
    text = render_text(gather_status(tmp_path / "c", ["se_darwin"], IDLE, _no_schedule))
    assert "NOT WATCHED: no predecessor to watch against" in text


def test_the_quality_line_names_each_figure_the_primary_loss_first() -> None:
    """Issue 68: the served entry's gate scores, as a verdict file keeps them (keys sorted,
    the primary named), read as figures by name: the primary loss column first, the
    others, the reported AUC, then the records and set; an entry written before loss
    columns reads its loss and AUC, with no NaN filler."""
    from genesis_fp16.status.report import _quality

    new = {"losses": {"brier": 0.05, "log_loss": 0.17}, "primary": "log_loss",
           "records": 9, "reported": {"auc": 0.91}, "set": "held_out"}  # fmt: skip
    assert list(_quality(_serving(new)) or {}) == ["log_loss", "brier", "auc", "records", "set"]
    old = {"auc": 0.91, "log_loss": None, "loss": 0.17, "records": 9, "set": "current"}
    assert _quality(_serving(old)) == {"loss": 0.17, "auc": 0.91, "records": 9, "set": "current"}
    edited = {"auc": 0.91, "records": 9}  # a hand's edit, no set: shown as it stands
    assert _quality(_serving(edited)) == edited


def _serving(scores: dict[str, object]) -> ServedPointer:
    """A pointer whose served entry keeps ``scores``, read as the page reads it."""
    served = {"id": "m", "checkpoint": "m.pt", "scores": scores}
    return ServedPointer.from_json({"version": 1, "served": served, "history": []})
