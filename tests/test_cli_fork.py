"""tests/cli_fork.py runs a command as a fresh ``python -m genesis_fp16`` would: the same
output, exit code, environment, working directory and import path; a run past its
timeout is killed; a command's end, however it ends, leaves the server serving."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cli_fork
import pytest
from cli_fork import run_cli

ROOT = Path(__file__).resolve().parents[1]


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env.update(PYTHONPATH=str(ROOT), GENESIS_FP16_STATE_DIR=str(tmp_path / "state"))
    env.update(extra)
    return env


def _fresh(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "genesis_fp16", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--version"], id="version"),
        pytest.param(["train", "nobody"], id="refused"),
        pytest.param(["config", "check"], id="config"),
    ],
)
def test_a_forked_command_says_and_exits_as_a_fresh_interpreter(
    tmp_path: Path, args: list[str]
) -> None:
    """Same stdout, stderr and exit code as `python -m genesis_fp16`, with the env and a
    .env in the working directory read (config check shows both)."""
    (tmp_path / ".env").write_text("GENESIS_FP16_METRICS_PORT=9555\n")
    env = _env(tmp_path, GENESIS_FP16_LOG_LEVEL="WARNING")
    forked = run_cli(args, cwd=tmp_path, env=env, timeout=300)
    fresh = _fresh(args, tmp_path, env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    if args == ["config", "check"]:
        assert "GENESIS_FP16_METRICS_PORT=9555" in forked.stdout
        assert "GENESIS_FP16_LOG_LEVEL=WARNING" in forked.stdout


def test_the_working_directory_and_pythonpath_come_first_on_the_import_path(
    tmp_path: Path,
) -> None:
    """As with `python -m`, the working directory, then PYTHONPATH, lead sys.path: a
    plugin module found only there is the command's to import (`agents` lists it)."""
    plugins = tmp_path / "plugins"
    (plugins / "cli_fork_probe-0.1.dist-info").mkdir(parents=True)
    (plugins / "cli_fork_probe-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cli_fork_probe\nVersion: 0.1\n"
    )
    (plugins / "cli_fork_probe-0.1.dist-info" / "entry_points.txt").write_text(
        "[genesis_fp16.agents]\ncli_fork_probe = cli_fork_probe_agent:plugin\n"
    )
    (plugins / "cli_fork_probe_agent.py").write_text("raise ImportError('probe imported')\n")
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join([str(ROOT), str(plugins)]))
    forked = run_cli(["agents"], cwd=tmp_path, env=env, timeout=300)
    fresh = _fresh(["agents"], tmp_path, env)
    assert "probe imported" in forked.stdout + forked.stderr
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)


def test_a_run_past_its_timeout_is_killed_and_the_next_call_runs(tmp_path: Path) -> None:
    """TimeoutExpired after the timeout, the command's process gone (the server is left
    with no child); then the server still answers."""
    env = _env(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["train", "se_darwin", "--steps", "100000"], cwd=tmp_path, env=env, timeout=0.5)
    server = cli_fork._SERVER[os.getpid()][0].pid
    deadline = time.monotonic() + 30
    while child_pids(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert child_pids(server) == []
    again = run_cli(["--version"], cwd=tmp_path, env=env, timeout=300)
    assert again.returncode == 0 and again.stdout.startswith("genesis-fp16 ")
