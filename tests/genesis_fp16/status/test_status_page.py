"""The status page at `/` of a real daemon: the same facts as `genesis-fp16 status`, in
a real headless Chromium, read-only, escaped, and never in the way of `/metrics`."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, daemon_env, start_daemon
from prometheus_client import CollectorRegistry
from status_pages import (
    CHROMIUM_FLAGS,
    HOSTILE_AGENT,
    HOSTILE_MODEL,
    HOSTILE_REASON,
    STRAY_FOLDER,
    page_rows,
    seed_hostile_agent,
    steady,
    text_rows,
)

from genesis_fp16.metrics.http import StatusServer

GOOD, RAISING = "fixture_good", "fixture_raising"
MOVING = ("generated_at",)  # what differs between two reads of a still daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A daemon after one good and one failed run, beside a hostile agent's folder."""
    workdir = tmp_path_factory.mktemp("status")
    seed_hostile_agent(workdir / "state")
    daemon = start_daemon(
        workdir,
        {
            "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{GOOD},{RAISING}",
            "GENESIS_FP16_STEPS_PER_RUN": "4",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_SCHEDULE": "3600",
            "FIXTURE_STEP_SECONDS": "0.01",
            # Health is compared between two reads: a loaded CI host must not stale it.
            "GENESIS_FP16_HEARTBEAT_SECONDS": "5",
        },
    )
    runs = "genesis_fp16_training_runs_total"
    daemon.wait_for(lambda: daemon.sample(runs, agent=GOOD, outcome="success"), "a good run")
    daemon.wait_for(lambda: daemon.sample(runs, agent=RAISING, outcome="failed"), "a failed run")
    yield daemon
    daemon.stop()


def _status(daemon: DaemonProcess, *args: str) -> str:
    """`genesis-fp16 status` run as a user beside the daemon (same folder, same settings)."""
    env = daemon_env({"GENESIS_FP16_METRICS_PORT": str(daemon.port)})
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", "status", *args],
        cwd=daemon.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _still(report: dict[str, object]) -> dict[str, object]:
    """The report without its moving parts: when it was made, and the uptime."""
    still = {k: v for k, v in report.items() if k not in MOVING}
    still["daemon"] = {**report["daemon"], "uptime_seconds": None}  # type: ignore[dict-item]
    return still


def test_status_json_is_the_daemons_report(daemon: DaemonProcess) -> None:
    """`status --json` beside a daemon gives its pid, health and the runs it made: the
    report /status.json serves, fact for fact."""
    cli = json.loads(_status(daemon, "--json"))
    code, body = daemon.get("/status.json")
    assert code == 200
    assert _still(cli) == _still(json.loads(body))
    assert cli["daemon"]["running"] is True and cli["daemon"]["pid"] == daemon.process.pid
    assert cli["daemon"]["health"].startswith(("ok", "degraded")) and cli["daemon"]["ready"]
    agents = {agent["name"]: agent for agent in cli["agents"]}
    assert agents[GOOD]["last_run"]["outcome"] == "success"
    assert agents[GOOD]["last_run"]["source"] == "daemon"
    assert agents[GOOD]["next_run"]["at"] > cli["generated_at"]  # scheduled an hour out
    failed = agents[RAISING]["last_run"]
    assert failed["outcome"] == "failed"
    assert failed["reason"] == "error: RuntimeError: fixture_raising always fails its training job"
    assert agents[HOSTILE_AGENT]["installed"] is False
    assert agents[HOSTILE_AGENT]["last_run"]["reason"] == HOSTILE_REASON
    assert STRAY_FOLDER not in agents  # not an agent name: no agent's folder


def test_status_text_and_the_page_show_the_same_rows(daemon: DaemonProcess) -> None:
    """Every row `status` prints is on the page at `/`, in the same order and words."""
    text = _status(daemon)
    code, page = daemon.get("/")
    assert code == 200
    sections, _ = page_rows(page)
    assert steady(sections) == steady(text_rows(text))
    assert f"running, pid {daemon.process.pid}" in text


def test_page_in_a_headless_browser(daemon: DaemonProcess, chromium: str, tmp_path: Path) -> None:
    """Chromium renders the page's facts, with the hostile name, model id and reason as
    text: no element of theirs in the DOM, and the links to the other endpoints."""
    done = subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            f"http://127.0.0.1:{daemon.port}/",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sections, tags = page_rows(done.stdout)
    assert "script" not in tags and "img" not in tags and "b" not in tags
    titles = dict(sections)
    hostile = titles[f"{HOSTILE_AGENT} (plugin not installed)"]
    assert ("why", HOSTILE_REASON) in hostile
    assert hostile[0] == ("served", f"{HOSTILE_MODEL} (fp16, promoted at 2026-11-25T06:00:00Z)")
    assert ("state", f"running, pid {daemon.process.pid}") in titles["daemon"]
    assert any(
        label == "last run" and value.startswith("success in") and value.endswith("by daemon")
        for label, value in titles[GOOD]
    )
    for path in ("/metrics", "/livez", "/healthz", "/readyz"):
        assert f'href="{path}"' in done.stdout


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_page_is_read_only(daemon: DaemonProcess, method: str) -> None:
    """`/` and `/status.json` answer 405 to anything but GET and HEAD."""
    for path in ("/", "/status.json"):
        assert _request(daemon.port, method, path)[0] == 405


def test_head_answers_without_a_body_and_the_page_forbids_scripts(daemon: DaemonProcess) -> None:
    """HEAD / is a 200 with no body; the page's headers allow no script to run."""
    status, body, headers = _request(daemon.port, "HEAD", "/")
    assert (status, body) == (200, b"")
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"].startswith("default-src 'none'")


def test_a_slow_page_does_not_hold_up_metrics() -> None:
    """While the page is being built (a state file slow to read), /metrics and the health
    checks answer, and everyone asking for the page shares that one build."""
    entered, release = threading.Event(), threading.Event()
    builds = []

    def page() -> tuple[bytes, str]:
        builds.append(1)
        entered.set()
        release.wait(timeout=60)
        return b"<p>page</p>", "text/html; charset=utf-8"

    server = StatusServer(
        ("127.0.0.1", 0),
        CollectorRegistry(),
        health=lambda: (True, "ok"),
        ready=lambda: (True, "ready"),
        documents={"/": page},
    )
    server.start()
    try:
        answers: list[tuple[int, bytes]] = []
        askers = [
            threading.Thread(target=lambda: answers.append(_request(server.port, "GET", "/")[:2]))
            for _ in range(3)
        ]
        for asker in askers:
            asker.start()
        assert entered.wait(timeout=30)
        assert _request(server.port, "GET", "/metrics")[0] == 200
        assert _request(server.port, "GET", "/healthz")[:2] == (200, b"ok\n")
        release.set()
        for asker in askers:
            asker.join(timeout=30)
        assert answers == [(200, b"<p>page</p>")] * 3
        assert len(builds) <= 2  # one build, or one more for an asker that came after it
    finally:
        release.set()
        server.stop()


def _request(port: int, method: str, path: str) -> tuple[int, bytes, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=b"x" if method in ("POST", "PUT", "PATCH") else None)
        response = connection.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, response.read(), headers
    finally:
        connection.close()


def test_status_asks_nothing_of_a_stopped_daemon(tmp_path: Path) -> None:
    """After the daemon stops, `status` reads the same folder and says none runs."""
    env = {"GENESIS_FP16_PLUGIN_ALLOWLIST": GOOD, "GENESIS_FP16_RUN_AT_START": "false"}
    daemon = start_daemon(tmp_path, env)
    daemon.stop()
    report = json.loads(_status(daemon, "--json"))
    assert report["daemon"]["running"] is False and report["daemon"]["owner"] is None
    assert os.path.exists(tmp_path / "state" / "owner.lock")  # a lock left, but no holder
