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
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 540, 180
LEFT, RIGHT, TOP, BOTTOM = 66, 52, 14, 36
SIZE = 6.5  # a mark's half-width, px

# kind -> (fill colour, shape, legend word). Colours no line, band or text uses.
KINDS: dict[str, tuple[str, str, str]] = {
    "promoted": ("#1a7f37", "up", "promoted"),
    "rejected": ("#e8590c", "cross", "rejected"),
    "rolled_back": ("#cf222e", "down", "rolled back"),
    "demoted": ("#8250df", "diamond", "demoted"),
    "held": ("#57606a", "circle", "held"),
    "regression": ("#a40e26", "circle", "regression"),
    "repair": ("#0550ae", "square", "repaired"),
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
    across; ``log_y``: the left axis in powers of two; ``x_time``: x is Unix time."""

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


def draw_chart(chart: Chart) -> str:
    """The chart as one ``<svg>`` element (a string of markup, its texts escaped)."""
    plot = _Plot(chart)
    e = html.escape
    parts = [
        f'<svg class="chart" role="img" aria-label="{e(chart.title)}" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{e(chart.title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{plot.w:.0f}" height="{plot.h:.0f}" '
        'fill="#ffffff" stroke="#d0d7de"/>',
    ]
    if plot.empty:
        parts.append(_text(LEFT + plot.w / 2, TOP + plot.h / 2, chart.empty, "middle", "note"))
    else:
        parts += _axes(plot, chart)
        parts += _bars(plot, chart)
        parts += _band(plot, chart)
        parts += _rule(plot, chart)
        parts += _line(plot, chart)
        parts += [_mark(plot, mark) for mark in chart.marks if plot.has_x(mark.x)]
    if plot.dropped:
        note = f"{plot.dropped} value(s) not drawn: not a finite number"
        parts.append(_text(WIDTH - 4, HEIGHT - 4, note, "end", "note"))
    parts.append("</svg>")
    return "".join(parts)


def legend(kinds: Iterable[str]) -> str:
    """A line of text naming each kind's mark, by its shape's glyph (no coloured fill:
    a mark's colour is found on the charts only)."""
    glyph = {"up": "▲", "down": "▼", "diamond": "◆", "cross": "✕", "circle": "●", "square": "■"}
    words = [f"{glyph[KINDS[k][1]]} {KINDS[k][2]}" for k in kinds if k in KINDS]
    return html.escape("   ".join(words))


class _Plot:
    """The chart's scales: its values' ranges mapped onto the plot's pixels."""

    def __init__(self, chart: Chart) -> None:
        self.w, self.h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
        self.log = chart.log_y
        xs, ys, self.dropped = _ranges(chart)
        self.empty = not xs
        self.x0, self.x1 = _span(xs, 60.0 if chart.x_time else 1.0)
        logged = [self._ly(y) for y in ys]
        self.y0, self.y1 = _span([y for y in logged if y is not None])
        bars = [v for _, v in chart.bars if _finite(v)]
        self.bar_max = max([1.0, *bars])  # type: ignore[type-var]

    def _ly(self, y: float) -> float | None:
        if not self.log:
            return y
        return math.log2(y) if y > 0 else None

    def has_x(self, x: float) -> bool:
        return _finite(x)

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * self.w

    def py(self, y: float) -> float | None:
        """The pixel row of ``y`` (None: not drawable: not finite, or <= 0 on a log axis)."""
        ly = self._ly(y) if _finite(y) else None
        if ly is None:
            return None
        return TOP + self.h - (ly - self.y0) / (self.y1 - self.y0) * self.h

    def tick(self, ly: float) -> str:
        value = 2.0**ly if self.log else ly
        return f"{value:.3g}"


def _ranges(chart: Chart) -> tuple[list[float], list[float], int]:
    """The finite x and y values of everything drawn, and how many values are not."""
    xs: list[float] = []
    ys: list[float] = []
    dropped = 0
    for x, y in chart.line:
        dropped += _take(x, y, xs, ys, chart.log_y)
    for x, low, high in chart.band:
        dropped += _take(x, low, xs, ys, chart.log_y) + _take(x, high, xs, ys, chart.log_y)
    for x, value in chart.bars:
        dropped += _take(x, value, xs, [], False)
    for mark in chart.marks:
        if not _finite(mark.x):
            dropped += 1
            continue
        xs.append(mark.x)
        if mark.y is not None:
            dropped += _take(mark.x, mark.y, [], ys, chart.log_y)
    if chart.rule is not None and _finite(chart.rule):
        ys.append(chart.rule)
    return xs, ys, dropped


def _take(x: float, y: float | None, xs: list[float], ys: list[float], log: bool) -> int:
    """Keep a point's finite values; 1 when one of them is not drawn (None counts not:
    a value not reported is not a bad one)."""
    if not _finite(x):
        return 1
    xs.append(x)
    if y is None:
        return 0
    if not _finite(y) or (log and y <= 0):
        return 1
    ys.append(y)
    return 0


def _span(values: Sequence[float], alone: float | None = None) -> tuple[float, float]:
    """A value range with room around it; a single value gets a range of its own
    (``alone`` each side: a minute of time, a run; else 5% of it, at least 0.5)."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if high - low < 1e-12 * max(1.0, abs(high)):
        pad = max(abs(high) * 0.05, 0.5) if alone is None else alone
        return low - pad, high + pad
    pad = (high - low) * 0.08
    return low - pad, high + pad


def _axes(plot: _Plot, chart: Chart) -> list[str]:
    """Three values up the left axis, the first and last x below, the axes' names."""
    parts = []
    for fraction in (0.0, 0.5, 1.0):
        ly = plot.y0 + (plot.y1 - plot.y0) * (0.08 + 0.84 * fraction)
        y = TOP + plot.h - (ly - plot.y0) / (plot.y1 - plot.y0) * plot.h
        parts.append(_text(LEFT - 4, y + 4, plot.tick(ly), "end", "tick"))
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot.w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#eaeef2"/>'
        )
    first, last = plot.x0 + (plot.x1 - plot.x0) * 0.08, plot.x1 - (plot.x1 - plot.x0) * 0.08
    for x, anchor in ((first, "start"), (last, "end")):
        label = _clock(x, plot.x1 - plot.x0) if chart.x_time else f"run {x:.0f}"
        parts.append(_text(plot.px(x), TOP + plot.h + 14, label, anchor, "tick"))
    parts.append(_text(LEFT, HEIGHT - 6, chart.y_label, "start", "axis"))
    if chart.bars_label:
        parts.append(
            _text(WIDTH - 4, TOP + 10, f"{chart.bars_label} (max {plot.bar_max:g})", "end", "axis")
        )
    return parts


def _bars(plot: _Plot, chart: Chart) -> list[str]:
    width = max(2.0, min(14.0, plot.w / max(1, len(chart.bars)) * 0.6))
    parts = []
    for x, value in chart.bars:
        if not (_finite(x) and _finite(value)) or value <= 0:  # type: ignore[operator]
            continue
        height = value / plot.bar_max * plot.h * 0.9  # type: ignore[operator]
        parts.append(
            f'<rect class="bar" x="{plot.px(x) - width / 2:.1f}" y="{TOP + plot.h - height:.1f}"'
            f' width="{width:.1f}" height="{height:.1f}" fill="{BARS}">'
            f"<title>{html.escape(f'{chart.bars_label} {value:g}')}</title></rect>"
        )
    return parts


def _band(plot: _Plot, chart: Chart) -> list[str]:
    """The band as one polygon per run of points with both bounds drawable."""
    parts, run = [], []
    for x, low, high in [*sorted(chart.band, key=lambda b: b[0]), (math.nan, None, None)]:
        low_y = None if low is None else plot.py(low)
        high_y = None if high is None else plot.py(high)
        if _finite(x) and low_y is not None and high_y is not None:
            run.append((plot.px(x), low_y, high_y))
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
    y = None if chart.rule is None else plot.py(chart.rule)
    if y is None:
        return []
    return [
        f'<line class="rule" x1="{LEFT}" x2="{LEFT + plot.w:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
        f'stroke="{RULE}" stroke-dasharray="5 4"/>',
        _text(LEFT + plot.w - 4, y - 4, chart.rule_label, "end", "axis"),
    ]


def _line(plot: _Plot, chart: Chart) -> list[str]:
    """The line as one polyline per run of drawable points, dots on each point."""
    parts: list[str] = []
    run: list[tuple[float, float]] = []
    points = [*sorted(chart.line, key=lambda p: p[0]), (math.nan, None)]
    for x, y in points:
        py = None if y is None else plot.py(y)
        if _finite(x) and py is not None:
            if chart.step and run:
                run.append((plot.px(x), run[-1][1]))
            run.append((plot.px(x), py))
            continue
        if run:
            joined = " ".join(f"{px:.1f},{py_:.1f}" for px, py_ in run)
            parts.append(
                f'<polyline class="line" points="{joined}" fill="none" stroke="{LINE}" '
                'stroke-width="1.6"/>'
            )
            parts += [
                f'<circle class="point" cx="{px:.1f}" cy="{py_:.1f}" r="2" fill="{LINE}"/>'
                for px, py_ in run[:: 2 if chart.step else 1]
            ]
        run = []
    return parts


def _mark(plot: _Plot, mark: Mark) -> str:
    colour, shape, _ = KINDS.get(mark.kind, (INK, "circle", mark.kind))
    x = plot.px(mark.x)
    py = None if mark.y is None else plot.py(mark.y)
    y = TOP + SIZE + 1 if py is None else py
    kind = html.escape(mark.kind if mark.kind in KINDS else "other")
    return (
        f'<g class="mark {kind}"><title>{html.escape(mark.label)}</title>'
        f"{_shape(shape, x, y, colour)}</g>"
    )


def _shape(shape: str, x: float, y: float, colour: str) -> str:
    s = SIZE
    fill = f'fill="{colour}" stroke="#ffffff" stroke-width="1"'
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{s - 1:.1f}" {fill}/>'
    if shape == "square":
        side = f'width="{2 * s - 2:.1f}" height="{2 * s - 2:.1f}"'
        return f'<rect x="{x - s + 1:.1f}" y="{y - s + 1:.1f}" {side} {fill}/>'
    corners = {
        "up": [(0, -s - 1), (s + 1, s), (-s - 1, s)],
        "down": [(0, s + 1), (s + 1, -s), (-s - 1, -s)],
        "diamond": [(0, -s - 1), (s + 1, 0), (0, s + 1), (-s - 1, 0)],
        "cross": [
            (-s, -s + 2.5),
            (-s + 2.5, -s),
            (0, -2.5),
            (s - 2.5, -s),
            (s, -s + 2.5),
            (2.5, 0),
            (s, s - 2.5),
            (s - 2.5, s),
            (0, 2.5),
            (-s + 2.5, s),
            (-s, s - 2.5),
            (-2.5, 0),
        ],
    }[shape]
    points = " ".join(f"{x + dx:.1f},{y + dy:.1f}" for dx, dy in corners)
    return f'<polygon points="{points}" {fill}/>'


def _text(x: float, y: float, text: str, anchor: str, kind: str) -> str:
    return (
        f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
        f'font-size="11" fill="{INK}">{html.escape(text)}</text>'
    )


def _finite(value: float | None) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _clock(when: float, span: float) -> str:
    """A time on the x axis, UTC: to the second when the chart spans less than a day."""
    return time.strftime("%H:%M:%S" if span < 86400 else "%m-%d %H:%M", time.gmtime(when))
