"""The watch's state read from a pointer entry: watched, or not and why."""

from __future__ import annotations

from genesis_fp16.metrics.watch_state import watch_state


def test_watch_state_says_why_a_model_is_not_watched() -> None:
    """Each reason: no predecessor, no time known, idle past the limit; else watched."""
    at = "2026-01-01T00:00:00Z"
    now = 1767225600.0
    assert watch_state(at, None, True, now + 10, 60)["state"] == "watching"
    assert watch_state(at, None, False, now, 60)["reason"] == "no predecessor to watch against"
    assert "not known" in watch_state("garbage", None, True, now, 60)["reason"]
    idle = watch_state(at, None, True, now + 7200, 60)
    assert idle["state"] == "not_watching" and idle["since"] == now
    assert idle["reason"] == "no new labelled record for 2.0 h (the limit: 0.0166667 h)"
