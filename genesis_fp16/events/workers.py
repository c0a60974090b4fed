"""The daemon's event delivery: a thread per agent and receiver, so that no receiver and
no agent's outbox can stall another's.

A supervisor thread (``event-delivery``) catches up the outboxes at start, then each
second starts a worker (``event-delivery-<agent>``) for every agent folder with an
outbox and every receiver configured now (one per agent when none is: it marks the
events ``unsent``), and retires the workers of a receiver a reload removed. A worker
turns its pair (:meth:`Deliverer.turn`) until it stops: at once while a batch is left,
else at the next retry or the next second. A receiver that answers a byte a second
holds its own workers for one post's deadline; an agent on a full disk, or with 100,000
events in its outbox, holds only its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from genesis_fp16.events.delivery import (
    Deliverer,
    DeliveryConfig,
    Pair,
    catch_up,
    pairs,
    shown,
)

if TYPE_CHECKING:  # the `events` command never needs prometheus_client (its start-up cost)
    from genesis_fp16.config.settings import Settings
    from genesis_fp16.metrics.daemon_metrics import EventMetrics

log = structlog.get_logger("genesis_fp16.events")

POLL_SECONDS = 1.0  # how often new events are looked for (children write them too)
SHORTEST_WAIT = 0.05  # a retry due sooner than this waits this long


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
