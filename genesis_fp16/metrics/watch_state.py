"""Whether the served model is watched, read from its pointer entry alone.

Kept apart from :mod:`genesis_fp16.metrics.served_metrics` (which needs prometheus_client)
so that the read-only commands (``model list``, ``status``) and the page can say it
without loading the metrics library.
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from genesis_fp16_infrastructure.api import LiveReport, ServedPointer


def watch_state(pointer: ServedPointer, idle_seconds: float, now: float) -> dict[str, Any]:
    """Whether the pointer's served model (its ``served`` entry: when it was served and
    its live figures, as read, checked here) is watched: ``watching``
    while labelled records reached its watch within ``idle_seconds`` (the setting
    GENESIS_FP16_LIVE_WATCH_IDLE_SECONDS, one day by default), else ``not_watching`` with
    why: silence is never a passing watch, and without a predecessor (the pointer's
    history) there is nothing to watch against. ``since``: the last time the watch
    scored new records, or the model was served if later (Unix seconds; None: unknown);
    ``scored_at``: when the watch last scored records (None: none scored yet);
    ``segments`` and ``self_test``: the primary column's segments and the A/A self-test.

    >>> served = {"checkpoint": "m.pt", "served_at": "2026-01-01T00:00:00Z"}
    >>> pointer = ServedPointer.from_json({"version": 1, "served": served, "history": [{}]})
    >>> watch_state(pointer, 3600, 1767229200.0)["state"]
    'watching'
    >>> watch_state(pointer, 3600, 1767240000.0)["reason"]
    'no new labelled record for 4.0 h (the limit: 1 h)'
    """
    live = pointer.served.live  # its figures as read: either shape, a map by column
    scored = None if live is None else stamp_seconds(live.updated_at)
    known = [t for t in (stamp_seconds(pointer.served.served_at), scored) if t is not None]
    since = max(known) if known else None
    segments = None if live is None else live.watched.segments
    test = None if live is None else live.self_test
    state: dict[str, Any] = {
        "state": "watching", "since": since, "scored_at": scored, "limit": idle_seconds,
        "segments": None if segments is None else [s.to_json() for s in segments],
        "self_test": None if test is None else test.to_json(),
    }  # fmt: skip
    if not pointer.history:
        return {**state, "state": "not_watching", "reason": "no predecessor to watch against"}
    if since is None:
        return {**state, "state": "not_watching", "reason": "when it was served is not known"}
    idle = now - since
    if idle > idle_seconds:
        hours = f"{idle / 3600:.1f} h (the limit: {idle_seconds / 3600:g} h)"
        return {**state, "state": "not_watching", "reason": f"no new labelled record for {hours}"}
    return {**state, "reason": None}


def live_figures(report: LiveReport | None) -> dict[str, Any]:
    """A served entry's live figures in one level, for a one-line view: ``metric`` (the
    primary column's name), that column's figures, then the report's; empty: none."""
    if report is None:
        return {}
    figures = report.figures_json()
    figures.pop("metrics", None)
    return {"metric": report.primary, **report.watched.to_json(), **figures}


def stamp_seconds(stamp: Any) -> float | None:
    """Unix seconds of one of the pointer's UTC stamps (``2026-01-01T00:00:00Z``)."""
    try:
        return float(calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None
