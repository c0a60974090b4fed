"""The watch's state read from a pointer: watched, or not and why."""

from __future__ import annotations

from genesis_fp16.metrics.watch_state import watch_state
from genesis_fp16_infrastructure.api import ServedPointer


def _pointer(served_at: str, predecessor: bool = True) -> ServedPointer:
    """A pointer serving a model since ``served_at``, with a predecessor or none."""
    served = {"checkpoint": "m.pt", "served_at": served_at}
    history = [{"checkpoint": "m0.pt"}] if predecessor else []
    return ServedPointer.from_json({"version": 1, "served": served, "history": history})


def test_watch_state_says_why_a_model_is_not_watched() -> None:
    """Each reason: no predecessor, no time known, idle past the limit; else watched."""
    at = "2026-01-01T00:00:00Z"
    now = 1767225600.0
    assert watch_state(_pointer(at), 60, now + 10)["state"] == "watching"
    alone = watch_state(_pointer(at, predecessor=False), 60, now)
    assert alone["reason"] == "no predecessor to watch against"
    assert "not known" in watch_state(_pointer("garbage"), 60, now)["reason"]
    idle = watch_state(_pointer(at), 60, now + 7200)
    assert idle["state"] == "not_watching" and idle["since"] == now
    assert idle["reason"] == "no new labelled record for 2.0 h (the limit: 0.0166667 h)"
