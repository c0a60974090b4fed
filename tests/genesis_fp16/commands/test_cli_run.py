"""`genesis-fp16 run AGENT` against a state folder whose owner does not answer: refused
before any request when the owner is no daemon or does not schedule the agent; a
daemon that gives no answer in time is exit 1, and the request is withdrawn."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from genesis_fp16.cli import main
from genesis_fp16.commands import run as run_command
from genesis_fp16.service.run_now import ANSWERS_FOLDER, requests_folder
from genesis_fp16.service.state_lock import (
    acquire_state_folder,
    record_scheduled,
)

pytestmark = pytest.mark.usefixtures("clean_env")  # conftest.py: an empty working folder


@pytest.fixture
def silent_daemon() -> Iterator[Path]:
    """./state owned as `serve` does, scheduling se_darwin, by this test: nobody answers."""
    state = Path("state")
    fd = acquire_state_folder(state, "serve")
    record_scheduled(fd, ["se_darwin"])
    yield state
    os.close(fd)


def test_no_answer_in_time_is_exit_1_and_the_request_withdrawn(
    silent_daemon: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon that takes no request: exit 1 saying so, and no request left behind to
    run later, when the daemon comes round to it."""
    monkeypatch.setattr(run_command, "ANSWER_WAIT_SECONDS", 0.3)
    assert main(["run", "se_darwin"]) == 1
    out = capsys.readouterr().out
    assert f"the daemon (pid {os.getpid()}) did not take the request" in out
    assert "withdrawn, nothing runs" in out
    assert os.listdir(requests_folder(silent_daemon)) == [ANSWERS_FOLDER]


def test_an_agent_the_daemon_does_not_schedule_is_refused_before_asking(
    silent_daemon: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock file lists what the daemon schedules: rlhf_ppo (installed, not scheduled)
    and an unknown name are exit 2 in one line, and no request is written."""
    assert main(["run", "rlhf_ppo"]) == 2
    assert "rlhf_ppo is not scheduled by this daemon" in capsys.readouterr().err
    assert main(["run", "no_such_agent"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "genesis-fp16: error: unknown agent 'no_such_agent'; this daemon schedules: se_darwin\n"
    )
    assert not requests_folder(silent_daemon).exists()


def test_a_foreground_train_is_no_daemon(capsys: pytest.CaptureFixture[str]) -> None:
    """`train se_darwin` owning the folder: refused in one line that names it."""
    fd = acquire_state_folder(Path("state"), "train se_darwin")
    try:
        assert main(["run", "se_darwin", "--json"]) == 2
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert err.startswith("genesis-fp16: error: no daemon runs on the state folder state; ")
    assert "genesis-fp16 train se_darwin owns it" in err and len(err.splitlines()) == 1


def test_a_daemon_shutting_down_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A daemon that begins to stop while `run` waits for its answer makes `run` exit 2
    (the request withdrawn), not 1 after the whole wait; once the lock file says it
    stops, `run` exits 2 in one line and writes no request."""
    state = Path("state")
    fd = acquire_state_folder(state, "serve")
    record_scheduled(fd, ["se_darwin"])
    monkeypatch.setattr(run_command, "ANSWER_WAIT_SECONDS", 5.0)
    timer = threading.Timer(0.3, record_scheduled, (fd, ["se_darwin"], True))
    timer.start()
    try:
        assert main(["run", "se_darwin"]) == 2
        assert "is shutting down; withdrawn, nothing runs" in capsys.readouterr().err
        assert os.listdir(requests_folder(state)) == [ANSWERS_FOLDER]
        assert main(["run", "se_darwin"]) == 2
        said = f"the daemon (pid {os.getpid()}) is shutting down; it starts no run"
        assert capsys.readouterr().err == f"genesis-fp16: error: {said}\n"
    finally:
        timer.join()
        os.close(fd)
