"""One event of an agent's outbox as its file holds it (``outbox/<id>.json``): what it
announces, the receivers it is owed to and its delivery log. Records only: the outbox's
reads and writes are :mod:`~genesis_fp16_infrastructure.agent_folder.outbox`'s."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder.kept_record import Json
from genesis_fp16_infrastructure.record_codec import LOCAL, OMIT_NONE, Record

VERSION = 1


@dataclass(frozen=True)
class Target(Record):
    """One receiver's state of an event (``Event.targets``): ``pending`` (owed),
    ``delivered`` (it answered 2xx, at ``delivered_at_s``) or ``dropped`` (configured no
    longer), the attempts made so far, and the wall time a retry is due
    (``next_at_s``). A key a hand left out reads as a new receiver's."""

    status: str = "pending"
    attempts: int = 0
    next_at_s: float = 0.0
    delivered_at_s: float | None = field(default=None, metadata={OMIT_NONE: True})


@dataclass(frozen=True)
class Attempt(Record):
    """One line of an event's delivery log (``Event.attempts``): the receiver as shown
    (``url``, no password or token), when (``at``, ``at_s``), ``delivered`` or
    ``failed``, the HTTP status if one came back, and the error if it failed."""

    url: str = ""
    at: str = ""
    at_s: float | None = field(default=None, metadata={OMIT_NONE: True})
    status: str = ""
    code: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Event(Record):
    """One event as its file holds it (its JSON the record codec's; ``path``: where it was
    read, never in it). ``data``: what it announces, as JSON; ``targets``: the receivers
    the daemon addressed it to by their shown URL (None: not handled yet; ``{}``: no
    receiver was configured); ``attempts``: the delivery log, newest last."""

    VERSION = VERSION

    id: str
    agent: str
    kind: str
    at: str
    at_s: float
    order: int
    data: Mapping[str, Json]
    targets: Mapping[str, Target] | None
    attempts: tuple[Attempt, ...] = ()
    path: Path = field(default=Path(), metadata={LOCAL: True})

    @property
    def status(self) -> str:
        """``new`` (not handled yet), ``unsent`` (no receiver configured), ``pending`` (a
        receiver still waits for it), ``delivered`` (every receiver answered 2xx) or
        ``dropped`` (a receiver that had not taken it is configured no longer)."""
        if self.targets is None:
            return "new"
        if not self.targets:
            return "unsent"
        said = {t.status for t in self.targets.values()}
        if "pending" in said:
            return "pending"
        return "delivered" if said == {"delivered"} else "dropped"

    @property
    def undelivered(self) -> bool:
        return self.status in ("new", "pending")

    def addressed(self, named: Collection[str], shown: Callable[[str], str]) -> Event:
        """The event owed to the receivers ``named`` (by their shown URLs) when it was not
        handled yet; else each receiver it names, shown (``shown``: a whole URL, written
        before the file named them as shown, without its password or token), and one
        still owed but configured no longer dropped. Its log's URLs shown the same."""
        if self.targets is None:
            targets = {url: Target() for url in named}
        else:
            targets = {shown(url): target for url, target in self.targets.items()}
            for url, target in list(targets.items()):
                if url not in named and target.status == "pending":
                    targets[url] = replace(target, status="dropped")  # configured no longer
        attempts = tuple(replace(a, url=shown(a.url)) for a in self.attempts)
        return replace(self, targets=targets, attempts=attempts)

    def attempted(
        self, url: str, at: float, code: int | None, error: str | None, next_at: float
    ) -> Event:
        """One attempt to post it to ``url`` (shown) at ``at`` logged: its line in the
        delivery log, and the receiver's state: delivered (``error`` None), or owed
        again at ``next_at`` (the retry's wall time, for `events list` and a restart)."""
        target = (self.targets or {}).get(url, Target())
        target = replace(target, attempts=target.attempts + 1)
        if error is None:
            target = replace(target, status="delivered", delivered_at_s=at)
        else:
            target = replace(target, next_at_s=next_at)
        line = Attempt(
            url=url,
            at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
            at_s=at,
            status="delivered" if error is None else "failed",
            code=code,
            error=error,
        )
        targets = {**(self.targets or {}), url: target}
        return replace(self, targets=targets, attempts=(*self.attempts, line))

    def owed_again(self, urls: Iterable[str]) -> Event:
        """The event owed again, at once, to each receiver of ``urls`` (shown)."""
        targets = dict(self.targets or {})
        for url in urls:
            targets[url] = replace(targets.get(url, Target()), status="pending", next_at_s=0.0)
        return replace(self, targets=targets)

    def body(self) -> dict[str, Json]:
        """What a receiver gets: the event without its delivery state."""
        return {
            "id": self.id,
            "agent": self.agent,
            "kind": self.kind,
            "at": self.at,
            "at_s": self.at_s,
            "data": dict(self.data),
        }
