"""A webhook receiver for the event tests: stdlib ``http.server`` on 127.0.0.1 only, in a
thread, recording every POST (its headers, body and arrival time) and answering as the
test says: a status, a delay (a slow or hung receiver), or not at all
(:meth:`Receiver.down`: the port refuses connections until :meth:`Receiver.up` binds it
again). :class:`RawReceiver` answers bytes as written (not HTTP, a redirect), at once or
a byte at a time."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from genesis_fp16.events import posting


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it was taken
    path: str = ""  # the request's path and query, as posted

    @property
    def event(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    def signed_by(self, secret: bytes) -> bool:
        return posting.verify(secret, self.body, self.headers.get(posting.SIGNATURE_HEADER))


class Receiver:
    """``url`` receives; ``received`` lists what came, in arrival order; ``answer(event)``
    picks each answer's status (default 200); ``delay`` seconds before answering."""

    def __init__(self, port: int = 0) -> None:
        self.received: list[Received] = []
        self.answer: Callable[[dict[str, Any]], int] = lambda event: 200
        self.delay = 0.0
        self.in_flight = 0
        self.release = threading.Event()  # set: a delayed answer goes at once (teardown)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._port = port
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/hook"

    def up(self) -> None:
        """Listen (again, on the same port)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), self._handler())
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        """Stop listening: connections to the port are refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def close(self) -> None:
        self.release.set()
        self.down()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.event for r in self.received]

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"receiver: {what} not within {timeout} s: {self.events()}")
            time.sleep(0.02)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                with receiver._lock:
                    receiver.in_flight += 1
                try:
                    body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    if receiver.delay:
                        receiver.release.wait(receiver.delay)
                    status = receiver.answer(json.loads(body))
                    if 200 <= status < 300:  # recorded when taken, as a receiver commits
                        with receiver._lock:
                            receiver.received.append(
                                Received(dict(self.headers), body, path=self.path)
                            )
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                finally:
                    with receiver._lock:
                        receiver.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the tests read ``received``, not stderr

        return Handler


class RawReceiver:
    """A loopback server that answers every connection with ``answer`` (bytes as
    written, HTTP or not), one byte every ``drip`` seconds when ``drip`` is set, and
    records each request's first line in ``lines``. Each connection has its own thread."""

    def __init__(self, answer: bytes, drip: float = 0.0) -> None:
        self.answer, self.drip = answer, drip
        self.lines: list[str] = []
        self.closed = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.lines.append(data.split(b"\r\n", 1)[0].decode())
                if not self.drip:
                    conn.sendall(self.answer)
                    return
                for byte in self.answer:
                    conn.sendall(bytes([byte]))
                    if self.closed.wait(self.drip):
                        return
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.sock.close()

    def __enter__(self) -> RawReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
