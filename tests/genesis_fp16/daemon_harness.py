"""Start the real `genesis-fp16 serve` as a subprocess and talk to it, for tests.

Other test files reuse it (the deployment tests scrape it with a real Prometheus)::

    daemon = start_daemon(tmp_path, {"GENESIS_FP16_PLUGIN_ALLOWLIST": "fixture_good"})
    daemon.wait_for(lambda: daemon.sample("genesis_fp16_training_runs_total",
                                          agent="fixture_good", outcome="success"), "a run")
    daemon.stop()

The daemon runs in ``workdir`` (so ``./state`` and ``./.env`` live there), on a free
port, with JSON logs written to ``workdir/daemon.log``. ``fixtures=True`` puts the test
plugins of tests/fixtures/plugins on its path.

On a CUDA host every wait is ``CUDA_START_FACTOR`` times longer (see ``child_wait``): a
run that trains on ``auto`` trains on cuda there, in a child process that pays CUDA's
start-up first.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from genesis_fp16.jobs import planning
from genesis_fp16.jobs.run_request import RequestOverrides

FIXTURE_PLUGINS = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"
T = TypeVar("T")
# Each run's child on a CUDA host creates a CUDA context, loads kernels and calibrates on
# the device before its first step: seconds where a CPU child takes tenths. On the H100
# (benchmarks/results/h100-2026-11-23.md) 90 s was too short for the isolation test's two hung
# runs and three good ones; the factor is a deadline, so a passing test is not slower.
CUDA_START_FACTOR = 4.0 if torch.cuda.is_available() else 1.0


def child_wait(seconds: float) -> float:
    """A deadline that includes child runs' start-up: ``seconds`` here, longer on CUDA."""
    return seconds * CUDA_START_FACTOR


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid``, whichever of its threads started them (Linux /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def process_alive(pid: int) -> bool:
    """Running, not a zombie: an orphan is reaped by whoever adopts it, if anyone does."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clear_daemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove the caller's daemon variables (``GENESIS_FP16_*``, ``ENABLE_FP16_TRAINING``)
    for the test: an in-process ``Settings`` then reads only what the test sets."""
    for key in list(os.environ):
        if key.startswith("GENESIS_FP16_") or key == "ENABLE_FP16_TRAINING":
            monkeypatch.delenv(key)


def force_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next in-process daemon jobs forced runs (``train --resume --steps``): on
    the served model's own data they continue it, where a job of the daemon's own is up
    to date (the data manifest answers it, whatever the budget)."""
    plan = planning.plan_request

    def forced(*args: Any, **kwargs: Any) -> Any:
        return plan(*args, overrides=RequestOverrides(forced=True), **kwargs)

    monkeypatch.setattr(planning, "plan_request", forced)


def daemon_env(extra: Mapping[str, str], fixtures: bool = True) -> dict[str, str]:
    """The environment of a test daemon: the caller's, minus any daemon settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GENESIS_FP16_")
        and key not in ("ENABLE_FP16_TRAINING", "NOTIFY_SOCKET", "WATCHDOG_USEC")
    }
    if fixtures:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(FIXTURE_PLUGINS), *filter(None, [env.get("PYTHONPATH")])]
        )
    env.update(
        {
            "GENESIS_FP16_LOG_FORMAT": "json",
            "GENESIS_FP16_SCHEDULE_JITTER_SECONDS": "0",
            "GENESIS_FP16_HEARTBEAT_SECONDS": "0.5",
            "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": "20",
        }
    )
    env.update(extra)
    return env


@dataclass
class DaemonProcess:
    """A running daemon subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path

    @property
    def state_dir(self) -> Path:
        return self.workdir / "state"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}{path}", timeout=timeout
            ) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def metrics_text(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, body
        return body

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of one series in /metrics, or None when it is absent."""
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return None

    def logs(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                records.append({"event": line, "unparsed": True})
        return records

    def events(self, event: str) -> list[dict[str, Any]]:
        return [record for record in self.logs() if record.get("event") == event]

    def wait_for(self, check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
        """Poll ``check`` until it returns something truthy; fail with the log otherwise.

        ``timeout`` is the CPU's deadline; on a CUDA host it stretches by child_wait.
        """
        timeout = child_wait(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"daemon exited ({self.process.returncode}) waiting for {what}:\n{self.tail()}"
                )
            try:
                value = check()
            except (OSError, urllib.error.URLError):
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# How the tests start the daemon; ENTRY_POINT is how the systemd unit and the container do.
MODULE_COMMAND = (sys.executable, "-m", "genesis_fp16", "serve")
ENTRY_POINT = (str(Path(sys.executable).parent / "genesis-fp16"), "serve")


def launch(
    workdir: Path,
    env: Mapping[str, str],
    fixtures: bool = True,
    command: Sequence[str] = MODULE_COMMAND,
) -> DaemonProcess:
    """Start the daemon without waiting for it; the port is GENESIS_FP16_METRICS_PORT."""
    full = daemon_env({"GENESIS_FP16_METRICS_PORT": str(free_port()), **env}, fixtures)
    log_path = workdir / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            cwd=workdir,
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return DaemonProcess(process, int(full["GENESIS_FP16_METRICS_PORT"]), workdir, log_path)


# What the ``daemon_factory`` fixture (conftest.py) hands to a test.
DaemonFactory = Callable[..., DaemonProcess]


def start_daemon(
    workdir: Path,
    env: Mapping[str, str],
    fixtures: bool = True,
    timeout: float = 60.0,
    command: Sequence[str] = MODULE_COMMAND,
) -> DaemonProcess:
    """Start the daemon and wait until /readyz answers 200."""
    daemon = launch(workdir, env, fixtures, command)
    try:
        daemon.wait_for(lambda: daemon.get("/readyz")[0] == 200, "/readyz", timeout)
    except BaseException:
        daemon.stop()
        raise
    return daemon
