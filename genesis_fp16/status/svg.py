"""Charts drawn on the server as inline SVG: no script, no external resource, every text
escaped. One :class:`Chart` says what to draw (a line, a band around it, bars on a
second axis, a horizontal rule, marks of events); :func:`draw_chart` returns the markup::

    chart = Chart("served model's auc", "auc", line=((1.0, 0.71), (2.0, 0.74)),
                  marks=(Mark(2.0, 0.74, "promoted", "promoted c2"),))
    svg = draw_chart(chart)  # '<svg class="chart" ...>...</svg>'

A value that is None or not a finite number is not drawn, and the chart says how many
were left out. A chart with nothing to draw is its frame and a line saying so. Each
mark is a ``<g class="mark KIND">`` with a ``<title>`` (a browser shows it on hover, no
script needed), filled with its kind's colour from :data:`KINDS`, which nothing else on
the page uses: the tests find the marks by their colour in a screenshot.
"""

from __future__ import annotations

import html
import itertools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter

from genesis_fp16_infrastructure.api import Outcome

WIDTH, HEIGHT = 540, 180
LEFT, RIGHT, TOP, BOTTOM = 66, 52, 14, 36
SIZE = 6.5  # a mark's half-width, px
_X = itemgetter(0)  # a point's x: the order a line and a band are drawn in

# kind -> (fill colour, shape). Colours no line, band or text uses. A verdict's kind is
# its outcome; the legend's word is the kind's, spaced (_legend_word).
KINDS: dict[str, tuple[str, str]] = {
    Outcome.PROMOTED: ("#1a7f37", "up"),
    Outcome.REJECTED: ("#e8590c", "cross"),
    Outcome.ROLLED_BACK: ("#cf222e", "down"),
    "demoted": ("#8250df", "diamond"),
    Outcome.HELD: ("#57606a", "circle"),
    "regression": ("#a40e26", "circle"),
    "repair": ("#0550ae", "square"),
}
LINE, BAND, BARS, RULE, INK = "#0969da", "#cfe3fa", "#c3c9cf", "#bc4c00", "#24292f"


@dataclass(frozen=True)
class Mark:
    """An event on a chart: where (``y`` None: along the top edge), its kind (a key of
    :data:`KINDS`) and the line its ``<title>`` says."""

    x: float
    y: float | None
    kind: str
    label: str


@dataclass(frozen=True)
class Chart:
    """What one chart draws. ``line``: (x, y) points, joined in x order (``step``: as a
    staircase, a value holding until the next); ``band``: (x, low, high) around it;
    ``bars``: (x, value) on a second axis from zero at the right; ``rule``: a level
    across; ``log_y``: the left axis in powers of two; ``x_time``: x is Unix time;
    ``y_bounds``: the values y can take (an AUC: 0 to 1), the left axis kept inside them;
    ``kinds``: the kinds of mark it can hold, which its :func:`legend` names."""

    title: str
    y_label: str
    line: tuple[tuple[float, float | None], ...] = ()
    band: tuple[tuple[float, float | None, float | None], ...] = ()
    bars: tuple[tuple[float, float | None], ...] = ()
    bars_label: str = ""
    marks: tuple[Mark, ...] = ()
    rule: float | None = None
    rule_label: str = ""
    step: bool = False
    log_y: bool = False
    x_time: bool = True
    empty: str = "nothing recorded yet"
    y_bounds: tuple[float | None, float | None] = (None, None)
    kinds: tuple[str, ...] = ()


def draw_chart(chart: Chart) -> str:
    """The chart as one ``<svg>`` element (a string of markup, its texts escaped)."""
    drawn, dropped = _drawable(chart)
    plot = _Plot(drawn)
    e = html.escape
    parts = [
        f'<svg class="chart" role="img" aria-label="{e(chart.title)}" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{e(chart.title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" '
        'fill="#ffffff" stroke="#d0d7de"/>',
    ]
    if plot.empty:
        parts.append(_text(LEFT + PLOT_W / 2, TOP + PLOT_H / 2, chart.empty, "middle", "note"))
    else:
        parts += _axes(plot, drawn)
        parts += _bars(plot, drawn)
        parts += _band(plot, drawn)
        parts += _rule(plot, drawn)
        parts += _line(plot, drawn)
        parts += [_mark(plot, mark) for mark in drawn.marks]
    if dropped:
        note = f"{dropped} value(s) not drawn: not a finite number"
        parts.append(_text(WIDTH - 4, HEIGHT - 4, note, "end", "note"))
    parts.append("</svg>")
    return "".join(parts)


def legend(kinds: Iterable[str]) -> str:
    """A line of text naming each kind's mark, by its shape's glyph (no coloured fill:
    a mark's colour is found on the charts only)."""
    glyph = {"up": "▲", "down": "▼", "diamond": "◆", "cross": "✕", "circle": "●", "square": "■"}
    words = [f"{glyph[KINDS[k][1]]} {_legend_word(k)}" for k in kinds if k in KINDS]
    return html.escape("   ".join(words))


def _legend_word(kind: str) -> str:
    return "repaired" if kind == "repair" else str(kind).replace("_", " ")


PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


def _drawable(chart: Chart) -> tuple[Chart, int]:
    """The chart with only what can be drawn, its y values in the axis' units (log2 on
    a log axis), and how many values were left out. A point without a finite x goes
    whole; a y that is not finite (or not > 0 on a log axis) becomes None. None in the
    chart's own values counts not: a value not reported is not a bad one."""
    dropped = 0

    def y_of(value: float | None) -> float | None:
        nonlocal dropped
        if value is None:
            return None
        if _finite(value) and (not chart.log_y or value > 0):
            return math.log2(value) if chart.log_y else value
        dropped += 1
        return None

    def x_ok(x: float) -> bool:
        nonlocal dropped
        ok = _finite(x)
        dropped += not ok
        return ok

    line = tuple(sorted(((x, y_of(y)) for x, y in chart.line if x_ok(x)), key=_X))
    band = tuple(sorted(((x, y_of(lo), y_of(hi)) for x, lo, hi in chart.band if x_ok(x)), key=_X))
    bars = tuple((x, v if _finite(v) else None) for x, v in chart.bars if x_ok(x))
    dropped += sum(1 for _, v in chart.bars if v is not None and not _finite(v))
    marks = tuple(Mark(m.x, y_of(m.y), m.kind, m.label) for m in chart.marks if x_ok(m.x))
    rule = y_of(chart.rule)
    return replace(chart, line=line, band=band, bars=bars, marks=marks, rule=rule), dropped


class _Plot:
    """The chart's scales: the drawable values' ranges mapped onto the plot's pixels."""

    def __init__(self, chart: Chart) -> None:
        self.log = chart.log_y
        xs = [x for x, _ in chart.line] + [x for x, _, _ in chart.band]
        xs += [x for x, _ in chart.bars] + [m.x for m in chart.marks]
        ys = [y for _, y in chart.line] + [y for _, lo, hi in chart.band for y in (lo, hi)]
        ys += [m.y for m in chart.marks] + [chart.rule]
        self.empty = not xs
        self.first_x, self.last_x = (min(xs), max(xs)) if xs else (0.0, 0.0)
        self.x0, self.x1 = _span(xs, 60.0 if chart.x_time else 1.0)
        drawn = [y for y in ys if y is not None]
        self.y0, self.y1 = _inside(_span(drawn), drawn, chart.y_bounds)
        self.bar_max = max([1.0, *(v for _, v in chart.bars if v is not None)])
        self._xk = PLOT_W / (self.x1 - self.x0)
        self._yk = PLOT_H / (self.y1 - self.y0)

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) * self._xk

    def py(self, y: float) -> float:
        """The pixel row of ``y`` (in the axis' units)."""
        return TOP + PLOT_H - (y - self.y0) * self._yk

    def tick(self, y: float) -> str:
        value = 2.0**y if self.log else y
        return f"{value:.3g}"


def _span(values: Sequence[float], alone: float | None = None) -> tuple[float, float]:
    """A value range with room around it; a single value gets a range of its own
    (``alone`` each side: a minute of time, a run; else 5% of it, 0.5 around a zero):
    one AUC of 0.83 spans 0.79 to 0.87, not 0.33 to 1.33."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if high - low < 1e-12 * max(1.0, abs(high)):
        pad = (abs(high) * 0.05 or 0.5) if alone is None else alone
        return low - pad, high + pad
    pad = (high - low) * 0.08
    return low - pad, high + pad


def _inside(
    span: tuple[float, float], values: Sequence[float], bounds: tuple[float | None, float | None]
) -> tuple[float, float]:
    """``span`` moved inside ``bounds`` (its width kept where there is room): one AUC of
    0.99 spans 0.9 to 1, not 0.95 to 1.04. A bound some value is past is not kept."""
    low, high = span
    floor, ceiling = bounds
    if ceiling is not None and high > ceiling and all(v <= ceiling for v in values):
        low, high = low - (high - ceiling), ceiling
    if floor is not None and low < floor and all(v >= floor for v in values):
        cap = ceiling if ceiling is not None and high <= ceiling else math.inf
        low, high = floor, min(high + (floor - low), cap)
    return (low, high) if high > low else span


def _axes(plot: _Plot, chart: Chart) -> list[str]:
    """Three values up the left axis, the first and last x below, the axes' names."""
    parts = []
    for fraction in (0.0, 0.5, 1.0):
        value = plot.y0 + (plot.y1 - plot.y0) * (0.08 + 0.84 * fraction)
        y = plot.py(value)
        parts.append(_text(LEFT - 4, y + 4, plot.tick(value), "end", "tick"))
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
        )
    # The first and last x drawn, under their points: one point is one label (a lone
    # run read "run 0 ... run 2", the room around it).
    ends = [(plot.first_x, "start"), (plot.last_x, "end")]
    if plot.first_x == plot.last_x:
        ends = [(plot.first_x, "middle")]
    for x, anchor in ends:
        label = _clock(x, plot.x1 - plot.x0) if chart.x_time else f"run {x:.0f}"
        parts.append(_text(plot.px(x), TOP + PLOT_H + 14, label, anchor, "tick"))
    parts.append(_text(LEFT, HEIGHT - 6, chart.y_label, "start", "axis"))
    if chart.bars_label:
        label = f"{chart.bars_label} (max {plot.bar_max:g})"
        parts.append(_text(WIDTH - 4, TOP + 10, label, "end", "axis"))
    return parts


def _bars(plot: _Plot, chart: Chart) -> list[str]:
    width = max(2.0, min(14.0, PLOT_W / max(1, len(chart.bars)) * 0.6))
    parts = []
    for x, value in chart.bars:
        if value is None or value <= 0:
            continue
        height = value / plot.bar_max * PLOT_H * 0.9
        parts.append(
            f'<rect class="bar" x="{plot.px(x) - width / 2:.1f}" y="{TOP + PLOT_H - height:.1f}"'
            f' width="{width:.1f}" height="{height:.1f}" fill="{BARS}">'
            f"<title>{html.escape(f'{chart.bars_label} {value:g}')}</title></rect>"
        )
    return parts


def _band(plot: _Plot, chart: Chart) -> list[str]:
    """The band as one polygon per run of points with both bounds drawable."""
    parts: list[str] = []
    run: list[tuple[float, float, float]] = []
    for x, low, high in [*chart.band, (math.nan, None, None)]:
        if low is not None and high is not None:
            run.append((plot.px(x), plot.py(low), plot.py(high)))
            continue
        if run:
            if len(run) == 1:  # one point: a short bar
                px, ly, hy = run[0]
                run = [(px - 3, ly, hy), (px + 3, ly, hy)]
            upper = " ".join(f"{px:.1f},{hy:.1f}" for px, _, hy in run)
            lower = " ".join(f"{px:.1f},{ly:.1f}" for px, ly, _ in reversed(run))
            parts.append(f'<polygon class="band" points="{upper} {lower}" fill="{BAND}"/>')
        run = []
    return parts


def _rule(plot: _Plot, chart: Chart) -> list[str]:
    if chart.rule is None:
        return []
    y = plot.py(chart.rule)
    return [
        f'<line class="rule" x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{y:.1f}" y2="{y:.1f}" '
        f'stroke="{RULE}" stroke-dasharray="5 4"/>',
        _text(LEFT + PLOT_W - 4, y - 4, chart.rule_label, "end", "axis"),
    ]


def _line(plot: _Plot, chart: Chart) -> list[str]:
    """The line as one polyline per run of drawable points, dots on each point."""
    parts: list[str] = []
    run: list[tuple[float, float]] = []
    for x, y in [*chart.line, (math.nan, None)]:
        if y is not None:
            px, py = plot.px(x), plot.py(y)
            if chart.step and run:
                run.append((px, run[-1][1]))
            run.append((px, py))
            continue
        if run:
            joined = " ".join(f"{px:.1f},{py:.1f}" for px, py in run)
            parts.append(
                f'<polyline class="line" points="{joined}" fill="none" stroke="{LINE}" '
                'stroke-width="1.6"/>'
            )
            parts += [
                f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="2" fill="{LINE}"/>'
                for px, py in run[:: 2 if chart.step else 1]
            ]
        run = []
    return parts


def _mark(plot: _Plot, mark: Mark) -> str:
    colour, shape = KINDS.get(mark.kind, (INK, "circle"))
    x = plot.px(mark.x)
    y = TOP + SIZE + 1 if mark.y is None else plot.py(mark.y)
    kind = mark.kind if mark.kind in KINDS else "other"
    fill = f'fill="{colour}" stroke="#ffffff" stroke-width="1"'
    return (
        f'<g class="mark {kind}"><title>{html.escape(mark.label)}</title>'
        f'<path d="M{x:.1f},{y:.1f}{_SHAPES[shape]}" {fill}/></g>'
    )


def _outline(corners: list[tuple[float, float]]) -> str:
    """A closed shape's path from its first corner (where ``M`` puts the pen), each
    next corner relative to the one before: the same string for every mark."""
    pairs = itertools.pairwise(corners)
    steps = [f"l{bx - ax:.1f},{by - ay:.1f}" for (ax, ay), (bx, by) in pairs]
    return "".join(steps) + "z"


def _shapes(s: float) -> dict[str, str]:
    """Each shape as the path that draws it around its mark's point, from that point
    (the pen moves to the first corner first)."""
    corners = {
        "up": [(0, -s - 1), (s + 1, s), (-s - 1, s)],
        "down": [(0, s + 1), (s + 1, -s), (-s - 1, -s)],
        "diamond": [(0, -s - 1), (s + 1, 0), (0, s + 1), (-s - 1, 0)],
        "square": [(-s + 1, -s + 1), (s - 1, -s + 1), (s - 1, s - 1), (-s + 1, s - 1)],
        "cross": [
            (-s, -s + 2.5), (-s + 2.5, -s), (0, -2.5), (s - 2.5, -s), (s, -s + 2.5), (2.5, 0),
            (s, s - 2.5), (s - 2.5, s), (0, 2.5), (-s + 2.5, s), (-s, s - 2.5), (-2.5, 0),
        ],
    }  # fmt: skip
    paths = {name: f"m{c[0][0]:.1f},{c[0][1]:.1f}{_outline(c)}" for name, c in corners.items()}
    r = s - 1  # a circle: two arcs through its left and right points
    paths["circle"] = (
        f"m{-r:.1f},0a{r:.1f},{r:.1f} 0 1,0 {2 * r:.1f},0a{r:.1f},{r:.1f} 0 1,0 {-2 * r:.1f},0z"
    )
    return paths


_SHAPES = _shapes(SIZE)


def _text(x: float, y: float, text: str, anchor: str, kind: str) -> str:
    return (
        f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
        f'font-size="11" fill="{INK}">{html.escape(text)}</text>'
    )


def _finite(value: float | None) -> bool:
    """A float that is a number (inf - inf and NaN - NaN are NaN), or an int; not None,
    not a bool (its class is bool): the check runs for every value of every chart."""
    cls = value.__class__
    return (cls is float and value - value == 0.0) or cls is int  # type: ignore[operator]


def _clock(when: float, span: float) -> str:
    """A time on the x axis, UTC: to the second when the chart spans less than a day."""
    try:
        return time.strftime("%H:%M:%S" if span < 86400 else "%m-%d %H:%M", time.gmtime(when))
    except (OverflowError, OSError, ValueError):  # no clock shows it: the page still draws
        return "?"
