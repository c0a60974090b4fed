"""The daemon's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process runs and the scheduler's heartbeat is fresh;
``/readyz`` answers 200 once the configuration and plugins are loaded and the scheduler
runs. Both answer 503 with the reason otherwise. Served by a threaded stdlib server, over
TLS when a certificate and key are configured.

>>> server = StatusServer(("127.0.0.1", 0), registry, health=lambda: (True, "ok"),
...                       ready=lambda: (True, "ready"))  # doctest: +SKIP
>>> server.start()  # doctest: +SKIP
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            ok, reason = (self.server.health if path == "/healthz" else self.server.ready)()
            self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes every few seconds would drown the log; errors still reach stderr.
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    health: Check
    ready: Check


def tls_context(cert: Path, key: Path, password: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer) for the given PEM files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key, password=password)
    return context


class StatusServer:
    """Runs the endpoints on a background thread until :meth:`stop`."""

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        health: Check,
        ready: Check,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._server = _Server(address, _Handler)
        self._server.registry = registry
        self._server.health = health
        self._server.ready = ready
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http", kwargs={"poll_interval": 0.2}
        )
        self._thread.daemon = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
