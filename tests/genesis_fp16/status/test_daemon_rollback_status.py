"""The rollback switch on the real daemon, as an operator reads it: from the reload that
turns it on, before any run, `status` and the page say so; se_darwin's next run, up to
date, reports fp32 for the switch's reason, not the bf16 run's fields before it."""

from __future__ import annotations

import html
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, child_wait, daemon_env

AGENT = "se_darwin"
RUNS = "genesis_fp16_training_runs_total"
RELOADS = "genesis_fp16_config_reloads_total"
SETTINGS = {
    "GENESIS_FP16_PLUGIN_ALLOWLIST": AGENT,
    # Trained in bf16 first; the rollback switch in .env outranks the agent's override.
    "GENESIS_FP16_AGENTS__SE_DARWIN__PRECISION": "bf16",
    "GENESIS_FP16_STEPS_PER_RUN": "4",
    "GENESIS_FP16_SAMPLE_COUNT": "200",
    "GENESIS_FP16_SCHEDULE": "3600",
    "GENESIS_FP16_RUN_AT_START": "false",
    "GENESIS_FP16_WATCH_ENV_FILE": "false",  # SIGHUP alone reloads
}


def _cli(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "genesis_fp16", *args],
        cwd=daemon.workdir,
        env=daemon_env({**SETTINGS, "GENESIS_FP16_METRICS_PORT": str(daemon.port)}, False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def _report(daemon: DaemonProcess) -> dict[str, Any]:
    status, body = daemon.get("/status.json")
    assert status == 200, body
    report: dict[str, Any] = json.loads(body)
    return report


def _last_run(daemon: DaemonProcess) -> dict[str, Any]:
    (agent,) = [a for a in _report(daemon)["agents"] if a["name"] == AGENT]
    last: dict[str, Any] = agent["last_run"]
    return last


def _runs(daemon: DaemonProcess, outcome: str) -> float:
    return daemon.sample(RUNS, agent=AGENT, outcome=outcome) or 0.0


@pytest.mark.slow
@pytest.mark.timeout(child_wait(600))
def test_the_rollback_switch_shows_from_its_reload_and_the_up_to_date_run_says_fp32(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A bf16 run, then ENABLE_FP16_TRAINING=false by SIGHUP: the daemon row says the
    switch is on at once (page, /status.json, `status`); the next run is up to date and
    its record says fp32 (asked fp32) with the switch's reason (it said "up_to_date in
    bf16 (asked fp32)", with the reason of the run before)."""
    (tmp_path / ".env").write_text("")
    daemon = daemon_factory(SETTINGS, fixtures=False)
    assert _report(daemon)["daemon"]["rollback"] is None
    _cli(daemon, "run", AGENT)
    daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "the bf16 run", child_wait(300))
    assert _last_run(daemon)["precision"] == "bf16"

    (tmp_path / ".env").write_text("ENABLE_FP16_TRAINING=false\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_for(lambda: daemon.sample(RELOADS, outcome="success") == 1, "the reload")
    rollback = _report(daemon)["daemon"]["rollback"]
    assert rollback is not None and "ENABLE_FP16_TRAINING=false" in rollback
    assert f"<td>{html.escape(rollback)}</td>" in daemon.get("/")[1]
    rows = [line.split(":", 1) for line in _cli(daemon, "status").stdout.splitlines()]
    assert ["rollback", rollback] in [
        [k.strip(), v.strip()] for k, v in (r for r in rows if len(r) == 2)
    ]
    assert _runs(daemon, "up_to_date") == 0  # shown before any run

    _cli(daemon, "run", AGENT)
    daemon.wait_for(lambda: _runs(daemon, "up_to_date") >= 1, "the up-to-date run")
    last = _last_run(daemon)
    assert (last["outcome"], last["precision"], last["precision_requested"]) == (
        "up_to_date",
        "fp32",
        "fp32",
    ), last
    assert last["precision_reason"].startswith("ENABLE_FP16_TRAINING=false"), last
    assert "trained in bf16" in last["precision_reason"]
    text = _cli(daemon, "status").stdout
    assert "last run:" in text and "up_to_date in fp32," in text and "(asked" not in text
