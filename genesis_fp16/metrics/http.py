"""The daemon's HTTP endpoints: ``/metrics``, ``/livez``, ``/healthz`` and ``/readyz``,
and the status page at ``/`` (with ``/status.json``) when the daemon hands one in.

``/livez`` answers 200 while the process runs and its ``live`` check passes (the daemon's:
the scheduler's heartbeat is fresh, what the systemd watchdog checks); ``/healthz`` adds
what makes the daemon degraded (a full disk, a lost GPU, an overdue run), which a restart
does not mend; ``/readyz`` answers 200 once the configuration and plugins are loaded and
the scheduler runs. Each answers 503 with the reason otherwise. Point a liveness probe at
``/livez``: on ``/healthz``, a full volume becomes a restart loop.

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
- ``/metrics`` rendered (and the checks run) on a worker thread, and requests that arrive
  while one is under way share the next one, so 200 concurrent scrapers cost a few
  renders, not 200;
- the status page built on a thread of its own, only when asked, one build at a time
  shared by whoever asks meanwhile: a crowd on ``/`` (or a state file that is slow to
  read) never holds up ``/metrics`` or the health checks.

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
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]
Document = Callable[[], tuple[bytes, str]]  # a page built on demand: (body, content type)
T = TypeVar("T")

_TEXT = "text/plain; charset=utf-8"
# The status page runs no script and loads nothing: say so to the browser as well.
_PAGE_HEADERS = "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\r\n"
# On every answer: a browser takes each as its declared type (JSON, text), never guesses.
_NOSNIFF = "X-Content-Type-Options: nosniff\r\n"


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


class _Connection(asyncio.Protocol):
    """One client: reads a request's headers, answers it, and keeps time on the client.

    A Protocol rather than streams: no task and no ``wait_for`` per request, so one
    thread answers thousands of scrapes a second. One request at a time per connection:
    pipelined requests wait in the buffer while an answer is prepared.
    """

    def __init__(self, server: StatusServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False
        self.idle_since = time.monotonic()
        self.timer: asyncio.TimerHandle | None = None
        self.eof = False  # the client sends no more: answer what it asked, then close

    # -- asyncio callbacks ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server._admit(self)
        self._deadline(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline(None)
        self.server._connections.pop(self, None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next_request()
        elif len(self.buffer) > 4 * self.limits.max_header_bytes:
            self.abort()  # pipelining far ahead of the answers: not a scraper

    def eof_received(self) -> bool:
        """The client half-closed after its request (``shutdown(SHUT_WR)``): keep the
        connection open to answer what it asked, then close; with nothing asked, close."""
        self.eof = True
        return self.busy  # True keeps it open for writing; _reply closes after the answer

    def pause_writing(self) -> None:
        self._deadline(self.limits.write_timeout)  # a client that stops reading is dropped

    def resume_writing(self) -> None:
        self._deadline(None if self.busy else self.limits.idle_timeout)

    # -- requests ---------------------------------------------------------------------
    def _next_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n", 0, self.limits.max_header_bytes + 4)
        if end < 0:
            if len(self.buffer) > self.limits.max_header_bytes:
                self.busy = True
                self._reply(431, b"request headers too large\n", _TEXT, keep_alive=False)
            return
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        self.busy = True  # later bytes wait in the buffer (bounded above) until the answer
        self._deadline(None)
        request = _parse(head)
        if request is None:
            self._reply(400, b"bad request line\n", _TEXT, keep_alive=False)
            return
        method, path, keep_alive = request
        if method not in ("GET", "HEAD"):
            self._reply(405, b"only GET and HEAD\n", _TEXT, keep_alive=False)
            return
        answer = self.server._route(path)

        def reply(answer: Answer) -> None:
            self._reply(*answer, keep_alive=keep_alive, head_only=method == "HEAD")

        if isinstance(answer, tuple):
            reply(answer)
        else:
            answer.add_done_callback(lambda done: reply(done.result()))

    def _reply(
        self,
        status: int,
        body: bytes,
        content_type: str,
        keep_alive: bool,
        head_only: bool = False,
    ) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        header = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {content_type}\r\n{_NOSNIFF}"
            f"{_PAGE_HEADERS if content_type.startswith('text/html') else ''}"
            f"Content-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        ).encode("latin-1")
        transport.write(header if head_only else header + body)
        if not keep_alive:
            transport.close()  # after the write buffer drains
            return
        self.busy = False
        self.idle_since = time.monotonic()
        self._deadline(self.limits.idle_timeout)
        if self.buffer:
            self._next_request()
        if self.eof and not self.busy:  # answered all a half-closed client asked
            transport.close()

    def _deadline(self, seconds: float | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if seconds is not None and self.transport is not None:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(seconds, self.abort)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _parse(head: bytes) -> tuple[str, str, bool] | None:
    """(method, path, keep-alive) of a request's head, or None when it is not HTTP/1.x."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, version = parts
    headers = {
        name.strip().lower(): value.strip().lower()
        for name, _, value in (line.partition(":") for line in lines[1:] if line)
    }
    connection = headers.get("connection", "")
    # Requests with a body are not ours to read: answer, then close.
    keep_alive = (
        connection != "close"
        and (version == "HTTP/1.1" or connection == "keep-alive")
        and "content-length" not in headers
        and "transfer-encoding" not in headers
    )
    return method, target.split("?", 1)[0], keep_alive


Answer = tuple[int, bytes, str]


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
        live: Check | None = None,
        documents: Mapping[str, Document] | None = None,
    ) -> None:
        self.limits = limits if limits is not None else ServerLimits()
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET  # bind errors: here
        self._socket = socket.create_server(address, family=family, backlog=self.limits.backlog)
        self._registry = registry
        self._checks = {"/livez": live or _alive, "/healthz": health, "/readyz": ready}
        self._tls = tls
        self._connections: dict[_Connection, None] = {}  # insertion order: oldest first
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-render")
        self._documents = dict(documents or {})
        self._page_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="http-page")
        # Per path: its newest build, begun or not, and the one that has not begun
        self._builds: dict[str, asyncio.Task[Any]] = {}
        self._next_builds: dict[str, asyncio.Task[Any]] = {}
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
        self._page_pool.shutdown(wait=False, cancel_futures=True)

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
        server = await self._loop.create_server(
            lambda: _Connection(self),
            sock=self._socket,
            backlog=self.limits.backlog,  # asyncio listens again, with 100 unless told
            ssl=self._tls,
            ssl_handshake_timeout=self.limits.handshake_timeout if self._tls else None,
        )
        self._started.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for connection in list(self._connections):
                connection.abort()

    def _admit(self, connection: _Connection) -> None:
        """At the limit, close the connection idle the longest (never one mid-request)."""
        if len(self._connections) >= self.limits.max_connections:
            idle = [c for c in self._connections if not c.busy]
            if idle:
                oldest = min(idle, key=lambda c: c.idle_since)
                self._connections.pop(oldest, None)
                oldest.abort()
                self.evicted += 1
        self._connections[connection] = None

    def _route(self, path: str) -> Answer | asyncio.Future[Answer]:
        """The answer now, or a future of it (a build or a check on a worker pool)."""
        if path == "/metrics":
            render = self._build(path, self._pool, lambda: generate_latest(self._registry))
            return _answer_from(render, lambda body: (200, body, CONTENT_TYPE_LATEST))
        if path in self._checks:  # on the pool: a check that waits on a lock stalls no client
            check = self._build(path, self._pool, self._checks[path])
            return _answer_from(
                check,
                lambda result: (200 if result[0] else 503, (result[1] + "\n").encode(), _TEXT),
            )
        if path in self._documents:
            page = self._build(path, self._page_pool, self._documents[path])
            return _answer_from(page, lambda page: (200, page[0], page[1]))
        return 404, b"not found: try /, /metrics, /livez, /healthz or /readyz\n", _TEXT

    def _build(self, path: str, pool: Executor, build: Callable[[], T]) -> asyncio.Task[T]:
        """A build of ``path``'s answer on ``pool`` that begins after this request arrived.

        A build under way began before it, so the request waits for the next one, which
        every request arriving meanwhile shares: a crowd of scrapers costs two renders,
        a crowd on the page two builds, one at a time.
        """
        if path not in self._next_builds:
            assert self._loop is not None
            after = self._builds.get(path)
            self._next_builds[path] = self._loop.create_task(self._after(after, path, pool, build))
            self._builds[path] = self._next_builds[path]
        return self._next_builds[path]

    async def _after(
        self, previous: asyncio.Task[Any] | None, path: str, pool: Executor, build: Callable[[], T]
    ) -> T:
        """Build once ``previous`` has ended (its outcome is its own requests')."""
        if previous is not None:
            await asyncio.wait([previous])
        del self._next_builds[path]  # begun: a request from now on waits for the next one
        assert self._loop is not None
        return await self._loop.run_in_executor(pool, build)


def _alive() -> tuple[bool, str]:
    """``/livez`` without a ``live`` check: the event loop answered, so the process runs."""
    return True, "alive"


def _answer_from(future: asyncio.Future[T], make: Callable[[T], Answer]) -> asyncio.Future[Answer]:
    """A future of the answer: ``make(result)``, or a 500 naming a collector's or check's error."""
    answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

    def finish(done: asyncio.Future[T]) -> None:
        error = done.exception()
        if error is not None:
            answer.set_result((500, f"{type(error).__name__}: {error}\n".encode(), _TEXT))
        else:
            answer.set_result(make(done.result()))

    future.add_done_callback(finish)
    return answer
