"""The daemon's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process runs and the scheduler's heartbeat is fresh;
``/readyz`` answers 200 once the configuration and plugins are loaded and the scheduler
runs. Both answer 503 with the reason otherwise.

Why asyncio and not the standard library's threaded server: that one accepts with a
backlog of 5, gives every connection a thread and never times a client out, so a few
hundred scrapers drop connections and a thousand idle sockets hold a thousand threads
and every file descriptor. Here one event loop on one thread holds every connection;
what a client may cost is bounded by :class:`ServerLimits`:

- a listen backlog of 1,024 instead of 5;
- a deadline for the TLS handshake and for each request's headers, so a silent or slow
  client is closed (the handshake runs on the loop, off the accept path);
- at most ``max_connections`` open connections: one over the limit closes the
  connection that has been idle the longest, so idle sockets can never lock a scraper out;
- ``/metrics`` rendered on a worker thread, and scrapers that arrive while a render is
  under way share the next one, so 200 concurrent scrapers cost a few renders, not 200.

>>> server = StatusServer(("127.0.0.1", 0), registry, health=lambda: (True, "ok"),
...                       ready=lambda: (True, "ready"))  # doctest: +SKIP
>>> server.start()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the server; the defaults hold a scrape under load.

    >>> ServerLimits(max_connections=64).backlog
    1024
    """

    backlog: int = 1024
    max_connections: int = 256
    header_timeout: float = 10.0  # seconds for a request's headers to arrive
    idle_timeout: float = 60.0  # seconds a kept-alive connection may wait for its next request
    write_timeout: float = 10.0  # seconds for a response to be taken by the client
    handshake_timeout: float = 10.0  # seconds for a TLS handshake
    max_header_bytes: int = 16 * 1024


def tls_context(cert: Path, key: Path, password: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer) for the given PEM files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key, password=password)
    return context


def bind(address: tuple[str, int], backlog: int) -> socket.socket:
    """A listening socket on ``address`` (IPv4 or IPv6); bind errors surface here."""
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


def raise_open_file_limit(target: int = 65536) -> int:
    """Raises this process's soft open-file limit towards ``target`` (never above the hard one).

    systemd and many shells start services at a soft limit of 1,024, which scrapers,
    checkpoints and torch's own files share; the hard limit is usually far higher.
    Returns the soft limit in force afterwards.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = target if hard == resource.RLIM_INFINITY else min(target, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # a sandbox may refuse: keep what we have
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class _Connection:
    """One client's connection: whether it is answering a request, and since when idle."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.busy = False
        self.idle_since = time.monotonic()


class StatusServer:
    """Runs the endpoints on a background thread (its own event loop) until :meth:`stop`."""

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        health: Check,
        ready: Check,
        tls: ssl.SSLContext | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.limits = limits if limits is not None else ServerLimits()
        self._socket = bind(address, self.limits.backlog)
        self._registry = registry
        self._checks = {"/healthz": health, "/readyz": ready}
        self._tls = tls
        self._connections: dict[_Connection, None] = {}  # insertion order: oldest first
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-render")
        self._render: asyncio.Future[bytes] | None = None
        self._next_render: asyncio.Task[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._failure: BaseException | None = None
        self.evicted = 0  # idle connections closed to make room, for tests and logs

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        self._started.wait(timeout=10)
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=5)
        self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the loop ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported by start(); the daemon must not serve blind
            self._failure = error
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(
            self._client,
            sock=self._socket,
            ssl=self._tls,
            ssl_handshake_timeout=self.limits.handshake_timeout if self._tls else None,
            limit=self.limits.max_header_bytes,
        )
        self._started.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for connection in list(self._connections):
                connection.writer.transport.abort()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer)
        self._make_room()
        self._connections[connection] = None
        try:
            await self._converse(connection, reader)
        except TimeoutError:
            writer.transport.abort()  # too slow: drop it without waiting on a flush
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away: nothing to answer
        finally:
            self._connections.pop(connection, None)
            if not writer.transport.is_closing():
                writer.close()

    def _make_room(self) -> None:
        """At the limit, close the connection idle the longest (never one mid-request)."""
        if len(self._connections) < self.limits.max_connections:
            return
        idle = [c for c in self._connections if not c.busy]
        if idle:
            oldest = min(idle, key=lambda c: c.idle_since)
            self._connections.pop(oldest, None)
            oldest.writer.transport.abort()
            self.evicted += 1

    async def _converse(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        timeout = self.limits.header_timeout
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            except asyncio.LimitOverrunError:
                await self._write(connection, 431, b"request headers too large\n", _TEXT, False)
                return
            except asyncio.IncompleteReadError:
                return  # closed between requests
            connection.busy = True
            keep_alive = await self._answer(connection, head)
            connection.busy = False
            connection.idle_since = time.monotonic()
            if not keep_alive:
                return
            timeout = self.limits.idle_timeout

    async def _answer(self, connection: _Connection, head: bytes) -> bool:
        """Answers one request; returns whether the connection stays open."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._write(connection, 400, b"bad request line\n", _TEXT, False)
            return False
        method, target, version = parts
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        # Requests with a body are not ours to read: answer, then close.
        keep_alive = (
            headers.get("connection", "").lower() != "close"
            and (version == "HTTP/1.1" or headers.get("connection", "").lower() == "keep-alive")
            and "content-length" not in headers
            and "transfer-encoding" not in headers
        )
        if method not in ("GET", "HEAD"):
            await self._write(connection, 405, b"only GET and HEAD\n", _TEXT, False)
            return False
        status, body, content_type = await self._route(target.split("?", 1)[0])
        await self._write(connection, status, body, content_type, keep_alive, method == "HEAD")
        return keep_alive

    async def _route(self, path: str) -> tuple[int, bytes, str]:
        loop = asyncio.get_running_loop()
        try:
            if path == "/metrics":
                return 200, await self._metrics(), CONTENT_TYPE_LATEST
            if path in self._checks:
                # On the pool: a check that waits on a lock must not stall every client.
                ok, reason = await loop.run_in_executor(self._pool, self._checks[path])
                return (200 if ok else 503), (reason + "\n").encode(), _TEXT
        except Exception as error:  # a broken collector or check: say so, keep serving
            return 500, f"{type(error).__name__}: {error}\n".encode(), _TEXT
        return 404, b"not found: try /metrics, /healthz or /readyz\n", _TEXT

    async def _metrics(self) -> bytes:
        """The registry rendered by a render that began after this request arrived.

        A render under way began before it, so the request waits for the next one, which
        every request arriving meanwhile shares.
        """
        loop = asyncio.get_running_loop()
        if self._render is None or self._render.done():
            self._render = loop.run_in_executor(self._pool, generate_latest, self._registry)
            return await asyncio.shield(self._render)
        if self._next_render is None:
            self._next_render = loop.create_task(self._render_after(self._render))
        return await asyncio.shield(self._next_render)

    async def _render_after(self, current: asyncio.Future[bytes]) -> bytes:
        with contextlib.suppress(Exception):
            await current
        loop = asyncio.get_running_loop()
        self._render = loop.run_in_executor(self._pool, generate_latest, self._registry)
        self._next_render = None
        return await self._render

    async def _write(
        self,
        connection: _Connection,
        status: int,
        body: bytes,
        content_type: str,
        keep_alive: bool,
        head_only: bool = False,
    ) -> None:
        header = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        ).encode("latin-1")
        connection.writer.write(header if head_only else header + body)
        await asyncio.wait_for(connection.writer.drain(), self.limits.write_timeout)
