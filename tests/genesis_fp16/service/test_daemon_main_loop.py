"""A plugin whose import hangs holds nothing of a real daemon's main loop: the watchdog
pings go on, a SIGHUP is handled, SIGTERM stops it in time, and the other agent trains.

The hanging plugin is installed while the daemon runs (the tick's rescan finds it, which
on main held the main loop for the whole hang) and sleeps far longer than the test: the
test ends the daemon. systemd is stood in for by a datagram socket the test binds as
``NOTIFY_SOCKET``; each datagram is stamped by the kernel when it arrives
(``SO_TIMESTAMPNS``), so the gaps between pings are the daemon's, not this test's
reading of them on a loaded machine.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from daemon_harness import FIXTURE_PLUGINS, DaemonFactory, DaemonProcess, daemon_env

GOOD = "fixture_good"
HANG = "hang_agent"
WATCHDOG_USEC = 4_000_000
# The harness's own: a run under way (a child process, still importing torch on a loaded
# host) stops at its next step; a hung import held SIGTERM 51 s on main.
SHUTDOWN_TIMEOUT = 20.0
# The daemon's and `agents`' import deadline (GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS):
# short, so the test does not wait out the default 30 s; the healthy plugin's import
# (torch already imported by the daemon) takes well under it.
IMPORT_DEADLINE = 5.0
# Pings the test sees before it stops the daemon, so that the gaps are a real sample.
PINGS = 12
# Linux's SO_TIMESTAMPNS (asm-generic/socket.h), which the socket module does not name:
# each datagram carries the kernel's arrival time as a struct timespec.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
STUCK = "plugin import stuck: the daemon goes on without it and takes it when it returns"
HANG_SOURCE = """import time

time.sleep(600)  # far past the test: the daemon must not wait for it

from fixture_agents.good import FixtureAgent

plugin = FixtureAgent("hang_agent")
"""


class NotifySocket:
    """A stand-in for systemd's notification socket: every datagram with its kernel
    arrival time (Unix seconds), read on a thread until :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.received: list[tuple[float, str]] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        stamp_size = struct.calcsize("ll")
        while not self._closed.is_set():
            try:
                data, ancillary, _, _ = self.sock.recvmsg(256, socket.CMSG_SPACE(stamp_size))
            except TimeoutError:
                continue
            (level, kind, raw), *_ = ancillary
            assert (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)
            seconds, nanoseconds = struct.unpack("ll", raw[:stamp_size])
            self.received.append((seconds + nanoseconds / 1e9, data.decode()))

    def times(self, message: str) -> list[float]:
        return [when for when, text in list(self.received) if text == message]

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self.sock.close()
        self.path.unlink()


def _install(folder: Path, name: str, module: str, source: str) -> None:
    """Put plugin ``name`` on ``folder`` as pip would: the module, then its dist-info whole."""
    (folder / f"{module}.py").write_text(source)
    info = folder.parent / "staging" / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {module}:plugin\n")
    info.rename(folder / info.name)


def _when(record: dict[str, object]) -> float:
    """A daemon log line's own time (ISO, UTC) as Unix seconds."""
    return datetime.fromisoformat(str(record["timestamp"])).timestamp()


def _stuck_row(daemon: DaemonProcess) -> dict[str, object] | None:
    status, body = daemon.get("/status.json")
    rows = [a for a in json.loads(body)["agents"] if a["name"] == HANG] if status == 200 else []
    return rows[0] if rows and "has not returned" in rows[0]["next_run"]["note"] else None


def _runs_after(daemon: DaemonProcess, since: float) -> list[dict[str, object]]:
    """The other agent's successful runs that ended after ``since`` (the daemon's clock)."""
    return [
        r
        for r in daemon.events("training run finished")
        if r.get("agent") == GOOD and r.get("outcome") == "success" and _when(r) > since
    ]


def test_a_plugin_hanging_at_import_holds_no_ping_signal_or_other_agent(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """With a plugin asleep in its import: a watchdog ping at least every WATCHDOG_USEC/2,
    SIGHUP's reload logged within 1 s, the hang shown by `agents`, the page and the metric,
    the other agent's runs finishing, and SIGTERM's exit within the shutdown timeout."""
    hot = tmp_path / "hot"
    hot.mkdir()
    notify = NotifySocket(Path(f"/tmp/gfp16-mainloop-{os.getpid()}.sock"))
    env = {
        # The caller's path kept after ours: the daemon runs the code under test.
        "PYTHONPATH": os.pathsep.join(
            [str(hot), str(FIXTURE_PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS": str(IMPORT_DEADLINE),
        "GENESIS_FP16_PLUGIN_ALLOWLIST": f"{GOOD},{HANG}",
        "GENESIS_FP16_SCHEDULE": "2",
        "GENESIS_FP16_STEPS_PER_RUN": "2",
        "GENESIS_FP16_SAMPLE_COUNT": "64",
        "GENESIS_FP16_SHUTDOWN_TIMEOUT_SECONDS": str(SHUTDOWN_TIMEOUT),
        "NOTIFY_SOCKET": str(notify.path),
        "WATCHDOG_USEC": str(WATCHDOG_USEC),
    }
    listing: subprocess.Popen[str] | None = None
    try:
        daemon = daemon_factory(env, fixtures=False)
        _install(hot, HANG, "hang_module", HANG_SOURCE)
        # `agents` imports too, in its own process: it waits the deadline, not the hang.
        # Started now, its deadline runs out beside the daemon's rather than after it.
        listing = subprocess.Popen(
            [str(Path(sys.executable).parent / "genesis-fp16"), "agents"],
            cwd=tmp_path,
            env=daemon_env(env, fixtures=False),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The tick finds it; after the import deadline it is reported, once.
        wait = 60 + 2 * IMPORT_DEADLINE
        (stuck,) = daemon.wait_for(lambda: daemon.events(STUCK), "the stuck import", wait)
        assert stuck["plugin"] == HANG
        assert daemon.sample("genesis_fp16_plugin_load_stuck", plugin=HANG) == 1
        row = daemon.wait_for(lambda: _stuck_row(daemon), "the page to show the hang")
        assert row["installed"] is True and row["next_run"]["at"] is None, row
        out, err = listing.communicate(timeout=120)
        assert listing.returncode == 1, (out, err)
        (line,) = [x for x in out.splitlines() if x.startswith(HANG)]
        assert " stuck " in line and "has not returned" in line, line
        # SIGHUP: the reload is logged within 1 s of the signal, by the daemon's clock.
        sent = time.time()
        daemon.signal(signal.SIGHUP)
        (reloaded,) = daemon.wait_for(lambda: daemon.events("config reloaded"), "the reload")
        assert _when(reloaded) - sent < 1.0, _when(reloaded) - sent
        # The other agent trains on while the import still sleeps.
        daemon.wait_for(lambda: _runs_after(daemon, _when(stuck)), "a run after the hang", 120)
        daemon.wait_for(lambda: len(notify.times("WATCHDOG=1")) >= PINGS, "enough pings", 60)
        sent = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait_exit(timeout=60) == 0, daemon.tail()
        assert time.monotonic() - sent < SHUTDOWN_TIMEOUT
    finally:
        if listing is not None and listing.poll() is None:
            listing.kill()  # a test that failed before reading it
            listing.communicate()
        notify.close()
    (ready,) = notify.times("READY=1")
    (stopping,) = notify.times("STOPPING=1")
    pings = [ready, *[t for t in notify.times("WATCHDOG=1") if t > ready], stopping]
    gaps = [later - earlier for earlier, later in itertools.pairwise(pings)]
    assert len(gaps) > 10 and max(gaps) <= WATCHDOG_USEC / 2e6, gaps
