"""A plugin installed or upgraded while a real daemon runs is what its next run imports:
the run worker (genesis_fp16/commands/zygote.py), started before the install, is replaced
first (genesis_fp16/launch/installed_state.py). Before, a forked child had the worker's
import state from before the install: every run of a new plugin failed with
``ModuleNotFoundError``, and an upgraded one ran its old code."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from daemon_harness import DaemonProcess, child_wait, start_daemon
from reader_venv import make_reader_venv

ROOT = Path(__file__).resolve().parents[3]
AGENT = "my_agent"
READY = re.compile(r"run worker ready \(pid (\d+)\)")


def readme_plugin_lines() -> list[str]:
    """The README's plugin block: its commands, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Write an agent plugin") :]
    (block, *_) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line.split("#")[0].strip() for line in block.strip().splitlines()]


def _shell(line: str, python: str, cwd: Path) -> str:
    """Run one README line with ``python``'s venv in place of ``.venv``; its stdout."""
    line = line.replace(".venv/bin/genesis-fp16", f"{python} -m genesis_fp16")
    line = line.replace(".venv/bin/pip", f"{python} -m pip")
    (cwd / "none.env").write_text("")
    env = {"GENESIS_FP16_ENV_FILE": str(cwd / "none.env"), "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # the code under test, as the daemon's (daemon_env)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    return done.stdout


def _daemon(tmp_path: Path, python: str, allow: str, **extra: str) -> DaemonProcess:
    workdir = tmp_path / "daemon"
    workdir.mkdir()
    env = {
        "GENESIS_FP16_PLUGIN_ALLOWLIST": allow,
        "GENESIS_FP16_SCHEDULE": "3",
        "GENESIS_FP16_STEPS_PER_RUN": "2",
        "GENESIS_FP16_SAMPLE_COUNT": "16",
        "FIXTURE_STEP_SECONDS": "0.01",
        **extra,
    }
    return start_daemon(workdir, env, command=(python, "-m", "genesis_fp16", "serve"))


def _runs(daemon: DaemonProcess, agent: str, outcome: str = "success") -> float:
    return daemon.sample("genesis_fp16_training_runs_total", agent=agent, outcome=outcome) or 0.0


def _workers(daemon: DaemonProcess) -> list[int]:
    found = (READY.match(str(r.get("event", ""))) for r in daemon.logs())
    return [int(m.group(1)) for m in found if m is not None]


@pytest.mark.slow
@pytest.mark.timeout(child_wait(900))
def test_the_readme_plugin_block_done_while_the_daemon_runs_trains_at_the_next_run(
    tmp_path: Path,
) -> None:
    """The daemon's run worker is up (fixture_good trained), then the README's plugin block
    runs in the daemon's venv (new-agent, pip install -e, check-agent): my_agent's first
    run succeeds, with no restart and no signal, forked by a worker started after the
    install; no run of it fails."""
    python = str(make_reader_venv(tmp_path / "venv"))
    daemon = _daemon(tmp_path, python, f"fixture_good,{AGENT}")
    try:
        daemon.wait_for(lambda: _runs(daemon, "fixture_good"), "a first run", timeout=240)
        (first_worker,) = _workers(daemon)
        for line in readme_plugin_lines():
            _shell(line, python, tmp_path)
        daemon.wait_for(lambda: _runs(daemon, AGENT), f"{AGENT}'s first run", timeout=300)
        assert _runs(daemon, AGENT, "failure") == 0, daemon.tail()
        assert _workers(daemon)[-1] != first_worker
        assert daemon.get("/readyz")[1].strip() == f"ready: agents fixture_good, {AGENT}"
    finally:
        daemon.stop()


MARKER = "my_agent, the upgraded one"


@pytest.mark.slow
@pytest.mark.timeout(child_wait(900))
def test_an_upgraded_plugin_runs_its_new_code_at_the_next_run(tmp_path: Path) -> None:
    """my_agent installed (pip install -e) and trained by the daemon; then another copy of
    it, which says so when imported, is installed over it from another folder, as an
    upgrade: a later run imports the new copy (its line is in the daemon's log), and no
    run fails."""
    python = str(make_reader_venv(tmp_path / "venv"))
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        _shell(f"{python} -m genesis_fp16 new-agent {AGENT}", python, folder)
    source = new / "my-agent" / AGENT / "__init__.py"
    source.write_text(f"{source.read_text()}\nimport sys\n\nprint({MARKER!r}, file=sys.stderr)\n")
    _shell(f"{python} -m pip install -e ./my-agent", python, old)
    daemon = _daemon(tmp_path, python, AGENT)
    try:
        daemon.wait_for(lambda: _runs(daemon, AGENT), f"{AGENT}'s first run", timeout=240)
        assert not _said(daemon, MARKER)
        _shell(f"{python} -m pip install -e ./my-agent", python, new)
        daemon.wait_for(lambda: _said(daemon, MARKER), "a run of the new code", timeout=300)
        assert _runs(daemon, AGENT, "failure") == 0, daemon.tail()
    finally:
        daemon.stop()


def _said(daemon: DaemonProcess, text: str) -> bool:
    """Whether a run's child wrote ``text`` on its stderr (relayed into the daemon's log)."""
    return any(text in str(r.get("line", "")) for r in daemon.logs())


@pytest.mark.slow
@pytest.mark.timeout(child_wait(900))
def test_a_plugin_edited_in_place_runs_its_new_code_in_a_fresh_resident_process(
    tmp_path: Path,
) -> None:
    """my_agent installed with pip install -e and trained;
    then its source is edited in place (no install: the worker is not replaced): the
    resident run process that imported it is stale, and the next run, in a fresh one that
    names the edited file, runs the new code; no run fails."""
    python = str(make_reader_venv(tmp_path / "venv"))
    _shell(f"{python} -m genesis_fp16 new-agent {AGENT}", python, tmp_path)
    _shell(f"{python} -m pip install -e ./my-agent", python, tmp_path)
    daemon = _daemon(tmp_path, python, AGENT)
    try:
        reused = lambda: any("reused: run 2" in str(r.get("event")) for r in daemon.logs())  # noqa: E731
        daemon.wait_for(reused, f"{AGENT}'s second run in its resident process", timeout=240)
        assert not _said(daemon, MARKER)
        source = tmp_path / "my-agent" / AGENT / "__init__.py"
        source.write_text(
            f"{source.read_text()}\nimport sys\n\nprint({MARKER!r}, file=sys.stderr)\n"
        )
        daemon.wait_for(lambda: _said(daemon, MARKER), "a run of the new code", timeout=300)
        stale = f"{source} changed since it was imported (an edited plugin)"
        assert any(stale in str(r.get("event")) for r in daemon.logs()), daemon.tail()
        assert _runs(daemon, AGENT, "failure") == 0, daemon.tail()
        assert len(_workers(daemon)) == 1  # the same worker: its resident process replaced
    finally:
        daemon.stop()
