"""The status page's charts as SVG: well-formed, escaped, self-contained; an empty chart,
a single point, values that are not finite; and the three charts built from an agent's
history, each event at its place."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from genesis_fp16.status.charts import quality_chart, scale_chart, watch_chart
from genesis_fp16.status.history import AgentHistory, Transition
from genesis_fp16.status.svg import BOTTOM, HEIGHT, KINDS, LEFT, TOP, WIDTH, Chart, Mark, draw_chart
from genesis_fp16_infrastructure.agent_folder.run_records import (
    GateMark,
    LastRun,
    LiveColumn,
    LiveMark,
    RunEntry,
)

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '</title><script>alert(1)</script><image href="http://x/y.png"/> & "q"'


def _tree(svg: str) -> ET.Element:
    """The chart parsed as XML: it fails on markup that is not well-formed."""
    return ET.fromstring(svg)


def _marks(root: ET.Element) -> dict[str, list[tuple[str, ET.Element]]]:
    """Each mark's kind -> [(its title, its shape)]."""
    found: dict[str, list[tuple[str, ET.Element]]] = {}
    for group in root.iter(f"{NS}g"):
        kind = group.get("class", "").removeprefix("mark ")
        title, shape = group.find(f"{NS}title"), list(group)[1]
        found.setdefault(kind, []).append((title.text or "" if title is not None else "", shape))
    return found


def _tags(root: ET.Element) -> set[str]:
    return {element.tag.removeprefix(NS) for element in root.iter()}


def _centre_y(shape: ET.Element) -> float:
    """A mark's point: where its path's pen starts (``M x,y``, then relative moves)."""
    start = shape.get("d", "").removeprefix("M").split("m")[0]
    return float(start.split(",")[1])


def test_hostile_text_is_text_and_nothing_is_fetched_or_run() -> None:
    """A hostile title, axis name and mark label stay text: no script, image or link
    element, no attribute that loads anything, and the text reads back as it was."""
    chart = Chart(
        HOSTILE, HOSTILE, line=((1.0, 2.0), (2.0, 3.0)), marks=(Mark(2.0, 3.0, "x", HOSTILE),)
    )
    svg = draw_chart(chart)
    root = _tree(svg)
    assert _tags(root) <= {
        "svg",
        "title",
        "rect",
        "line",
        "text",
        "polyline",
        "circle",
        "g",
        "path",
    }
    assert not any(a in e.attrib for e in root.iter() for a in ("href", "src", "onload"))
    assert root.find(f"{NS}title").text == HOSTILE  # type: ignore[union-attr]
    assert _marks(root)["other"][0][0] == HOSTILE  # an unknown kind: drawn, its own class


def test_an_empty_chart_is_its_frame_and_a_line_saying_so() -> None:
    """Nothing to draw: the frame and the chart's empty line, no line and no mark."""
    root = _tree(draw_chart(Chart("t", "y", empty="no run recorded yet")))
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert texts == ["no run recorded yet"]
    assert "polyline" not in _tags(root) and "g" not in _tags(root)


def test_a_single_point_is_drawn_inside_the_plot() -> None:
    """One point (no range in x or y) is a dot inside the frame, and its mark too."""
    root = _tree(
        draw_chart(Chart("t", "y", line=((5.0, 0.7),), marks=(Mark(5.0, 0.7, "promoted", "p"),)))
    )
    (dot,) = [c for c in root.iter(f"{NS}circle") if c.get("class") == "point"]
    x, y = float(dot.get("cx", "nan")), float(dot.get("cy", "nan"))
    assert LEFT < x < WIDTH and TOP < y < HEIGHT
    (mark,) = _marks(root)["promoted"]
    assert abs(_centre_y(mark[1]) - y) < 1.0


def test_values_that_are_not_finite_are_left_out_with_a_note() -> None:
    """NaN and inf values are not drawn (the line breaks around them) and the chart says
    how many; a value not reported (None) is no bad value; a zero on a log axis is one."""
    line = ((1.0, 1.0), (2.0, math.nan), (3.0, 2.0), (4.0, math.inf), (5.0, None), (6.0, 4.0))
    root = _tree(draw_chart(Chart("t", "y", line=line)))
    notes = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "note"]
    assert notes == ["2 value(s) not drawn: not a finite number"]
    assert len([c for c in root.iter(f"{NS}circle") if c.get("class") == "point"]) == 3
    assert len(list(root.iter(f"{NS}polyline"))) == 3  # broken at each missing value
    logged = _tree(draw_chart(Chart("t", "y", line=((1.0, 0.0), (2.0, 8.0)), log_y=True)))
    assert "1 value(s)" in "".join(t.text or "" for t in logged.iter(f"{NS}text"))


def _gate(outcome: str, scores: tuple[float, float | None], *ids: str) -> GateMark:
    """A verdict on one column, ``auc``: the candidate's and the served model's scores."""
    candidate, served = ({} if s is None else {"auc": s} for s in scores)
    return GateMark(outcome, "current", "auc", candidate, served, *ids)


def _run(at: float, **fields: object) -> RunEntry:
    record = LastRun("success", "fp32", "auto", at, 1.0, "why", "daemon", 10)
    return RunEntry(record, **fields)  # type: ignore[arg-type]


def _history() -> AgentHistory:
    """A first model, a better one promoted, a rejected one, an operator's rollback."""
    runs = (
        _run(100.0, gate=_gate("promoted", (0.70, None), "c1"), loss_scale=65536.0),
        _run(
            200.0,
            gate=_gate("promoted", (0.80, 0.70), "c2", "c1"),
            skipped_steps=4,
        ),
        _run(
            300.0,
            gate=_gate("rejected", (0.60, 0.80), "c3", "c2"),
            demotions=("fp16 to bf16 at step 12: overflow_rate",),
        ),
    )
    journal = (
        Transition(99.5, "first", "c1", score=0.70),
        Transition(199.5, "gate", "c2", score=0.80),
        Transition(400.0, "rollback", "c1", dropped="c2", reason="operator", score=0.70),
    )
    return AgentHistory(runs=runs, transitions=journal, metric="auc")


def test_the_quality_chart_marks_each_event_at_its_score() -> None:
    """Two promotions (from the gate, not again from the journal), the rejected candidate
    at its own score below the line, the rollback at the score of the model served after
    it; the staircase ends at that score."""
    chart = quality_chart(_history())
    kinds = [(m.kind, m.x, m.y) for m in chart.marks]
    assert kinds == [
        ("promoted", 100.0, 0.70),
        ("promoted", 200.0, 0.80),
        ("rejected", 300.0, 0.60),
        ("rolled_back", 400.0, 0.70),
    ]
    assert sorted(chart.line)[-1] == (400.0, 0.70) and (300.0, 0.80) in chart.line
    root = _tree(draw_chart(chart))
    marks = _marks(root)
    assert "rolled back to c1 from c2: operator" in marks["rolled_back"][0][0]
    assert marks["rejected"][0][0] == "c3 auc 0.6 vs c2 (0.8) on set current; why"  # the reason
    # Higher AUC is higher on the chart: the rejected candidate is drawn below the rest.
    assert _centre_y(marks["rejected"][0][1]) > max(_centre_y(s) for _, s in marks["promoted"])


def test_a_promotion_on_other_records_is_drawn_against_its_predecessor_on_them() -> None:
    """A first model scored on every current record (log_loss 0.175), then a candidate
    promoted on the held-out records (0.2179 against the served model's 0.2184 there):
    the line breaks instead of rising from 0.175, and goes on from the predecessor's
    score on the same records; the mark names the set."""
    first = GateMark("promoted", "current", "log_loss", {"log_loss": 0.175}, {}, "c1")
    second = GateMark(
        "promoted", "held_out", "log_loss", {"log_loss": 0.2179}, {"log_loss": 0.2184}, "c2", "c1"
    )
    history = AgentHistory(
        runs=(_run(100.0, gate=first), _run(200.0, gate=second)), metric="log_loss"
    )
    chart = quality_chart(history)
    assert chart.line == ((100.0, 0.175), (200.0, None), (200.0, 0.2184), (200.0, 0.2179))
    assert chart.marks[-1].label.startswith("c2 log_loss 0.2179 vs c1 (0.2184) on set held_out")
    root = _tree(draw_chart(chart))
    assert len(list(root.iter(f"{NS}polyline"))) == 2  # never joined across the sets


def test_the_scale_chart_marks_a_demotion_above_its_run() -> None:
    """Loss scale per run on a log axis, skipped steps as bars, the demotion marked."""
    chart = scale_chart(_history())
    assert [(m.kind, m.x) for m in chart.marks] == [("demoted", 3.0)]
    root = _tree(draw_chart(chart))
    assert len([r for r in root.iter(f"{NS}rect") if r.get("class") == "bar"]) == 1
    (demoted,) = _marks(root)["demoted"]
    assert "overflow_rate" in demoted[0] and demoted[1].get("fill") == KINDS["demoted"][0]


def test_the_watch_chart_draws_the_bounds_margin_and_a_rollback() -> None:
    """The difference with its bounds as a band, the margin as a rule, the rollback
    marked; the pointer's figures now are one more point."""
    live = LiveMark(120, False, False, "loss", {"loss": LiveColumn(0.02, -0.01, 0.05, 0.03)})
    worse = LiveMark(300, True, True, "loss", {"loss": LiveColumn(0.09, 0.05, 0.13, 0.03, True)})
    runs = (_run(10.0, live=live), _run(20.0, live=worse))
    history = AgentHistory(runs=runs, live_now=live, live_at=30.0)
    chart = watch_chart(history, {"state": "watching", "since": 30.0, "scored_at": 30.0})
    assert [x for x, _ in chart.line] == [10.0, 20.0, 30.0] and chart.rule == 0.03
    root = _tree(draw_chart(chart))
    assert len(list(root.iter(f"{NS}polygon"))) == 1  # the band: three points in one
    assert [t for t, _ in _marks(root)["rolled_back"]] == ["rolled back on loss: 0.09"]
    assert any(e.get("class") == "rule" for e in root.iter(f"{NS}line"))


def _ticks(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text") if t.get("class") == "tick"]


def test_one_run_draws_axes_around_its_own_values() -> None:
    """One promoted AUC of 0.83 and one run's loss scale: the y axis stays near 0.83 (it
    went to 1.33) and the run axis says "run 1" once (it said "run 0" and "run 2")."""
    one = AgentHistory(
        runs=(_run(100.0, gate=_gate("promoted", (0.83, None), "c1")),),
        metric="auc",
    )
    quality = _ticks(_tree(draw_chart(quality_chart(one))))
    values = [float(t) for t in quality if not t[0].isalpha() and ":" not in t]
    assert len(values) == 3 and all(0.75 < v < 0.9 for v in values), quality
    runs = [t for t in _ticks(_tree(draw_chart(scale_chart(one)))) if t.startswith("run")]
    assert runs == ["run 1"]


def test_two_runs_label_the_first_and_last_run() -> None:
    """Two runs: the run axis reads "run 1" and "run 2", under their points."""
    two = AgentHistory(runs=(_run(100.0, loss_scale=1024.0), _run(200.0, loss_scale=2048.0)))
    root = _tree(draw_chart(scale_chart(two)))
    assert [t for t in _ticks(root) if t.startswith("run")] == ["run 1", "run 2"]
    points = sorted(float(c.get("cx", "nan")) for c in root.iter(f"{NS}circle"))
    labels = [
        float(t.get("x", "nan")) for t in root.iter(f"{NS}text") if (t.text or "").startswith("run")
    ]
    assert labels == points


@pytest.mark.parametrize("auc", [0.97, 0.99, 1.0, 0.0])
def test_one_auc_near_a_bound_keeps_its_axis_between_0_and_1(auc: float) -> None:
    """One promoted AUC of 0.97, 0.99, 1.0 (its axis read 1.01 to 1.04 at the top) or 0.0
    (-0.5 at the bottom): every tick of the AUC axis is between 0 and 1, the point drawn
    inside the plot."""
    one = AgentHistory(
        runs=(_run(100.0, gate=_gate("promoted", (auc, None), "c1")),),
        metric="auc",
    )
    root = _tree(draw_chart(quality_chart(one)))
    values = [float(t) for t in _ticks(root) if not t[0].isalpha() and ":" not in t]
    assert len(values) == 3 and all(0.0 <= v <= 1.0 for v in values), values
    (point,) = [float(c.get("cy", "nan")) for c in root.iter(f"{NS}circle")]
    assert TOP <= point <= HEIGHT - BOTTOM, point
