"""Times as the status says them: a UTC clock, "3 min ago", "2 h 5 min"."""

from __future__ import annotations

import time


def clock(at: float) -> str:
    """``at`` (Unix time) as ``2026-11-25 06:00:00 UTC``; a time no clock can show (a
    hand-edited 1e308, NaN) as ``not a time (1e+308)``, never an error on the page."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    except (OverflowError, OSError, ValueError):
        return f"not a time ({at!r:.24})"


def when(at: float, now: float) -> str:
    """``at`` on the clock, and how far from ``now``: ``... (3 min ago)``, ``(in 42 s)``."""
    delta = at - now
    relative = f"in {span(delta)}" if delta >= 0 else f"{span(-delta)} ago"
    return f"{clock(at)} ({relative})"


def span(seconds: float | None) -> str:
    """A duration as a reader says it: ``42 s``, ``3 min``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "unknown"
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 2 * 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
