"""Fixtures for the daemon tests: ``daemon_factory`` starts real daemons and stops them.

The helpers beside this file (``daemon_harness``, ``fake_results``, ``se_darwin_daemon``,
``probe_plugin/``) serve the tests of every subfolder: pytest's default (prepend) import
mode puts a conftest's folder on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from daemon_harness import DaemonFactory, DaemonProcess, clear_daemon_env, start_daemon
from webhook_receiver import Receiver


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Start daemons in tmp_path (``factory(env, fixtures=True)``); all stop at teardown."""
    started: list[DaemonProcess] = []

    def factory(
        env: Mapping[str, str], fixtures: bool = True, timeout: float = 60.0
    ) -> DaemonProcess:
        daemon = start_daemon(tmp_path, env, fixtures, timeout)
        started.append(daemon)
        return daemon

    yield factory
    for daemon in started:
        daemon.stop()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No daemon variables from the caller, and an empty working directory (a file's
    ``pytestmark = pytest.mark.usefixtures("clean_env")`` gives it to every test)."""
    clear_daemon_env(monkeypatch)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback (tests/genesis_fp16/webhook_receiver.py), closed after."""
    with Receiver() as found:
        yield found
