"""sd_notify over the standard library: READY, WATCHDOG and STOPPING for systemd.

systemd passes ``NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace) to a
``Type=notify`` service and ``WATCHDOG_USEC`` when ``WatchdogSec=`` is set. Without
``NOTIFY_SOCKET`` every call is a no-op.

>>> Notifier.from_environment({}).notify("READY=1")
False
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Notifier:
    """Sends datagrams to the service manager's notification socket."""

    address: str | None
    watchdog_seconds: float | None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET") or None
        if address is not None and address.startswith("@"):
            address = "\0" + address[1:]
        watchdog = None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        # WATCHDOG_PID, when present, says which process the watchdog is meant for.
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog = int(usec) / 1_000_000
        return cls(address, watchdog)

    def notify(self, message: str) -> bool:
        """Send one notification (``READY=1``, ``WATCHDOG=1``...); True when sent."""
        if self.address is None:
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            try:
                sock.sendto(message.encode(), self.address)
            except OSError:
                return False
        return True
