"""sd_notify through a real AF_UNIX datagram socket, path and abstract namespace."""

from __future__ import annotations

import os
import socket

from genesis_fp16.service.systemd import Notifier


def test_notifier_sends_to_a_path_socket() -> None:
    """READY=1 arrives on the socket named by NOTIFY_SOCKET; WATCHDOG_USEC sets the period."""
    path = f"/tmp/gfp16-sd-{os.getpid()}.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(5)
        try:
            notifier = Notifier.from_environment(
                {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"}
            )
            assert notifier.watchdog_seconds == 4.0
            assert notifier.notify("READY=1")
            assert sock.recv(64) == b"READY=1"
        finally:
            os.unlink(path)


def test_notifier_abstract_socket_and_foreign_watchdog_pid() -> None:
    """'@name' is the abstract namespace; a WATCHDOG_PID of another process disables pings."""
    name = f"gfp16-sd-abstract-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        notifier = Notifier.from_environment(
            {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
        )
        assert notifier.watchdog_seconds is None
        assert notifier.notify("STOPPING=1")
        assert sock.recv(64) == b"STOPPING=1"
    assert not Notifier.from_environment({}).notify("READY=1")
