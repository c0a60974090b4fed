"""Deliver the agents' outbox events to the configured webhooks, at least once, in order
per agent and receiver.

The work is split by agent and receiver: :meth:`Deliverer.turn` does one bounded turn of
one agent's outbox for one receiver (``GENESIS_FP16_EVENTS_URLS``; none: the agent's
events are kept as ``unsent``), and the daemon gives each (agent, receiver) pair its own
thread (:class:`DeliveryThread`), so a receiver that answers a byte a second (for one
post's deadline), an outbox on a full disk or a flood of events (100,000) in one agent's
outbox holds only its own pair. A supervisor thread (``event-delivery``) catches up the
outboxes at start, then each second starts a worker (``event-delivery-<agent>``) for
every agent folder with an outbox and every receiver configured now (one per agent when
none is: it marks the events ``unsent``), and retires the workers of a receiver a reload
removed. A worker turns its pair until it stops: at once while a batch is left, else at
the next retry or the next second. A turn reads at most ``READ_BATCH`` new event files,
addresses at most ``ADDRESS_BATCH`` events to the receivers configured now and posts at
most ``POST_BATCH``; the agent's oldest event not delivered to the receiver is posted,
and the next only once it is.

A refused connection, the post's deadline, an answer that is not HTTP, a redirect or any
answer other than 2xx is logged in the event's file (time, status, HTTP code, error) and
retried after an exponential backoff with jitter (1 s, 2 s, 4 s, ... capped at
``GENESIS_FP16_EVENTS_BACKOFF_MAX_SECONDS``, each times a random 0.5-1), timed on the
monotonic clock: a wall clock stepped back does not delay it.

Each attempt's outcome is written after the post: a kill -9 between the two posts the
event again on restart, with the same idempotency key (its id). An outcome the disk
refuses (full, read-only) is kept in memory and written before the pair posts anything
else, so the event is not posted again meanwhile. Nothing here runs on a training run's
path, and every value logged is cut to ``LOG_BOUND`` characters, a URL's password
replaced. An event's file names each receiver as :func:`~.posting.shown_url` shows it
(its password and query secrets replaced, as in a log line): a receiver is matched to
its file entry by that form (settings refuse two receivers that differ only in a
secret), and a file written with a whole URL is renamed so when the event is next
addressed.
"""

from __future__ import annotations

import http.client
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from genesis_fp16.config.settings_sources import bounded
from genesis_fp16.events import posting
from genesis_fp16.events.posting import Post, post, shown_url
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    Event,
    ServedPointerError,
)

if TYPE_CHECKING:  # the `events` command never needs prometheus_client (its start-up cost)
    from genesis_fp16.config.settings import Settings
    from genesis_fp16.metrics.daemon_metrics import EventMetrics

log = structlog.get_logger("genesis_fp16.events")

BACKOFF_FIRST_SECONDS = 1.0
LIMIT_PER_KEPT = 10  # undelivered events kept per agent: ten times GENESIS_FP16_EVENTS_KEEP
READ_BATCH = 500  # event files read per turn: a flooded outbox is read a slice at a time
ADDRESS_BATCH = 100  # events addressed (an fsynced write each) per turn
POST_BATCH = 100  # posts per turn
LOG_BOUND = 300  # characters of any one value in delivery's lines (every line: LOG_VALUE_BOUND)
POLL_SECONDS = 1.0  # how often new events are looked for (children write them too)
SHORTEST_WAIT = 0.05  # a retry due sooner than this waits this long


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
    def from_settings(cls, settings: Settings) -> DeliveryConfig:
        secret = settings.events_secret
        return cls(
            Path(settings.state_dir),
            tuple(settings.events_urls or ()),
            secret.get_secret_value().encode() if secret is not None else b"",
            settings.events_timeout_seconds,
            settings.events_backoff_max_seconds,
            settings.events_keep,
        )


def backoff(attempts: int, cap: float, rand: Callable[[], float]) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: doubling from
    1 s, at most ``cap``, times a random 0.5-1 (receivers that come back are not hit by
    every daemon at once).

    >>> [backoff(n, 600.0, lambda: 1.0) for n in (1, 2, 3, 10, 11)]
    [1.0, 2.0, 4.0, 512.0, 600.0]
    """
    return min(cap, BACKOFF_FIRST_SECONDS * 2 ** min(attempts - 1, 40)) * (0.5 + 0.5 * rand())


def shown(value: object, bound: int = LOG_BOUND) -> str:
    """``value`` for a log line: one line, at most ``bound`` characters and a count.

    >>> shown("a\\nb " + "x" * 400, 8)
    'a b xxxx… (396 more characters)'
    """
    return bounded(" ".join(str(value).split()), bound)


Pair = tuple[Path, str | None]  # an agent folder and a receiver (None: none configured)
Change = Callable[[Event], Event | None]  # an outcome to write in an event's file


@dataclass
class Deliverer:
    """Turns over the state folder's outboxes, one (agent, receiver) pair at a time.
    ``config``: called at each turn (a reload changes the receivers); ``post``,
    ``clock`` (the wall clock: the delivery log's times), ``monotonic`` (the backoff's)
    and ``rand`` are injected by tests (a receiver down for ten minutes, without waiting
    them). ``on_attempt(agent, delivered)`` and ``on_pass(agent, undelivered, dropped)``
    feed the daemon's metrics. Shared by threads that each turn their own pairs."""

    config: Callable[[], DeliveryConfig]
    post: Post = post
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    on_attempt: Callable[[str, bool], None] = lambda agent, delivered: None
    on_pass: Callable[[str, int, int], None] = lambda agent, waiting, dropped: None
    _cache: dict[Path, tuple[int, int, Event]] = field(default_factory=dict)
    # (agent folder, event id, url) -> (monotonic time the next attempt is due, attempts)
    _due: dict[tuple[Path, str, str], tuple[float, int]] = field(default_factory=dict)
    # outcomes posted but not yet written (the disk refused them), per pair, oldest first
    _unwritten: dict[Pair, list[tuple[str, Change]]] = field(default_factory=dict)
    _errors: dict[Pair, int] = field(default_factory=dict)  # failed turns in a row
    _listed: dict[Path, int] = field(default_factory=dict)  # event files after the last prune
    _pruning: dict[Path, threading.Lock] = field(default_factory=dict)  # one prune per agent

    def step(self) -> float | None:
        """One turn of every agent and receiver (tests, the `events` tools); seconds until
        a turn is due again (0: a batch is left; None: nothing waits for a retry)."""
        config = self.config()
        due = [self.turn(folder, url, config) for folder, url in pairs(config)]
        found = [d for d in due if d is not None]
        return min(found) if found else None

    def turn(self, folder: Path, url: str | None, config: DeliveryConfig) -> float | None:
        """One bounded turn of ``folder``'s events for ``url``; seconds until the next is
        due (0: more is left; None: nothing waits). A turn that fails (the agent's disk
        full, its outbox unreadable) is logged, bounded, and the pair backs off: no other
        agent or receiver waits for it."""
        pair = (folder, url)
        try:
            wait = self._turn(folder, url, config)
        except Exception as exc:  # one pair's trouble, never another's
            failed = self._errors[pair] = self._errors.get(pair, 0) + 1
            wait = backoff(failed, config.backoff_max, self.rand)
            log.error(
                "events: delivery turn failed",
                agent=shown(folder.name),
                url=shown(shown_url(url)) if url else None,
                error=shown(f"{type(exc).__name__}: {exc}"),
                retry_in_s=round(wait, 1),
            )
            return wait
        self._errors.pop(pair, None)
        return wait

    def _turn(self, folder: Path, url: str | None, config: DeliveryConfig) -> float | None:
        self._flush((folder, url))
        names = AgentFolder.at(folder).outbox.event_names()
        if len(names) > config.keep and self._listed.get(folder) != len(names):
            names = self._prune(folder, config)
        events = self._events(folder, names)
        if events is None:
            return 0.0  # files left to read: the next turn goes on at once
        addressed = self._address_batch(folder, events, config.urls)
        self._report(folder, events)
        wait = self._deliver_to(folder, events, url, config) if url is not None else None
        if addressed < len(events):
            return 0.0  # events left to address
        return wait

    def _prune(self, folder: Path, config: DeliveryConfig) -> list[str]:
        """Bound the agent's outbox (outbox.prune reads all its events, under its lock:
        only this agent's workers wait for it, one of them pruning); the names left."""
        with self._pruning.setdefault(folder, threading.Lock()):
            names = AgentFolder.at(folder).outbox.event_names()
            if self._listed.get(folder) == len(names):
                return names  # another receiver's worker pruned meanwhile
            pruned = AgentFolder.at(folder).outbox.prune(config.keep, config.keep * LIMIT_PER_KEPT)
            if pruned.dropped:
                log.error(
                    "undelivered events dropped", agent=shown(folder.name), count=pruned.dropped
                )
            names = AgentFolder.at(folder).outbox.event_names()
            self._listed[folder] = len(names)
            return names

    def _address_batch(self, folder: Path, events: list[Event], urls: tuple[str, ...]) -> int:
        """Address the agent's events, oldest first, at most ADDRESS_BATCH writes; the
        count of events (from the oldest) addressed as ``urls`` want."""
        writes = 0
        for n, event in enumerate(events):
            if not _needs_address(event, urls):
                continue
            if writes == ADDRESS_BATCH:
                return n
            writes += 1
            new = AgentFolder.at(folder).outbox.update(event.id, lambda e: _addressed(e, urls))
            if new is not None:
                events[n] = new
                self._cache.pop(event.path, None)
        return len(events)

    def _report(self, folder: Path, events: list[Event]) -> None:
        waiting = sum(1 for e in events if e.undelivered)
        state = AgentFolder.at(folder).outbox.read_state()
        dropped = 0 if state is None else state["dropped"]
        self.on_pass(folder.name, waiting, dropped)

    def _deliver_to(
        self, folder: Path, events: list[Event], url: str, config: DeliveryConfig
    ) -> float | None:
        """The agent's events still owed to ``url``, oldest first, until one fails or is
        not due yet: the seconds until it is (0: the batch is spent; None: all
        delivered). An event not yet addressed stops the turn: nothing later goes first."""
        posted = 0
        for event in events:
            if event.targets is None:
                return 0.0
            target = event.targets.get(shown_url(url))
            if target is None or target.status != "pending":
                continue
            wait = self._wait(folder, event, url, target.next_at_s, config)
            if wait > 0:
                return wait
            if posted == POST_BATCH:
                return 0.0
            posted += 1
            if not self.attempt(folder, event, url, config):
                return max(0.0, self._wait(folder, event, url, target.next_at_s, config))
            self._listed.pop(folder, None)  # a delivered event may now be pruned
        return None

    def _wait(
        self, folder: Path, event: Event, url: str, next_at_s: float, config: DeliveryConfig
    ) -> float:
        """Seconds until ``event`` is due for ``url``, on the monotonic clock. A retry
        time this process did not set (a run before it, another process) is taken from
        the file once, at most one capped backoff away whatever the wall clock did."""
        key = (folder, event.id, url)
        due = self._due.get(key)
        if due is None:
            left = next_at_s - self.clock()
            due = (self.monotonic() + min(max(left, 0.0), config.backoff_max), 0)
            self._due[key] = due
        return due[0] - self.monotonic()

    def attempt(self, folder: Path, event: Event, url: str, config: DeliveryConfig) -> bool:
        """Post ``event`` to ``url`` once and log the attempt in its file; True: delivered.
        Raises OSError when the file cannot be written (the outcome is kept, and written
        before this pair posts again)."""
        body = posting.body_of(event.body())
        headers = posting.headers(event.id, event.kind, body, config.secret)
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
        key = (folder, event.id, url)
        if delivered:
            self._due.pop(key, None)
            delay = 0.0
        else:
            before = self._due.get(key, (0.0, 0))[1]
            known = (event.targets or {}).get(shown_url(url))
            tried = max(before, 0 if known is None else known.attempts) + 1
            delay = backoff(tried, config.backoff_max, self.rand)
            self._due[key] = (self.monotonic() + delay, tried)
            log.warning(
                "event not delivered",
                agent=shown(folder.name),
                id=event.id,
                url=shown(shown_url(url)),  # nor a password or token in the URL
                error=shown(error),
            )
        self.on_attempt(folder.name, delivered)
        change = _logged(url, started, code, error, started + delay)
        try:
            AgentFolder.at(folder).outbox.update(event.id, change)
        except OSError:
            if delivered:  # not posted again before the file says so
                self._unwritten.setdefault((folder, url), []).append((event.id, change))
            raise
        return delivered

    def _flush(self, pair: Pair) -> None:
        """Write the outcomes the disk refused before (raises OSError while it still does)."""
        waiting = self._unwritten.get(pair)
        while waiting:
            event_id, change = waiting[0]
            AgentFolder.at(pair[0]).outbox.update(event_id, change)
            waiting.pop(0)
        self._unwritten.pop(pair, None)

    def _events(self, folder: Path, names: list[str]) -> list[Event] | None:
        """The agent's events, oldest first, re-reading only files changed since they were
        read; None while files are left to read (READ_BATCH a turn: a flood of them is
        read a slice at a time, and its order is known once all are)."""
        box = AgentFolder.at(folder).outbox
        root = box.root
        reads, left = 0, False
        found = []
        for name in names:
            path = root / name
            try:
                info = os.stat(path)
            except OSError:
                self._cache.pop(path, None)
                continue
            cached = self._cache.get(path)
            if cached is not None and cached[:2] == (info.st_mtime_ns, info.st_size):
                found.append(cached[2])
                continue
            if reads == READ_BATCH:
                left = True
                continue
            reads += 1
            event = box.read_event(path)
            if event is not None:
                self._cache[path] = (info.st_mtime_ns, info.st_size, event)
                found.append(event)
        if left:
            return None
        return sorted(found, key=lambda e: (e.order, e.id))


def _needs_address(event: Event, urls: tuple[str, ...]) -> bool:
    """Not handled yet, still waiting for a receiver configured no longer, or naming one
    by its whole URL (written before the file named them as shown)."""
    if event.targets is None:
        return True
    named = {shown_url(u) for u in urls}
    return any(
        u != shown_url(u) or (u not in named and t.status == "pending")
        for u, t in event.targets.items()
    )


def _addressed(event: Event, urls: tuple[str, ...]) -> Event | None:
    """An event handled for the first time gets the receivers configured now; one whose
    receiver is no longer configured stops waiting for it (status dropped). None:
    nothing to change (another worker did it)."""
    if not _needs_address(event, urls):
        return None
    return event.addressed({shown_url(u) for u in urls}, shown_url)  # none whole


def _logged(
    url: str, at: float, code: int | None, error: str | None, next_at: float
) -> Callable[[Event], Event]:
    """The change that logs one attempt: the delivery log's line, the target's state
    (``next_at_s``: the retry's wall time, for `events list` and a restart)."""

    def change(event: Event) -> Event:
        return event.attempted(shown_url(url), at, code, error, next_at)

    return change


def redeliver_marked(event: Event, urls: tuple[str, ...]) -> Event:
    """``events redeliver``: the event owed again to every receiver configured now."""
    return event.owed_again(map(shown_url, urls))


def _one_line(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # URLError wraps the socket's error
    return shown(str(reason if reason is not None else exc) or type(exc).__name__)


def agent_folders(state_dir: Path) -> list[Path]:
    """Every agent folder of the state folder that has an outbox, by name."""
    return [f.root for f in AgentFolder.each(state_dir) if f.outbox.root.is_dir()]


def pairs(config: DeliveryConfig) -> list[Pair]:
    """What is delivered: each agent folder with an outbox, for each receiver configured
    now (None when none is: its events are marked ``unsent``)."""
    return [(f, url) for f in agent_folders(config.state_dir) for url in config.urls or (None,)]


def catch_up(state_dir: Path) -> None:
    """Copy into each agent's outbox what its served pointer's journal holds and the
    outbox lacks (a transition killed between its commit and its event), and settle the
    rejections and holds a killed verdict writer left staged: the daemon's start-up. A
    pointer that cannot be read is left to its own reporters (the staged verdict events
    are settled before it is read)."""
    for agent in AgentFolder.each(state_dir):
        folder = agent.checkpoint_dir
        if not folder.exists():
            continue
        try:
            agent.recover()  # rolls forward, announces what a kill left
        except (ServedPointerError, OSError) as exc:
            log.warning(
                "events: cannot read the served pointer",
                folder=shown(folder),
                error=shown(exc),
            )


class DeliveryThread:
    """The daemon's delivery: the supervisor and its workers, until :meth:`stop`. A
    worker is one (agent, receiver) pair's thread, with its own event set when its
    receiver is removed (``workers``: each pair's thread and that event)."""

    def __init__(self, deliverer: Deliverer) -> None:
        self.deliverer = deliverer
        self.workers: dict[Pair, tuple[threading.Thread, threading.Event]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="event-delivery", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop after the posts in flight (each cut by its deadline at worst), waiting at
        most ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._thread.join(timeout)
        for worker, _ in list(self.workers.values()):
            worker.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        try:
            catch_up(self.deliverer.config().state_dir)
        except Exception as exc:
            log.error("events: catch-up failed", error=shown(f"{type(exc).__name__}: {exc}"))
        while not self._stop.is_set():
            try:
                self.supervise(self.deliverer.config())
            except Exception as exc:  # the next second tries again; workers go on
                log.error(
                    "events: delivery supervisor", error=shown(f"{type(exc).__name__}: {exc}")
                )
            self._stop.wait(POLL_SECONDS)

    def supervise(self, config: DeliveryConfig) -> None:
        """Start a worker for each (agent, receiver) pair configured now; retire the rest."""
        wanted = set(pairs(config))
        for pair in wanted - self.workers.keys():
            retired = threading.Event()
            name = f"event-delivery-{pair[0].name}"
            worker = threading.Thread(
                target=self._work, args=(pair, retired), name=name, daemon=True
            )
            self.workers[pair] = (worker, retired)
            worker.start()
        for pair in self.workers.keys() - wanted:
            self.workers.pop(pair)[1].set()

    def _work(self, pair: Pair, retired: threading.Event) -> None:
        """One pair's worker: turns it until the delivery stops or the pair is retired."""
        folder, url = pair
        while not (self._stop.is_set() or retired.is_set()):
            wait = self.deliverer.turn(folder, url, self.deliverer.config())
            if wait is None or wait > 0:
                retired.wait(max(SHORTEST_WAIT, min(wait or POLL_SECONDS, POLL_SECONDS)))


def start_delivery(settings: Callable[[], Settings], metrics: EventMetrics) -> DeliveryThread:
    """The daemon's delivery, started: its receivers read from ``settings()`` at each turn
    (a reload's new URLs apply within a second), its figures into ``metrics``."""
    deliverer = Deliverer(
        lambda: DeliveryConfig.from_settings(settings()),
        on_attempt=metrics.observe_attempt,
        on_pass=metrics.observe_pass,
    )
    thread = DeliveryThread(deliverer)
    thread.start()
    return thread
