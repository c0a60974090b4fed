"""The records' one codec (msgspec underneath): what it writes, what it reads back, and
each refusal in one line naming the record and the place."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pytest

from genesis_fp16_infrastructure.contract.reports import TrainResult
from genesis_fp16_infrastructure.record_codec import (
    JSON,
    LOCAL,
    OMIT_NONE,
    ROUND,
    Record,
    ReportError,
    mirror_of,
)
from genesis_fp16_infrastructure.training.reports import Calibration, Measured


@dataclass(frozen=True)
class Point(Record):
    label: Literal["a", "b"]
    at: float = field(metadata={ROUND: 2})
    by: str | None = field(default=None, metadata={JSON: "from", OMIT_NONE: True})


@dataclass(frozen=True)
class Track(Record):
    name: str
    points: tuple[Point, ...]
    scores: Mapping[str, float]
    pairs: tuple[tuple[int, float], ...] = ()
    best: float | None = None
    where: Path | None = None
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name == "":
            raise ValueError("name is empty")


TRACK = Track(
    "t",
    (Point("a", 1.23456, by="me"), Point("b", math.nan)),
    {"x": math.inf, "y": 0.5},
    ((1, math.nan),),
    None,
    Path("/runs/t"),
    {"list": [1, 2], "nan": math.nan},
)


def test_a_record_writes_plain_json_and_reads_back_the_same() -> None:
    """JSON names, declared rounding, None left out where declared, NaN and infinities as
    null at any depth, a Path as text; read back, null is NaN for a float and None for
    an optional, and the agent's Any keeps its lists."""
    out = json.loads(json.dumps(TRACK.to_json(), allow_nan=False))
    assert out["points"] == [{"label": "a", "at": 1.23, "from": "me"}, {"label": "b", "at": None}]
    assert out["scores"] == {"x": None, "y": 0.5} and out["pairs"] == [[1, None]]
    assert out["best"] is None and out["where"] == "/runs/t" and out["notes"]["nan"] is None
    back = Track.from_json(out)
    assert back.points[0] == Point("a", 1.23, "me") and math.isnan(back.points[1].at)
    assert math.isnan(back.scores["x"]) and math.isnan(back.pairs[0][1]) and back.best is None
    assert back.where == Path("/runs/t") and back.notes["list"] == [1, 2]
    assert type(back.points[0].label) is str and type(back.scores["y"]) is float


def test_unknown_keys_are_ignored_and_defaults_fill_the_rest() -> None:
    """A file written by a newer version: its unknown keys are left out, a field it does
    not hold takes the record's own default."""
    back = Track.from_json({"name": "t", "points": [], "scores": {}, "future": {"x": 1}})
    assert (back.pairs, back.best, back.where, back.notes) == ((), None, None, {})


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"name": "t", "scores": {}}, "Track: 'points' missing"),
        ({"name": "t", "points": [{"label": "a"}], "scores": {}},
         "Track.points[0]: 'at' missing"),
        ({"name": "t", "points": [{"label": "c", "at": 1}], "scores": {}},
         "Track.points[0].label: one of 'a', 'b' expected, got 'c'"),
        ({"name": "t", "points": [{"label": "a", "at": 1, "from": 3}], "scores": {}},
         "Track.points[0].from: str | None expected, got 3"),
        ({"name": "t", "points": [], "scores": {"x": 1.0, "y": "far"}},
         "Track.scores['y']: float expected, got str 'far'"),
        ({"name": "t", "points": [], "scores": {}, "pairs": [[1, 2.0, 3]]},
         "Track.pairs[0]: 2 items expected, got 3"),
        ({"name": 7, "points": [], "scores": {}}, "Track.name: str expected, got 7"),
        ({"name": "t", "points": [{"label": "a", "at": True}], "scores": {}},
         "Track.points[0].at: float expected, got True"),
        ({"name": "t", "points": [], "scores": {}, "where": 5},
         "Track.where: str expected, got 5"),
        ({"name": "", "points": [], "scores": {}}, "Track: name is empty"),
        ([1, 2], "Track: an object expected, got list [1, 2]"),
    ],
    ids=["missing", "nested_missing", "literal", "optional", "map_value", "shape", "str",
         "bool_float", "path", "post_init", "not_object"],
)  # fmt: skip
def test_bad_json_is_refused_in_one_line_naming_the_place(data: Any, line: str) -> None:
    """The record, the place inside it (a mapping's key included), what it should hold
    and what it held: a ReportError, one line."""
    with pytest.raises(ReportError) as raised:
        Track.from_json(data)
    assert str(raised.value) == line


def test_a_record_that_reads_itself_does_so_inside_another() -> None:
    """A calibration inside a result is read by its own from_json (the cache version
    checked, its cached flag kept: a fresh one stays fresh, one without the flag, the
    cache file's, reads as cached); its refusal names the place from the result down."""
    calibration = Calibration("bf16", "measured", (Measured("bf16", "eager", 1, 1, 1, 3),),
                              {}, {}, 0.5, measured_at=1.0)  # fmt: skip
    result = TrainResult(
        agent="a", precision_requested="auto", precision_used="bf16", precision_reason="r",
        device="cpu", steps=0, skipped_steps=0, overflow_rate=0.0, loss_scale=1.0,
        final_train_loss=0.1, eval={}, samples_per_second=0.0, wall_seconds=0.1,
        checkpoint=None, quarantined=0, precision_calibration=calibration,
    )  # fmt: skip
    out = result.to_json()
    back = TrainResult.from_json(out).precision_calibration
    assert back == calibration
    kept = out["precision_calibration"]
    assert Calibration.from_json(calibration.cache_json()) == replace(calibration, cached=True)
    with pytest.raises(ReportError) as raised:
        TrainResult.from_json({**out, "precision_calibration": {**kept, "version": 1}})
    assert str(raised.value) == "TrainResult.precision_calibration: version 1, expected 4"
    rows = [{**kept["rows"][0], "precision": "fp8"}]
    with pytest.raises(ReportError) as raised:
        TrainResult.from_json({**out, "precision_calibration": {**kept, "rows": rows}})
    assert str(raised.value).startswith("TrainResult.precision_calibration.rows[0].precision: one")


@dataclass(frozen=True)
class Own:
    """A dataclass with its own JSON, not a Record (as the served pointer)."""

    value: int

    def to_json(self) -> dict[str, Any]:
        return {"v": self.value}

    @classmethod
    def from_json(cls, data: Any) -> Own:
        if not isinstance(data, dict) or not isinstance(data.get("v"), int):
            raise ValueError("no v")
        return cls(data["v"])


@dataclass(frozen=True)
class Holder(Record):
    VERSION = 3
    local: str | None = field(default=None, metadata={LOCAL: True})
    own: Own | None = None


@dataclass(frozen=True)
class Outer(Record):
    holder: Holder


def test_local_fields_stay_out_and_a_dataclass_with_its_own_json_reads_itself() -> None:
    """A LOCAL field is left out of the JSON and read as its default; a dataclass with its
    own to_json/from_json is written and read by them, its refusal placed; a versioned
    record inside another has its version checked."""
    out = Outer(Holder("here", Own(7))).to_json()
    assert out == {"holder": {"version": 3, "own": {"v": 7}}}
    assert Outer.from_json(out) == Outer(Holder(None, Own(7)))
    with pytest.raises(ReportError) as raised:
        Outer.from_json({"holder": {"version": 3, "own": {"v": "x"}}})
    assert str(raised.value) == "Outer.holder.own: no v"
    with pytest.raises(ReportError) as raised:
        Outer.from_json({"holder": {"version": 2, "own": None}})
    assert str(raised.value) == "Outer.holder: version 2, expected 3"


def test_each_record_type_has_one_mirror() -> None:
    """The msgspec Struct a record reads through is made once per type, with the JSON
    names the fields declare."""
    assert mirror_of(Point) is mirror_of(Point)
    assert mirror_of(Point).__struct_encode_fields__ == ("label", "at", "from")
