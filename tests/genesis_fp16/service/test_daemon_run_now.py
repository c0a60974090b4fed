"""`genesis-fp16 run AGENT` against the real daemon: the run starts at once, long before
its schedule; refused in one line with no daemon, for an unknown agent, while it runs;
a burst of requests, or one a dead command left, runs the agent once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from daemon_harness import DaemonFactory, DaemonProcess, daemon_env

from genesis_fp16.service.run_now import ANSWERS_FOLDER, new_request, requests_folder

STARTED = "training run started"
FINISHED = "training run finished"
# A run's child on a 2-core machine other suites load: a deadline, not an expectation.
RUN_DEADLINE = 300.0
# Both built-in agents in fp32 (no calibration), a few steps, scheduled once an hour and
# not at start: any run the tests see is one they asked for.
PRODUCT = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": "se_darwin,rlhf_ppo",
    "ENABLE_FP16_TRAINING": "false",
    "GENESIS_FP16_STEPS_PER_RUN": "4",
    "GENESIS_FP16_SAMPLE_COUNT": "200",
    "GENESIS_FP16_SCHEDULE": "3600",
    "GENESIS_FP16_RUN_AT_START": "false",
}


def run_command(
    workdir: Path, agent: str, settings: dict[str, str] = PRODUCT
) -> subprocess.CompletedProcess[str]:
    """`genesis-fp16 run AGENT` in the daemon's folder (its ./state), with its settings."""
    return subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "run", agent],
        cwd=workdir,
        env=daemon_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def runs(daemon: DaemonProcess, event: str, agent: str) -> list[dict[str, Any]]:
    return [r for r in daemon.events(event) if r.get("agent") == agent]


def _next_run_in(daemon: DaemonProcess, agent: str) -> float:
    """Seconds until the agent's scheduled run, from the daemon's /status.json."""
    report = json.loads(daemon.get("/status.json")[1])
    (entry,) = [a for a in report["agents"] if a["name"] == agent]
    return float(entry["next_run"]["at"]) - time.time()


def test_run_starts_the_agent_at_once_and_refuses_no_daemon_and_unknown(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """No daemon: exit 2 in one line. With one: `run se_darwin` starts its run (an hour
    before its schedule would) and it runs once; an unknown or hostile name is exit 2 in
    one line, and a hostile request file dropped by hand is removed, never run."""
    refused = run_command(tmp_path, "se_darwin")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "no daemon runs on the state folder" in refused.stderr
    daemon = daemon_factory(PRODUCT, fixtures=False)
    assert _next_run_in(daemon, "se_darwin") > 3000  # the schedule would not run it now
    asked = run_command(tmp_path, "se_darwin")
    assert asked.returncode == 0, asked.stderr
    assert "se_darwin: the daemon" in asked.stdout and "starts its run now" in asked.stdout
    daemon.wait_for(
        lambda: runs(daemon, FINISHED, "se_darwin"), "the asked-for run to end", RUN_DEADLINE
    )
    assert len(runs(daemon, STARTED, "se_darwin")) == 1
    assert not runs(daemon, STARTED, "rlhf_ppo")

    unknown = run_command(tmp_path, "no_such_agent")
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1
    assert "unknown agent 'no_such_agent'; this daemon schedules: rlhf_ppo, se_darwin" in (
        unknown.stderr
    )
    hostile = run_command(tmp_path, "../se_darwin")
    assert hostile.returncode == 2 and "is not valid" in hostile.stderr
    folder = requests_folder(daemon.state_dir)
    for name in ("..@1-deadbeef.json", "se_darwin\n@1-deadbeef.json", "se_darwin@x.json"):
        (folder / name).write_text("")
    daemon.wait_for(
        lambda: len(daemon.events("run-now request refused: its name is not AGENT@ID.json")) == 3,
        "the three hostile files removed",
    )
    assert sorted(p.name for p in folder.iterdir()) == [ANSWERS_FOLDER]
    assert len(daemon.events(STARTED)) == 1


def test_a_burst_left_by_dead_commands_runs_the_agent_once(daemon_factory: DaemonFactory) -> None:
    """Five requests for rlhf_ppo left in the folder (their commands gone): each is
    answered; the daemon brings the job forward once (the others were taken with it,
    join it, or find it running) and the agent runs once."""
    daemon = daemon_factory(PRODUCT, fixtures=False)
    idents = [new_request(daemon.state_dir, "rlhf_ppo") for _ in range(5)]
    answers = requests_folder(daemon.state_dir) / ANSWERS_FOLDER
    daemon.wait_for(lambda: all((answers / f"{i}.json").is_file() for i in idents), "five answers")
    looks = daemon.events("run now started") + daemon.events("run now refused")
    assert sum(r["requests"] for r in looks) == 5
    brought_forward = [r for r in looks if "starts its run now" in r["detail"]]
    assert len(brought_forward) == 1, looks
    others = [r for r in looks if r is not brought_forward[0]]
    assert all("joins" in r["detail"] or "running now" in r["detail"] for r in others), looks
    daemon.wait_for(lambda: runs(daemon, FINISHED, "rlhf_ppo"), "the one run to end", RUN_DEADLINE)
    assert len(runs(daemon, STARTED, "rlhf_ppo")) == 1


def test_run_is_refused_while_the_agent_runs(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    """An agent in the middle of its run: a second `run` is exit 2, one line saying it
    is running now, and the run goes on alone."""
    slow = {
        **PRODUCT,
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good",
        "GENESIS_FP16_STEPS_PER_RUN": "2000",  # 0.1 s a step: minutes, stopped by SIGTERM
        "FIXTURE_STEP_SECONDS": "0.1",
    }
    daemon = daemon_factory(slow)
    first = run_command(tmp_path, "fixture_good", slow)
    assert first.returncode == 0, first.stderr
    daemon.wait_for(lambda: runs(daemon, STARTED, "fixture_good"), "the run to start")
    again = run_command(tmp_path, "fixture_good", slow)
    assert again.returncode == 2, again.stdout
    (line,) = again.stderr.splitlines()
    assert line == "genesis-fp16: error: fixture_good is running now; see `genesis-fp16 status`"
    assert not runs(daemon, FINISHED, "fixture_good")  # still the first run, going on
    assert len(runs(daemon, STARTED, "fixture_good")) == 1


def test_strays_never_delay_a_request_and_a_linked_folder_is_refused(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """100 stray folders and 300 stray files that sort before every request: `run
    se_darwin` is still answered `started`. Then run_now/ as a link to another folder:
    `run` exits 2 naming the link, the daemon logs the refusal, and the folder it points
    to keeps every file (a request-shaped one too)."""
    daemon = daemon_factory(PRODUCT, fixtures=False)
    folder = requests_folder(daemon.state_dir)
    (folder / ANSWERS_FOLDER).mkdir(parents=True, exist_ok=True)
    for index in range(100):
        (folder / f"a_stray_{index:03d}").mkdir()
    for index in range(300):
        (folder / f"b_stray_{index:03d}").write_text("")
    asked = run_command(tmp_path, "se_darwin")
    assert asked.returncode == 0, asked.stderr
    assert "starts its run now" in asked.stdout

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kept = ["keep.txt", "se_darwin@1-deadbeef.json"]
    for name in kept:
        (elsewhere / name).write_text("mine")
    folder.rename(tmp_path / "old_run_now")
    folder.symlink_to(elsewhere, target_is_directory=True)
    refused = run_command(tmp_path, "se_darwin")
    assert refused.returncode == 2 and "is a link" in refused.stderr, refused.stderr
    daemon.wait_for(lambda: daemon.events("run-now requests refused"), "the refusal logged")
    time.sleep(1.5)  # three more looks at the folder
    assert sorted(p.name for p in elsewhere.iterdir()) == kept
    assert len(daemon.events("run-now requests refused")) == 1  # said once


def test_run_while_the_daemon_shuts_down_exits_2_at_once(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """SIGTERM while a run sleeps in its 30 s step (the shutdown waits for it): `run`
    exits 2 in one line saying the daemon shuts down (it waited 20 s and exited 1)."""
    settings = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good",
        "GENESIS_FP16_SCHEDULE": "3600",
        "GENESIS_FP16_RUN_AT_START": "true",
        "GENESIS_FP16_STEPS_PER_RUN": "3",
        "GENESIS_FP16_LOG_INTERVAL": "1",
        "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": "120",
        "FIXTURE_STEP_SECONDS": "30",
    }
    daemon = daemon_factory(settings)
    progress = lambda: [r for r in daemon.logs() if r.get("progress")]  # noqa: E731
    daemon.wait_for(progress, "the run's first step", RUN_DEADLINE)
    daemon.signal(signal.SIGTERM)
    daemon.wait_for(lambda: daemon.events("shutting down"), "the shutdown")
    started = time.monotonic()
    asked = run_command(tmp_path, "fixture_good", settings)
    assert daemon.process.poll() is None, "the daemon stopped before `run` asked"
    assert asked.returncode == 2, (asked.stdout, asked.stderr)
    assert "is shutting down; it starts no run" in asked.stderr
    assert time.monotonic() - started < 20  # not the whole wait for an answer
    assert len(runs(daemon, STARTED, "fixture_good")) == 1
    # The shutdown still waits out the run's 30 s step, which the teardown's stop would
    # wait for in vain (30 s, then SIGKILL): what this test proves is above, so kill now.
    # The run's child goes with the daemon (launch/handoff.py's pipe).
    daemon.process.kill()
    daemon.process.wait()
