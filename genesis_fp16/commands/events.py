"""`genesis-fp16 events list [--json]` and `genesis-fp16 events redeliver ID`: the agents'
events and their deliveries, as GitHub lists a webhook's deliveries.

Every promotion, rejection, hold, rollback (gate, live watch, operator), pin, unpin,
repair, demotion and fault bundle is written to the agent's outbox
(``<state>/agents/<agent>/outbox/``) before it is reported, and the daemon posts it to
``GENESIS_FP16_EVENTS_URLS`` (docs/events.md). ``list`` shows each event, oldest first:
its id (the receivers' idempotency key), agent, kind, time, delivery status (``new``: the
daemon has not handled it yet; ``pending``: a receiver still waits for it; ``delivered``;
``unsent``: no receiver was configured; ``dropped``: its receiver is configured no
longer), attempts and the last attempt's answer. ``redeliver ID`` posts one event again to
every receiver configured now, at once, logging each attempt in the outbox; exit code 0
when every receiver took it, 1 when one did not (the daemon then retries it with
backoff), 2 for an id that is no event, in one line.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from genesis_fp16.cli import UsageError
from genesis_fp16.commands.reading import command_settings
from genesis_fp16.config.settings import Settings
from genesis_fp16.events.delivery import (
    Deliverer,
    DeliveryConfig,
    agent_folders,
    redeliver_marked,
)
from genesis_fp16.events.posting import shown_url
from genesis_fp16_infrastructure.api import AgentFolder, Event

EVENT_ID = re.compile(r"^[0-9a-f]{16}$")
COLUMNS = ("ID", "AGENT", "KIND", "TIME", "STATUS", "ATTEMPTS", "LAST")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "events",
        help="list the agents' events and their webhook deliveries, or redeliver one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every event kept, oldest first")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    again = actions.add_parser("redeliver", help="post one event again to every receiver")
    again.add_argument("id", metavar="ID", help="an event id from `events list`")
    again.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = command_settings(f"events {args.action}")
    if args.action == "list":
        return _list(settings, bool(args.json))
    return _redeliver(settings, str(args.id), bool(args.json))


def _list(settings: Settings, as_json: bool) -> int:
    events = [
        e
        for folder in agent_folders(settings.state_dir)
        for e in AgentFolder.at(folder).outbox.read_events()
    ]
    events.sort(key=lambda e: (e.order, e.agent))
    if as_json:
        print(json.dumps([{**e.to_json(), "status": e.status} for e in events], indent=2))
        return 0
    if not events:
        print(f"no events in {settings.state_dir}/agents/*/outbox")
        return 0
    rows = [COLUMNS, *(_row(e) for e in events)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    for row in rows:
        print("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]))
    return 0


def _row(event: Event) -> tuple[str, ...]:
    last = event.attempts[-1] if event.attempts else None
    answer = "-" if last is None else str(last.code or last.error or "?")
    return (
        event.id,
        event.agent,
        event.kind,
        event.at,
        event.status,
        str(len(event.attempts)),
        answer[:60],
    )


def _redeliver(settings: Settings, event_id: str, as_json: bool) -> int:
    if not EVENT_ID.match(event_id):
        raise UsageError(f"{event_id!r} is not an event id (16 hex digits: `events list`)")
    config = DeliveryConfig.from_settings(settings)
    folder = next(
        (f for f in agent_folders(settings.state_dir) if AgentFolder.at(f).outbox.find(event_id)),
        None,
    )
    if folder is None:
        raise UsageError(f"no event {event_id!r} in {settings.state_dir}: `events list` shows them")
    if not config.urls:
        raise UsageError("no receiver configured: set GENESIS_FP16_EVENTS_URLS")
    event = AgentFolder.at(folder).outbox.update(
        event_id, lambda e: redeliver_marked(e, config.urls)
    )
    if event is None:
        raise UsageError(f"event {event_id!r} was pruned meanwhile")
    deliverer = Deliverer(lambda: config)
    taken = [url for url in config.urls if deliverer.attempt(folder, event, url, config)]
    done = len(taken) == len(config.urls)
    message = (
        f"event {event_id} ({event.agent} {event.kind}) delivered to {len(taken)} of "
        f"{len(config.urls)} receivers" + ("" if done else "; the daemon retries the rest")
    )
    answer = {
        "id": event_id,
        "delivered": [shown_url(url) for url in taken],  # as the event's file names them
        "receivers": [shown_url(url) for url in config.urls],
        "message": message,
    }
    print(json.dumps(answer, indent=2) if as_json else message)
    return 0 if done else 1
