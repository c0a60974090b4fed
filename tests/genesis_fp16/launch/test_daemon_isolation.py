"""Plugins that hang, end the process or leak: counted, and the other agent keeps its
schedule and the daemon serves (real daemon subprocesses; each run in its device's
resident run process, the one isolation model). How the watch abandons a run that
outlives its kill, as the removed thread mode's test asserted of a hung thread:
tests/genesis_fp16/jobs/test_supervising.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from daemon_harness import FIXTURE_PLUGINS, DaemonProcess, child_wait, start_daemon

ISOLATION_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "isolation_plugins"
# The checkout under test (a worktree's PYTHONPATH), not whichever one the venv installed.
CALLER_PATH = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
PLUGIN_PATH = os.pathsep.join([str(FIXTURE_PLUGINS), str(ISOLATION_PLUGINS), *CALLER_PATH])
GOOD_RUNS = ("genesis_fp16_training_runs_total",)


def _daemon(tmp_path: Path, bad: str, **env: str) -> DaemonProcess:
    """fixture_good and one misbehaving plugin, sharing the one device slot."""
    return start_daemon(
        tmp_path,
        {
            "PYTHONPATH": PLUGIN_PATH,
            "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{bad},fixture_good",
            "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": "1",
            "GENESIS_FP16_SCHEDULE": "2",
            "GENESIS_FP16_STEPS_PER_RUN": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "16",
            "FIXTURE_STEP_SECONDS": "0.01",
            **env,
        },
    )


def _good_runs(daemon: DaemonProcess) -> float:
    return daemon.sample(*GOOD_RUNS, agent="fixture_good", outcome="success") or 0


@pytest.mark.slow
@pytest.mark.timeout(child_wait(240))
def test_process_isolation_kills_a_hung_run_and_the_other_agent_keeps_training(
    tmp_path: Path,
) -> None:
    """In its resident run process a hung run is SIGTERMed at its timeout and killed
    after the grace: 'hung' failures, counted every time, while fixture_good succeeds."""
    daemon = _daemon(
        tmp_path, "fixture_hanging", GENESIS_FP16_AGENTS__FIXTURE_HANGING__RUN_TIMEOUT_SECONDS="2"
    )
    try:
        s = daemon.sample
        hung = ("genesis_fp16_run_failures_total",)
        daemon.wait_for(
            lambda: (s(*hung, agent="fixture_hanging", reason="hung") or 0) >= 2,
            "two hung runs killed",
            timeout=90,
        )
        daemon.wait_for(lambda: _good_runs(daemon) >= 3, "three good runs", timeout=90)
        assert daemon.get("/healthz")[0] in (200, 503)  # 503 only while one is overdue
        assert daemon.events("the run's process still running 1s after SIGTERM: killing it")
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(240))
def test_a_plugin_that_ends_the_process_costs_only_its_own_run(tmp_path: Path) -> None:
    """fixture_exiting calls os._exit(7) in train(): an 'exit' failure each time, the
    daemon keeps serving and fixture_good keeps succeeding."""
    daemon = _daemon(tmp_path, "fixture_exiting")
    try:
        s = daemon.sample
        daemon.wait_for(
            lambda: (
                (s("genesis_fp16_run_failures_total", agent="fixture_exiting", reason="exit") or 0)
                >= 2
            ),
            "two runs ended by os._exit",
            timeout=90,
        )
        daemon.wait_for(lambda: _good_runs(daemon) >= 2, "two good runs", timeout=90)
        assert daemon.get("/healthz") == (200, "ok: scheduler heartbeat is fresh\n")
        failed = [
            e for e in daemon.events("training run failed") if e.get("agent") == "fixture_exiting"
        ]
        assert "exited with code 7" in failed[0]["error"]
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(240))
def test_a_leaking_plugin_is_killed_at_the_memory_limit(tmp_path: Path) -> None:
    """fixture_leaking grows 64 MiB every 50 ms: killed past GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES
    (1 GiB) and counted as 'memory'; the daemon itself stays small and serving."""
    daemon = _daemon(tmp_path, "fixture_leaking", GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES=str(2**30))
    try:
        s = daemon.sample
        daemon.wait_for(
            lambda: s("genesis_fp16_run_failures_total", agent="fixture_leaking", reason="memory"),
            "a run killed over its memory limit",
            timeout=90,
        )
        daemon.wait_for(lambda: _good_runs(daemon) >= 1, "a good run", timeout=90)
        assert (s("process_resident_memory_bytes") or 0) < 2**30
        assert daemon.get("/metrics")[0] == 200
    finally:
        daemon.stop()
