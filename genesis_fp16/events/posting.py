"""One webhook post: what a receiver gets with each event, how it checks that the daemon
sent it, and the post itself.

The body is the event's JSON (UTF-8, keys sorted); its headers carry the event's id as
the idempotency key (the same on every attempt and redelivery: a receiver that has seen
it skips it) and an HMAC-SHA256 of the body under ``GENESIS_FP16_EVENTS_SECRET``, as
GitHub's ``X-Hub-Signature-256`` does::

    >>> body = b'{"id": "0123456789abcdef"}'
    >>> signature = sign(b"s3cret", body)
    >>> signature
    'sha256=b05550938f26ec416fa15671f0e5071986bb416e2f905cfef8066d90c0613d81'
    >>> verify(b"s3cret", body, signature), verify(b"other", body, signature)
    (True, False)

The post has a deadline for the whole of it: connect, send and the answer's read, where
a socket timeout bounds each read only (a receiver answering a byte a second never trips
one). Redirects are answers, never followed; a password in a URL, or a token in its query, is
never shown (:func:`shown_url`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from genesis_fp16.config.settings_sources import shown_url as shown_url

Post = Callable[[str, bytes, Mapping[str, str], float], int]

SIGNATURE_HEADER = "X-Genesis-Fp16-Signature-256"
EVENT_HEADER = "X-Genesis-Fp16-Event"  # the event's kind: promote, reject, rollback, ...
DELIVERY_HEADER = "X-Genesis-Fp16-Delivery"  # the event's id, as GitHub's X-GitHub-Delivery
IDEMPOTENCY_HEADER = "Idempotency-Key"  # the event's id again, under the IETF draft's name


def body_of(event: dict[str, Any]) -> bytes:
    """The bytes posted and signed: the event's JSON, keys sorted, compact."""
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` (the header's value) is ``body``'s under ``secret``, compared
    in constant time."""
    return signature is not None and hmac.compare_digest(sign(secret, body), signature)


def headers(event_id: str, kind: str, body: bytes, secret: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "genesis-fp16-events",
        EVENT_HEADER: kind,
        DELIVERY_HEADER: event_id,
        IDEMPOTENCY_HEADER: event_id,
        SIGNATURE_HEADER: sign(secret, body),
    }


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the receiver's answer, a failed attempt: never followed (urllib would
    follow a 301 as a GET without the body and report the GET's 200)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


# The post in flight on this thread: its deadline (monotonic), the timers that shut its
# sockets then, and the sockets they shut (empty: none was).
_POST = threading.local()


def _arm(sock: socket.socket) -> None:
    """Shut ``sock`` down at the post's deadline: a receiver that answers a byte a second
    never trips a per-read timeout, and would hold the delivery thread for minutes."""
    deadline = getattr(_POST, "deadline", None)
    if deadline is None:
        return
    cut = _POST.cut  # this post's: the timer runs on a thread of its own

    def shut() -> None:
        cut.append(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), shut)
    timer.daemon = True
    timer.start()
    _POST.timers.append(timer)


class _DeadlineHTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _arm(self.sock)


class _DeadlineHTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _arm(self.sock)


class _DeadlineHTTP(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_DeadlineHTTPConnection, req)


class _DeadlineHTTPS(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_DeadlineHTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


_OPENER = urllib.request.build_opener(_NoRedirects, _DeadlineHTTP, _DeadlineHTTPS)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST ``body``; the HTTP status (an error status too). ``timeout`` bounds the whole
    post (connect, send and the answer read), not each read. A refused connection, the
    deadline or a broken answer raise OSError (``urllib.error.URLError`` is one), an
    answer that is not HTTP ``http.client.HTTPException``."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    _POST.deadline, _POST.timers, _POST.cut = time.monotonic() + timeout, [], []
    cut = _POST.cut
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(64 * 1024)  # the receiver's answer is not ours to keep
            code = int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's socket
        code = int(exc.code)
    except (OSError, http.client.HTTPException) as exc:
        if cut:
            raise TimeoutError(_cut_said(timeout)) from exc
        raise
    finally:
        timers, _POST.deadline = _POST.timers, None
        for timer in timers:
            timer.cancel()
    if cut:  # cut while the answer's end was read: not a whole answer
        raise TimeoutError(_cut_said(timeout))
    return code


def _cut_said(timeout: float) -> str:
    return f"timed out: no whole answer within the {timeout:g} s deadline"
