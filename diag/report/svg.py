"""Charts written as SVG text: lines with gaps, shaded bands, error bars, small multiples.

The report draws a few charts per case every night over hundreds of builds. These are lines, bands
and bars on a shared x axis, so they are written as SVG directly: a chart costs milliseconds, the
same data gives byte-identical text (no clock, no ids), and nothing but the standard library is needed.
Coordinates are in a fixed viewBox; the page's CSS scales the chart to the screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Callable, Optional, Sequence, TypeVar

# matplotlib's tab10: the colours readers of Python charts already know
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
WIDTH = 960
LEFT = 70  # the y axis: its tick labels and unit sit left of it
RIGHT = 620  # where the plot ends and the legend begins
PANEL = 130  # the least height of a panel's plot
LEGEND_ROW = 14
LEGEND_CHARS = 58  # a longer label is cut in the legend and kept whole in its tooltip
TITLE = 26
PANEL_TITLE = 22
PANEL_GAP = 14
X_AXIS = 78  # rotated tick labels and the axis label under the last panel
TICKS = 5

Values = Sequence[Optional[float]]
Point = TypeVar("Point")  # a point as numbers, or as text


@dataclass
class Series:
    """One line: ``ys`` has a value or None (a gap) per x position. ``low``/``high``, where given,
    bound each point: drawn as a shaded band, or with ``bars`` as an error bar on each point."""

    label: str
    ys: Values
    low: Optional[Values] = None
    high: Optional[Values] = None
    bars: bool = False


@dataclass(frozen=True)
class Mark:
    """A change point on a panel: a dashed line at ``x`` (an x position of the chart), ``label`` beside
    it at the top (a size: ``x1.05``), ``said`` in its tooltip."""

    x: float
    label: str
    said: str


@dataclass
class Panel:
    title: str
    series: list[Series]
    marks: list[Mark] = field(default_factory=list)


def nice_ticks(low: float, high: float, count: int = TICKS) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten apart) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"ticks for a range that is not finite: {low}, {high}")
    if high < low:
        low, high = high, low
    if high - low <= 1e-9 * max(abs(low), abs(high)):
        # equal, or apart by float rounding only (1.4999999999999998 and 1.5): one value, padded
        spread = abs(low) * 0.1 or 1.0
        low, high = low - spread, high + spread
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    # rounded to a few digits below the step (0.1 + 0.2 prints as 0.3), never to a fixed number of
    # decimals: at 1e-13 that would make every tick 0
    digits = 3 - math.floor(math.log10(step))
    return [round(i * step, digits) for i in range(first, last + 1)]


def number(value: float, ticks: Sequence[float]) -> str:
    """A tick's label, with as many decimals as the step between ticks needs (0.25 needs two)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else (abs(value) or 1.0)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    scaled = step * 10**decimals
    if abs(scaled - round(scaled)) > 1e-6:
        decimals += 1
    return f"{0.0 if abs(value) < step * 1e-6 else value:.{decimals}f}"


def _c(value: float) -> str:
    return f"{value:.1f}"


def _segments(points: list[Optional[Point]]) -> list[list[Point]]:
    """Runs of consecutive points; None splits them (a gap is never bridged)."""
    runs: list[list[Point]] = [[]]
    for point in points:
        if point is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(point)
    return [run for run in runs if run]


def _legend_label(label: str) -> str:
    return label if len(label) <= LEGEND_CHARS else label[: LEGEND_CHARS - 1] + "…"


def chart(
    title: str,
    panels: list[Panel],
    xs: Sequence[float],
    x_ticks: Sequence[tuple[float, str]],
    x_label: str,
    unit: str,
    markers: bool = True,
) -> Optional[str]:
    """Small multiples sharing the x axis (``xs``: the position of each value of a series), a panel
    per entry of ``panels`` with its own y axis in ``unit``, the legend beside each panel. None when
    no series has a value."""
    panels = [p for p in panels if any(y is not None for s in p.series for y in s.ys)]
    if not panels or not xs:
        return None
    x_low, x_high = min(xs), max(xs)
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1
    pad = (x_high - x_low) * 0.02
    x_low, x_high = x_low - pad, x_high + pad

    def x_at(x: float) -> float:
        return LEFT + (x - x_low) / (x_high - x_low) * (RIGHT - LEFT)

    # each x position's coordinate, as a number and as text: the same for every series of every panel
    at = [(px, _c(px)) for px in map(x_at, xs)]
    heights = [max(PANEL, LEGEND_ROW * len(p.series) + 8) for p in panels]
    total = TITLE + sum(PANEL_TITLE + h + PANEL_GAP for h in heights) + X_AXIS
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {total}" width="{WIDTH}" height="{total}"'
        ' font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="17" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    top = TITLE
    for panel, height in zip(panels, heights):
        top += PANEL_TITLE
        out.append(f'<text x="{LEFT}" y="{top - 6}" font-size="11.5">{escape(panel.title)}</text>')
        out += _panel(panel, top, height, at, x_at, x_ticks, unit, markers)
        top += height + PANEL_GAP
    bottom = top - PANEL_GAP
    for x, label in x_ticks:
        px = _c(x_at(x))
        out.append(
            f'<text x="{px}" y="{bottom + 14}" text-anchor="end" transform="rotate(-30 {px} {bottom + 14})">'
            f"{escape(label)}</text>"
        )
    out.append(
        f'<text x="{_c((LEFT + RIGHT) / 2)}" y="{total - 6}" text-anchor="middle">{escape(x_label)}</text></svg>'
    )
    return "\n".join(out)


def _panel(
    panel: Panel, top: float, height: float, at: list[tuple[float, str]], x_at, x_ticks, unit: str, markers: bool
) -> list[str]:
    values = [
        v
        for s in panel.series
        for column in (s.ys, s.low or (), s.high or ())
        for v in column
        if v is not None and math.isfinite(v)
    ]
    ticks = nice_ticks(min(values), max(values))
    y_low, y_high = ticks[0], ticks[-1]
    bottom = top + height

    span = y_high - y_low

    def y_at(y: float) -> float:
        return bottom - (y - y_low) / span * height

    def y_texts(ys: Values) -> list[Optional[str]]:
        """Each point of ``ys`` as the text "x,y": ``y_at`` written inline (no call per point), as
        ``_c`` writes it, in one pass."""
        return [None if y is None else f"{x},{bottom - (y - y_low) / span * height:.1f}" for (_, x), y in zip(at, ys)]

    out = [f'<g class="panel" data-title="{escape(panel.title)}">']
    for tick in ticks:
        py = _c(y_at(tick))
        out.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{py}" y2="{py}" stroke="#ddd" stroke-width="0.6"/>')
        out.append(f'<text x="{LEFT - 5}" y="{py}" dy="0.35em" text-anchor="end">{number(tick, ticks)}</text>')
    for x, _ in x_ticks:
        px = _c(x_at(x))
        out.append(f'<line x1="{px}" x2="{px}" y1="{_c(top)}" y2="{_c(bottom)}" stroke="#eee" stroke-width="0.6"/>')
    out.append(
        f'<path d="M{LEFT},{_c(top)} V{_c(bottom)} H{RIGHT}" fill="none" stroke="#333" stroke-width="0.8"/>'
        f'<text transform="translate(14 {_c((top + bottom) / 2)}) rotate(-90)" text-anchor="middle">'
        f"{escape(unit)}</text>"
    )
    for mark in panel.marks:
        px = _c(x_at(mark.x))
        out.append(
            f'<g class="change"><title>{escape(mark.said)}</title><line x1="{px}" x2="{px}" y1="{_c(top)}" '
            f'y2="{_c(bottom)}" stroke="#b00" stroke-width="1" stroke-dasharray="4 3"/><text x="{px}" '
            f'y="{_c(top + 10)}" dx="3" fill="#b00" font-size="10">{escape(mark.label)}</text></g>'
        )
    for index, series in enumerate(panel.series):
        colour = PALETTE[index % len(PALETTE)]
        out += _series(series, colour, at, y_at, y_texts, markers)
        ly = top + 4 + LEGEND_ROW * index
        out.append(
            f'<g class="legend"><title>{escape(series.label)}</title>'
            f'<line x1="{RIGHT + 12}" x2="{RIGHT + 30}" y1="{_c(ly + 4)}" y2="{_c(ly + 4)}" stroke="{colour}" '
            f'stroke-width="2"/><text x="{RIGHT + 36}" y="{_c(ly + 4)}" dy="0.35em">'
            f"{escape(_legend_label(series.label))}</text></g>"
        )
    out.append("</g>")
    return out


def _series(series: Series, colour: str, at: list[tuple[float, str]], y_at, y_texts, markers: bool) -> list[str]:
    """A series' line, markers and band or bars; ``at``: each x position's coordinate and its text;
    ``y_texts``: the points of a list of values as text."""
    out = [f'<g class="series" data-label="{escape(series.label)}">']
    if series.low is not None and series.high is not None:
        bounds = [
            (x, y_at(lo), y_at(hi)) if lo is not None and hi is not None else None
            for (x, _), lo, hi in zip(at, series.low, series.high)
        ]
        if series.bars:
            for point in bounds:
                if point is not None:
                    x, lo, hi = point
                    out.append(
                        f'<path class="bar" d="M{_c(x)},{_c(lo)} V{_c(hi)} M{_c(x - 3)},{_c(lo)} H{_c(x + 3)} '
                        f'M{_c(x - 3)},{_c(hi)} H{_c(x + 3)}" stroke="{colour}" fill="none"/>'
                    )
        else:
            runs = _segments([None if b is None else (b[0], b[1]) for b in bounds])
            highs = _segments([None if b is None else (b[0], b[2]) for b in bounds])
            for low_run, high_run in zip(runs, highs):
                if len(low_run) > 1:
                    edge = high_run + low_run[::-1]
                    out.append(
                        '<polygon class="band" points="'
                        + " ".join(f"{_c(x)},{_c(y)}" for x, y in edge)
                        + f'" fill="{colour}" fill-opacity="0.18"/>'
                    )
    for run in _segments(y_texts(series.ys)):
        if len(run) > 1:
            out.append(f'<path class="line" d="M{" L".join(run)}" fill="none" stroke="{colour}" stroke-width="1.4"/>')
        if markers or len(run) == 1:  # a point alone is drawn even where lines carry no markers
            out += [f'<circle cx="{x}" cy="{y}" r="2.2" fill="{colour}"/>' for x, y in (p.split(",") for p in run)]
    out.append("</g>")
    return out


def stacked_bars(
    title: str, bars: list[tuple[str, dict[str, float]]], unit: str, colour_of: Optional[Callable[[str], str]] = None
) -> str:
    """Horizontal bars, one per label, each split into segments by name, on one scale from 0; a legend
    of the names beside them. ``bars``: (label, name -> value); a name's order is the order it is
    first seen. ``colour_of`` gives a name its colour, the same in every chart that calls it with the
    same function; by default, a name's colour is its place among the names of this chart."""
    left = 190  # the bars' labels are case names, longer than an axis's numbers
    names = list(dict.fromkeys(name for _, parts in bars for name in parts))
    colour_of = colour_of or (lambda name: PALETTE[names.index(name) % len(PALETTE)])
    top = max((sum(v for v in parts.values() if v > 0) for _, parts in bars), default=0.0) or 1.0
    ticks = nice_ticks(0.0, top)
    scale = (RIGHT - left - 60) / max(ticks[-1], top)
    row, gap = 26, 10
    height = TITLE + len(bars) * (row + gap) + 30
    height = max(height, TITLE + len(names) * LEGEND_ROW + 10)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" class="stacked">',
        f'<text x="{left}" y="16" class="title">{escape(title)}</text>',
    ]
    for index, (label, parts) in enumerate(bars):
        y = TITLE + index * (row + gap)
        out.append(f'<text x="{left - 6}" y="{_c(y + row / 2 + 4)}" text-anchor="end">{escape(label[:30])}</text>')
        x = float(left)
        for name in names:
            value = parts.get(name, 0.0)
            if value <= 0:
                continue
            width = value * scale
            colour = colour_of(name)
            out.append(
                f'<rect x="{_c(x)}" y="{y}" width="{_c(width)}" height="{row}" fill="{colour}">'
                f"<title>{escape(label)}: {escape(name)} {value:.3f} {escape(unit)}</title></rect>"
            )
            x += width
        total = sum(v for v in parts.values() if v > 0)
        out.append(f'<text x="{_c(x + 4)}" y="{_c(y + row / 2 + 4)}">{total:.3f} {escape(unit)}</text>')
    axis = TITLE + len(bars) * (row + gap)
    for tick in ticks:
        out.append(
            f'<text x="{_c(left + tick * scale)}" y="{axis + 12}" text-anchor="middle">{number(tick, ticks)}</text>'
        )
    for index, name in enumerate(names):
        y = TITLE + index * LEGEND_ROW
        colour = colour_of(name)
        out.append(f'<rect x="{RIGHT + 10}" y="{y}" width="10" height="10" fill="{colour}" class="key"/>')
        out.append(f'<text x="{RIGHT + 26}" y="{y + 9}">{escape(_legend_label(name))}</text>')
    out.append("</svg>")
    return "\n".join(out)
