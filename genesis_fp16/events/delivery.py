"""Deliver the agents' outbox events to the configured webhooks, at least once, in order
per agent and receiver.

One pass (:meth:`Deliverer.step`) walks every agent's outbox: an event not handled yet is
addressed to the receivers configured now (``GENESIS_FP16_EVENTS_URLS``; none: it stays
in the outbox as ``unsent``); then, per receiver, the agent's oldest event not delivered
to it is posted, and the next only once it is. A refused connection, a timeout or an
answer other than 2xx is logged in the event's file (time, status, HTTP code, error) and
retried after an exponential backoff with jitter (1 s, 2 s, 4 s, ... capped at
``GENESIS_FP16_EVENTS_BACKOFF_MAX_SECONDS``, each times a random 0.5-1), so a receiver
down for ten minutes gets every event, in order, within a capped wait of coming back.
One agent's stuck event holds only that agent's later events to that receiver.

Each attempt's outcome is written after the post: a kill -9 between the two posts the
event again on restart, with the same idempotency key (its id). Nothing here runs on a
training run's path: the daemon runs passes on its own thread (:class:`DeliveryThread`),
a hung receiver is cut by ``GENESIS_FP16_EVENTS_TIMEOUT_SECONDS``, and an error in a pass
is logged and the next pass goes on.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from genesis_fp16.events import signing
from genesis_fp16_infrastructure.agent_folder import outbox
from genesis_fp16_infrastructure.agent_folder.layout import AGENTS_FOLDER, CHECKPOINTS_FOLDER
from genesis_fp16_infrastructure.agent_folder.lifecycle import ServedPointerError, update_pointer
from genesis_fp16_infrastructure.agent_folder.outbox import Event

if TYPE_CHECKING:  # the `events` command never needs prometheus_client (its start-up cost)
    from genesis_fp16.metrics.event_metrics import EventMetrics

log = structlog.get_logger("genesis_fp16.events")

BACKOFF_FIRST_SECONDS = 1.0
POLL_SECONDS = 1.0  # how often the thread looks for new events (children write them too)
LIMIT_PER_KEPT = 10  # undelivered events kept per agent: ten times GENESIS_FP16_EVENTS_KEEP


class Settingsish(Protocol):
    """The settings delivery reads (genesis_fp16.config.settings.Settings)."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def events_urls(self) -> list[str] | None: ...
    @property
    def events_secret(self) -> Any: ...
    @property
    def events_timeout_seconds(self) -> float: ...
    @property
    def events_backoff_max_seconds(self) -> float: ...
    @property
    def events_keep(self) -> int: ...


@dataclass(frozen=True)
class DeliveryConfig:
    """Where and how to deliver: the receivers, the signing secret, one post's timeout,
    the backoff's cap, and how many handled events each agent's outbox keeps."""

    state_dir: Path
    urls: tuple[str, ...] = ()
    secret: bytes = b""
    timeout: float = 10.0
    backoff_max: float = 600.0
    keep: int = 1000

    @classmethod
    def from_settings(cls, settings: Settingsish) -> DeliveryConfig:
        secret = settings.events_secret
        return cls(
            Path(settings.state_dir),
            tuple(settings.events_urls or ()),
            secret.get_secret_value().encode() if secret is not None else b"",
            settings.events_timeout_seconds,
            settings.events_backoff_max_seconds,
            settings.events_keep,
        )


Post = Callable[[str, bytes, Mapping[str, str], float], int]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the receiver's answer, a failed attempt: never followed (urllib would
    follow a 301 as a GET without the body and report the GET's 200)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


# The post in flight on this thread: its deadline (monotonic), the timers that shut its
# sockets then, and whether one did.
_POST = threading.local()


def _arm(sock: socket.socket) -> None:
    """Shut ``sock`` down at the post's deadline: a receiver that answers a byte a second
    never trips a per-read timeout, and would hold the delivery thread for minutes."""
    deadline = getattr(_POST, "deadline", None)
    if deadline is None:
        return

    def shut() -> None:
        _POST_FIRED.add(id(sock))
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), shut)
    timer.daemon = True
    timer.start()
    _POST.timers.append((timer, id(sock)))


_POST_FIRED: set[int] = set()


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


def shown_url(url: str) -> str:
    """``url`` for a log line: a password in it is replaced.

    >>> shown_url("http://user:hunter2@hooks.example/x")
    'http://user:***@hooks.example/x'
    """
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST ``body``; the HTTP status (an error status too). ``timeout`` bounds the whole
    post (connect, send and the answer read), not each read. A refused connection, the
    deadline or a broken answer raise OSError (``urllib.error.URLError`` is one), an
    answer that is not HTTP ``http.client.HTTPException``."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    _POST.deadline, _POST.timers = time.monotonic() + timeout, []
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(64 * 1024)  # the receiver's answer is not ours to keep
            code = int(answer.status)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's socket
        code = int(exc.code)
    except (OSError, http.client.HTTPException) as exc:
        if _cut():
            raise TimeoutError(_cut_said(timeout)) from exc
        raise
    finally:
        timers, _POST.deadline = _POST.timers, None
        for timer, _ in timers:
            timer.cancel()
    if _cut(timers):  # cut while the answer's end was read: not a whole answer
        raise TimeoutError(_cut_said(timeout))
    return code


def _cut_said(timeout: float) -> str:
    return f"timed out: no whole answer within the {timeout:g} s deadline"


def _cut(timers: list[tuple[threading.Timer, int]] | None = None) -> bool:
    """Whether the deadline shut one of this post's sockets (forgotten once asked)."""
    fired = False
    for _, sock_id in timers if timers is not None else _POST.timers:
        if sock_id in _POST_FIRED:
            _POST_FIRED.discard(sock_id)
            fired = True
    return fired


def backoff(attempts: int, cap: float, rand: Callable[[], float]) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: doubling from
    1 s, at most ``cap``, times a random 0.5-1 (receivers that come back are not hit by
    every daemon at once).

    >>> [backoff(n, 600.0, lambda: 1.0) for n in (1, 2, 3, 10, 11)]
    [1.0, 2.0, 4.0, 512.0, 600.0]
    """
    return min(cap, BACKOFF_FIRST_SECONDS * 2 ** min(attempts - 1, 40)) * (0.5 + 0.5 * rand())


@dataclass
class Deliverer:
    """Passes over the state folder's outboxes. ``config``: called at each pass (a reload
    changes the receivers); ``post``, ``clock`` and ``rand`` are injected by tests (a
    receiver down for ten minutes, without waiting them). ``on_attempt(agent, delivered)``
    and ``on_pass(undelivered, dropped)`` (per agent) feed the daemon's metrics."""

    config: Callable[[], DeliveryConfig]
    post: Post = post
    clock: Callable[[], float] = time.time
    rand: Callable[[], float] = random.random
    on_attempt: Callable[[str, bool], None] = lambda agent, delivered: None
    on_pass: Callable[[dict[str, int], dict[str, int]], None] = lambda waiting, dropped: None
    _cache: dict[Path, tuple[int, int, Event]] = field(default_factory=dict)

    def step(self) -> float | None:
        """One pass over every agent; seconds until an attempt falls due (None: nothing
        is waiting for a retry)."""
        config = self.config()
        due: list[float] = []
        waiting: dict[str, int] = {}
        dropped: dict[str, int] = {}
        for folder in agent_folders(config.state_dir):
            wait = self.deliver_agent(folder, config)
            if wait is not None:
                due.append(wait)
            events = self._events(folder)
            waiting[folder.name] = sum(1 for e in events if e.undelivered)
            dropped[folder.name] = int((outbox.read_state(folder) or {}).get("dropped", 0))
        self.on_pass(waiting, dropped)
        return min(due) if due else None

    def deliver_agent(self, folder: Path, config: DeliveryConfig) -> float | None:
        """Address, post and bound one agent's events; seconds until its next retry."""
        if len(self._events(folder)) > config.keep:
            pruned = outbox.prune(folder, config.keep, config.keep * LIMIT_PER_KEPT)
            if pruned.dropped:
                log.error("undelivered events dropped", agent=folder.name, count=pruned.dropped)
        events = [self._address(folder, e, config.urls) for e in self._events(folder)]
        waits = [self._deliver_to(folder, events, url, config) for url in config.urls]
        found = [w for w in waits if w is not None]
        return min(found) if found else None

    def _deliver_to(
        self, folder: Path, events: list[Event], url: str, config: DeliveryConfig
    ) -> float | None:
        """The agent's events still owed to ``url``, oldest first, until one fails or is
        not due yet: the seconds until it is (None: all delivered)."""
        for event in events:
            target = (event.targets or {}).get(url)
            if target is None or target.get("status") != "pending":
                continue
            wait = float(target.get("next_at_s", 0.0)) - self.clock()
            if wait > 0:
                return wait
            if not self.attempt(folder, event, url, config):
                return max(0.0, self._next_at(folder, event.id, url) - self.clock())
        return None

    def attempt(self, folder: Path, event: Event, url: str, config: DeliveryConfig) -> bool:
        """Post ``event`` to ``url`` once and log the attempt in its file; True: delivered."""
        body = signing.body_of(event.body())
        headers = signing.headers(event.id, event.kind, body, config.secret)
        started = self.clock()
        code: int | None = None
        try:
            code = self.post(url, body, headers, config.timeout)
            error = None if 200 <= code < 300 else f"HTTP {code}"
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # Refused, timed out, reset, or an answer that is not HTTP: a failed attempt
            # with its backoff (HTTPException escaped the pass, retried every second).
            error = _one_line(exc)
        delivered = error is None
        outbox.update(folder, event.id, _logged(url, started, code, error, config, self.rand))
        self.on_attempt(folder.name, delivered)
        if not delivered:
            shown = shown_url(url)  # a password in the URL never reaches a log line
            log.warning(
                "event not delivered", agent=folder.name, id=event.id, url=shown, error=error
            )
        return delivered

    def _address(self, folder: Path, event: Event, urls: tuple[str, ...]) -> Event:
        """An event handled for the first time gets the receivers configured now; one
        whose receiver is no longer configured stops waiting for it (status dropped)."""
        stale = [u for u, t in (event.targets or {}).items() if u not in urls]
        pending_stale = [u for u in stale if (event.targets or {})[u].get("status") == "pending"]
        if event.targets is not None and not pending_stale:
            return event
        new = outbox.update(folder, event.id, lambda e: _addressed(e, urls))
        return new if new is not None else event

    def _next_at(self, folder: Path, event_id: str, url: str) -> float:
        event = self._read(outbox.find(folder, event_id))
        target = (event.targets or {}).get(url, {}) if event is not None else {}
        return float(target.get("next_at_s", 0.0))

    def _events(self, folder: Path) -> list[Event]:
        """The agent's events, re-reading only files changed since the last pass."""
        paths = [outbox.outbox_of(folder) / n for n in outbox.event_names(folder)]
        found = [e for e in (self._read(p) for p in paths) if e is not None]
        return sorted(found, key=lambda e: (e.order, e.id))

    def _read(self, path: Path | None) -> Event | None:
        if path is None:
            return None
        try:
            info = os.stat(path)
        except OSError:
            self._cache.pop(path, None)
            return None
        cached = self._cache.get(path)
        if cached is not None and cached[:2] == (info.st_mtime_ns, info.st_size):
            return cached[2]
        event = outbox.read_event(path)
        if event is not None:
            self._cache[path] = (info.st_mtime_ns, info.st_size, event)
        return event


def _addressed(event: Event, urls: tuple[str, ...]) -> Event:
    targets = dict(event.targets) if event.targets is not None else {}
    for url, target in list(targets.items()):
        if url not in urls and target.get("status") == "pending":
            targets[url] = {**target, "status": "dropped"}  # no longer configured
    if event.targets is None:
        targets = {u: {"status": "pending", "attempts": 0, "next_at_s": 0.0} for u in urls}
    return replace(event, targets=targets)


def _logged(
    url: str,
    at: float,
    code: int | None,
    error: str | None,
    config: DeliveryConfig,
    rand: Callable[[], float],
) -> Callable[[Event], Event]:
    """The change that logs one attempt: the delivery log's line, the target's state."""

    def change(event: Event) -> Event:
        targets = dict(event.targets or {})
        target = dict(targets.get(url, {"status": "pending", "attempts": 0}))
        target["attempts"] = int(target.get("attempts", 0)) + 1
        if error is None:
            target.update(status="delivered", delivered_at_s=at)
        else:
            target["next_at_s"] = at + backoff(target["attempts"], config.backoff_max, rand)
        targets[url] = target
        line = {
            "url": url,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
            "at_s": at,
            "status": "delivered" if error is None else "failed",
            "code": code,
            "error": error,
        }
        return replace(event, targets=targets, attempts=[*event.attempts, line])

    return change


def redeliver_marked(event: Event, urls: tuple[str, ...]) -> Event:
    """``events redeliver``: the event owed again to every receiver configured now."""
    targets = dict(event.targets or {})
    for url in urls:
        targets[url] = {**targets.get(url, {"attempts": 0}), "status": "pending", "next_at_s": 0.0}
    return replace(event, targets=targets)


def _one_line(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # URLError wraps the socket's error
    text = str(reason if reason is not None else exc) or type(exc).__name__
    return " ".join(text.split())[:300]


def agent_folders(state_dir: Path) -> list[Path]:
    """Every agent folder of the state folder that has an outbox, by name."""
    root = Path(state_dir) / AGENTS_FOLDER
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [root / n for n in names if outbox.outbox_of(root / n).is_dir()]


def catch_up(state_dir: Path) -> None:
    """Copy into each agent's outbox what its served pointer's journal holds and the
    outbox lacks (a transition killed between its commit and its event), and settle the
    rejections and holds a killed verdict writer left staged: the daemon's start-up. A
    pointer that cannot be read is left to its own reporters (the staged verdict events
    are settled before it is read)."""
    root = Path(state_dir) / AGENTS_FOLDER
    for folder in sorted(root.glob(f"*/{CHECKPOINTS_FOLDER}")):
        try:
            update_pointer(folder, lambda current: current)  # reads, rolls forward, announces
        except (ServedPointerError, OSError) as exc:
            log.warning(
                "events: cannot read the served pointer", folder=str(folder), error=str(exc)
            )


class DeliveryThread:
    """The daemon's ``event-delivery`` thread: a pass at start, then each second (or at
    the next retry, if sooner), until :meth:`stop`. A pass that raises is logged; the
    next goes on."""

    def __init__(self, deliverer: Deliverer) -> None:
        self.deliverer = deliverer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="event-delivery", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop after the attempt in flight (cut by its timeout at worst)."""
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            catch_up(self.deliverer.config().state_dir)
        except Exception:
            log.exception("events: catch-up failed")
        while not self._stop.is_set():
            wait = POLL_SECONDS
            try:
                due = self.deliverer.step()
                wait = POLL_SECONDS if due is None else max(0.05, min(due, POLL_SECONDS))
            except Exception:
                log.exception("events: delivery pass failed")
            self._stop.wait(wait)


def start_delivery(settings: Callable[[], Settingsish], metrics: EventMetrics) -> DeliveryThread:
    """The daemon's delivery thread, started: its receivers read from ``settings()`` at each
    pass (a reload's new URLs apply at the next), its figures into ``metrics``."""
    deliverer = Deliverer(
        lambda: DeliveryConfig.from_settings(settings()),
        on_attempt=metrics.observe_attempt,
        on_pass=metrics.observe_pass,
    )
    thread = DeliveryThread(deliverer)
    thread.start()
    return thread
