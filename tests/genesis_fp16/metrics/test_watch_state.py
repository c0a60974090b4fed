"""The watch's state read from a pointer: watched, or not and why."""

from __future__ import annotations

from genesis_fp16.metrics.watch_state import live_figures, watch_state
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


def test_the_one_line_view_shows_the_primary_columns_figures() -> None:
    """A served entry's live figures, of either shape (one column beside the rest, as
    written before the map, or the map), flatten to the primary column's figures with
    its name and the report's own, and the state reads its segments and self-test."""
    column = {"records": 40, "difference": 0.03, "lower": 0.012, "upper": 0.048,
              "margin": 0.01, "alpha": 0.05, "regression": False,
              "segments": [{"name": "qa", "records": 40, "difference": 0.03, "lower": 0.01,
                            "upper": 0.05, "alpha": 0.05, "evidence": 1.0,
                            "records_needed": None, "regression": False}]}  # fmt: skip
    report = {"against": "m0", "records": 40, "new_records": 4, "alpha": 0.05,
              "regression": False, "updated_at": "2026-01-01T00:00:00Z"}  # fmt: skip
    for live in ({**report, "metric": "brier", **column},
                 {**report, "primary": "brier", "metrics": {"brier": column}}):  # fmt: skip
        pointer = _pointer("2026-01-01T00:00:00Z")
        served = {**pointer.served.to_json(), "id": "m1", "live": live}
        read = ServedPointer.from_json({**pointer.to_json(), "served": served})
        flat = live_figures(read.served.live)
        assert (flat["metric"], flat["lower"], flat["new_records"]) == ("brier", 0.012, 4)
        assert next(iter(flat)) == "metric" and "metrics" not in flat
        state = watch_state(read, 60, 1767225600.0)
        assert state["scored_at"] == 1767225600.0 and state["segments"][0]["name"] == "qa"
    assert live_figures(None) == {}
