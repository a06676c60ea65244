"""The report's charts, written as SVG: parsed back as XML and checked for what they claim to draw."""

import re
import xml.etree.ElementTree as ET

import pytest

from diag.report import svg
from diag.report.svg import Panel, Series

NS = {"s": "http://www.w3.org/2000/svg"}


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def _points(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+),(-?[\d.]+)", d)]


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (0.0, 10.0, [0, 2, 4, 6, 8, 10]),
        (0.13, 0.47, [0.1, 0.2, 0.3, 0.4, 0.5]),
        (3.0, 3.0, [2.6, 2.8, 3.0, 3.2, 3.4]),
        (0.0, 0.0, [-1.0, -0.5, 0.0, 0.5, 1.0]),
        (-5.0, 5.0, [-6, -4, -2, 0, 2, 4, 6]),
        (120.0, 880.0, [0, 200, 400, 600, 800, 1000]),
    ],
)
def test_ticks_are_round_and_cover_the_range(low, high, expected):
    ticks = svg.nice_ticks(low, high)
    assert ticks == pytest.approx(expected)
    assert ticks[0] <= min(low, high) and ticks[-1] >= max(low, high)


@pytest.mark.parametrize("scale", [1e-300, 1e-20, 1e-13, 1e-9, 1.0, 1e6, 1e15, 1e300])
@pytest.mark.parametrize("spread", [0.0, 1e-3, 1.0])
def test_ticks_stay_apart_at_any_magnitude(scale, spread):
    """Ticks are rounded relative to their step: tiny values (a guard check of 1e-13 s, say) once
    rounded to twelve decimals all became 0, and the chart divided by a zero span."""
    low, high = scale, scale * (1 + spread)
    ticks = svg.nice_ticks(low, high)
    assert len(set(ticks)) == len(ticks) >= 2 and ticks[0] <= low and ticks[-1] >= high
    drawn = svg.chart("t", [Panel("p", [Series("a", [low, high, low])])], [0.0, 1.0, 2.0], [], "x", "u")
    _parse(drawn)


def test_values_apart_by_float_rounding_only_are_one_value():
    """Medians of 1.5 computed two ways (1.4999999999999998, 1.5000000000000002) drew ticks closer
    than floats can tell apart, two of them equal."""
    ticks = svg.nice_ticks(1.4999999999999998, 1.5000000000000002)
    assert len(set(ticks)) == len(ticks) >= 2 and ticks[0] < 1.49 and ticks[-1] > 1.51
    svg.chart("t", [Panel("p", [Series("a", [1.4999999999999998, 1.5000000000000002])])], [0.0, 1.0], [], "x", "u")


def test_tick_labels_carry_the_decimals_their_step_needs():
    assert [svg.number(t, [0, 0.25]) for t in (0, 0.25, 0.5)] == ["0.00", "0.25", "0.50"]
    assert [svg.number(t, [0, 200]) for t in (0, 200, 1000)] == ["0", "200", "1000"]
    assert svg.number(1e-17, [0, 0.1]) == "0.0"


def test_a_missing_value_is_a_gap_never_a_bridge_and_a_lone_point_is_drawn():
    ys = [1.0, 2.0, None, 4.0, None, 6.0, 7.0, 8.0]
    text = svg.chart("t", [Panel("p", [Series("a", ys)])], list(range(8)), [(0, "x0")], "build", "ms", markers=False)
    root = _parse(text)
    lines = root.findall(".//s:path[@class='line']", NS)
    assert [len(_points(p.get("d"))) for p in lines] == [2, 3]  # 1-2, then 6-7-8; 4 stands alone
    lone = root.findall(".//s:g[@class='series']/s:circle", NS)
    assert len(lone) == 1
    # x grows with the index; a larger value is drawn higher (a smaller y)
    first, second = lines
    xs = [x for x, _ in _points(first.get("d")) + _points(second.get("d"))]
    assert xs == sorted(xs) and float(lone[0].get("cx")) > xs[1]
    (_, y1), (_, y2) = _points(first.get("d"))
    assert y2 < y1


def test_bands_and_error_bars_enclose_their_line():
    ys, low, high = [2.0, 3.0, 4.0], [1.0, 2.5, 3.0], [2.5, 4.0, 6.0]
    band = _parse(svg.chart("t", [Panel("p", [Series("a", ys, low, high)])], [0, 1, 2], [], "x", "u"))
    polygon = band.find(".//s:polygon[@class='band']", NS)
    edge = [tuple(map(float, pair.split(","))) for pair in polygon.get("points").split()]
    assert len(edge) == 6
    line = _points(band.find(".//s:path[@class='line']", NS).get("d"))
    for (x, y), upper, lower in zip(line, edge[:3], reversed(edge[3:])):
        assert upper[0] == lower[0] == x and upper[1] <= y <= lower[1]  # SVG's y grows downwards
    bars = _parse(svg.chart("t", [Panel("p", [Series("a", ys, low, high, bars=True)])], [0, 1, 2], [], "x", "u"))
    assert len(bars.findall(".//s:path[@class='bar']", NS)) == 3
    assert bars.find(".//s:polygon", NS) is None


def test_hostile_labels_are_text_and_the_same_data_draws_the_same_bytes():
    hostile = '</text><script>alert(1)</script> & "quoted" $x^2$'
    panels = [Panel(hostile, [Series(hostile, [1.0, 2.0]), Series("b" * 200, [2.0, 1.0])])]
    text = svg.chart(hostile, panels, [0, 1], [(0, hostile), (1, "2.13.0")], hostile, hostile)
    root = _parse(text)  # well-formed: nothing escaped the text nodes
    assert root.find(".//s:script", NS) is None and "<script>" not in text
    assert hostile in "".join(root.itertext())
    legend = [t.text for t in root.findall(".//s:g[@class='legend']/s:text", NS)]
    assert legend[1].endswith("…") and len(legend[1]) == svg.LEGEND_CHARS  # cut in the legend ...
    assert root.findall(".//s:g[@class='legend']/s:title", NS)[1].text == "b" * 200  # ... whole on hover
    assert svg.chart(hostile, panels, [0, 1], [(0, hostile), (1, "2.13.0")], hostile, hostile) == text


def test_a_chart_without_values_is_not_drawn_and_panels_share_the_x_axis():
    assert svg.chart("t", [Panel("p", [Series("a", [None, None])])], [0, 1], [], "x", "u") is None
    two = _parse(
        svg.chart(
            "t",
            [Panel("fast", [Series("a", [0.1, 0.2])]), Panel("slow", [Series("b", [100.0, 300.0])])],
            [0, 1],
            [(0, "a"), (1, "b")],
            "x",
            "u",
        )
    )
    panels = two.findall(".//s:g[@class='panel']", NS)
    assert [p.get("data-title") for p in panels] == ["fast", "slow"]
    fast, slow = (_points(p.find(".//s:path[@class='line']", NS).get("d")) for p in panels)
    assert [x for x, _ in fast] == [x for x, _ in slow]  # one x axis for all panels
    assert fast[0][1] < slow[0][1]  # the second panel is drawn below the first, each with its own y axis
    labels = [t.text for t in panels[1].findall("s:text", NS)]
    assert "300" in labels and "0.2" not in labels
