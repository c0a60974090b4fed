"""A run's child gets everything from its daemon and nothing from its surroundings: no
.env, no module from the working directory, and no life after the daemon (real daemon
subprocesses, process isolation)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from daemon_harness import (
    ENTRY_POINT,
    FIXTURE_PLUGINS,
    DaemonProcess,
    child_pids,
    child_wait,
    process_alive,
    start_daemon,
)

ISOLATION_PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "isolation_plugins"
# The checkout under test (a worktree's PYTHONPATH), not whichever one the venv installed.
CALLER_PATH = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
PLUGIN_PATH = os.pathsep.join([str(FIXTURE_PLUGINS), str(ISOLATION_PLUGINS), *CALLER_PATH])
RUNS = "genesis_fp16_training_runs_total"


def _env(agent: str, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": PLUGIN_PATH,
        "GENESIS_FP16_PLUGIN_ALLOWLIST": agent,
        "GENESIS_FP16_SCHEDULE": "1",
        "GENESIS_FP16_STEPS_PER_RUN": "2",
        "GENESIS_FP16_SAMPLE_COUNT": "16",
        "FIXTURE_STEP_SECONDS": "0.01",
        **extra,
    }


def _runs(daemon: DaemonProcess, outcome: str) -> float:
    return daemon.sample(RUNS, agent="fixture_good", outcome=outcome) or 0


def _tree(pid: int) -> list[int]:
    """Every process below ``pid``: a child, or torchrun and its ranks."""
    below = child_pids(pid)
    return [p for child in below for p in (child, *_tree(child))]


@pytest.mark.slow
@pytest.mark.timeout(child_wait(180))
def test_a_rejected_env_edit_leaves_the_childrens_runs_succeeding(tmp_path: Path) -> None:
    """After ENABLE_FP16_TRAINIG=false in .env the reload fails and every run still succeeds
    with the kept configuration; the next valid edit is the one that takes effect."""
    env_file = tmp_path / ".env"
    env_file.write_text("GENESIS_FP16_STEPS_PER_RUN=2\n")
    env = _env("fixture_good")
    del env["GENESIS_FP16_STEPS_PER_RUN"]  # the environment would shadow the file's
    daemon = start_daemon(tmp_path, env)
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 1, "a first run")
        env_file.write_text("GENESIS_FP16_STEPS_PER_RUN=2\nENABLE_FP16_TRAINIG=false\n")
        daemon.signal(signal.SIGHUP)
        failed_reload = ("genesis_fp16_config_reloads_total",)
        daemon.wait_for(lambda: daemon.sample(*failed_reload, outcome="failure"), "a failed reload")
        before = _runs(daemon, "success")
        daemon.wait_for(lambda: _runs(daemon, "success") >= before + 3, "three more runs", 60)
        assert _runs(daemon, "failed") == 0, daemon.tail()

        env_file.write_text("GENESIS_FP16_STEPS_PER_RUN=3\n")
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.sample(*failed_reload, outcome="success"), "a reload")
        daemon.wait_for(
            lambda: any(e.get("steps") == 3 for e in daemon.events("training run finished")),
            "a run of the new budget",
        )
        assert _runs(daemon, "failed") == 0, daemon.tail()
    finally:
        daemon.stop()


def _lines(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


@pytest.mark.slow
@pytest.mark.timeout(child_wait(180))
@pytest.mark.parametrize(
    ("agent", "nproc"),
    [
        pytest.param("fixture_good", 1, id="busy"),
        pytest.param("fixture_hanging", 1, id="hung"),
        pytest.param("fixture_good", 2, id="torchrun", marks=pytest.mark.distributed),
    ],
)
def test_a_runs_child_dies_with_its_daemon(tmp_path: Path, agent: str, nproc: int) -> None:
    """kill -9 of the daemon mid-run: its child (or torchrun and its ranks), silent (no
    progress line to fail on), busy or hung in train(), is gone within seconds, and so is
    the run worker that forked it; a busy run stopped with a checkpoint."""
    env = _env(agent, GENESIS_FP16_STEPS_PER_RUN="100000", GENESIS_FP16_LOG_INTERVAL="100000")
    env[f"GENESIS_FP16_AGENTS__{agent.upper()}__NPROC"] = str(nproc)
    started = tmp_path / "started"  # each busy rank's pid, once it is in train()
    daemon = start_daemon(
        tmp_path, {**env, "FIXTURE_STEP_SECONDS": "0.05", "FIXTURE_STARTED_FILE": str(started)}
    )
    children: list[int] = []
    try:
        # One child: the run worker and the run it forked (genesis_fp16/commands/zygote.py),
        # or torchrun and its ranks.
        expected = 2 if nproc == 1 else 1 + nproc
        daemon.wait_for(lambda: len(_tree(daemon.process.pid)) >= expected, "a run's child")
        if agent == "fixture_good":  # every rank in train(), however long a loaded start
            daemon.wait_for(lambda: _lines(started) >= nproc, "every rank training", 120)
        time.sleep(child_wait(8))  # past its start-up: training (or hung) and writing nothing
        children += _tree(daemon.process.pid)
        assert len(children) == expected, children
        assert all(process_alive(pid) for pid in children)
        daemon.process.kill()
        daemon.process.wait()
        killed = time.monotonic()
        deadline = killed + child_wait(30)
        while any(map(process_alive, children)) and time.monotonic() < deadline:
            time.sleep(0.1)
        lived = [pid for pid in children if process_alive(pid)]
        assert not lived, f"{lived} lived {time.monotonic() - killed:.0f} s on"
        if agent == "fixture_good":
            assert list((daemon.state_dir / "agents" / agent / "checkpoints").glob("step-*.pt"))
    finally:
        for pid in children:  # an orphan that outlived the test's deadline
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
        daemon.stop()


@pytest.mark.slow
@pytest.mark.timeout(child_wait(240))
@pytest.mark.parametrize(
    "nproc",
    [pytest.param(1, id="child"), pytest.param(2, id="torchrun", marks=pytest.mark.distributed)],
)
def test_a_module_in_the_working_directory_never_runs_in_a_child(
    tmp_path: Path, nproc: int
) -> None:
    """A structlog.py in the daemon's working directory and state folder (the systemd
    unit's layout, daemon started by its entry point) never runs: the runs succeed."""
    marker = tmp_path / "imported"
    bait = f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\nraise ImportError('bait')\n"
    (tmp_path / "state").mkdir()
    for folder in (tmp_path, tmp_path / "state"):
        (folder / "structlog.py").write_text(bait)
    env = _env("fixture_good", GENESIS_FP16_AGENTS__FIXTURE_GOOD__NPROC=str(nproc))
    daemon = start_daemon(tmp_path, env, command=ENTRY_POINT)
    try:
        daemon.wait_for(lambda: _runs(daemon, "success") >= 2, "two runs", 90)
        assert not marker.exists(), marker.read_text()
        assert _runs(daemon, "failed") == 0, daemon.tail()
    finally:
        daemon.stop()
