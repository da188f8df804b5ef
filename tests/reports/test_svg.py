"""The SVG charts: valid XML, points where the data says, gaps for missing values, reference lines drawn."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from reports import svg

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_line_chart_points_follow_the_data_and_nan_breaks_the_line():
    root = parse(svg.chart({"x": [0, 1, 2, 3, 4], "series": {"a": [0, 1, 2, "nan", 4]}}))
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 1  # the run [0,1,2]; 4 alone is a dot
    points = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    xs, ys = zip(*points)
    assert xs[0] < xs[1] < xs[2] and ys[0] > ys[1] > ys[2]  # y grows upwards on screen
    assert math.isclose(xs[1] - xs[0], xs[2] - xs[1]) and math.isclose(ys[0] - ys[1], ys[1] - ys[2])
    assert len(root.findall(f"{NS}circle")) == 1


def test_bar_chart_heights_are_proportional_and_hlines_drawn():
    root = parse(svg.chart({"kind": "bar", "x": ["a", "b"], "series": {"v": [10, 40]}, "hlines": {"peak": 50}}))
    bars = root.findall(f"{NS}rect")[:-1]  # the last rect is the legend swatch
    heights = [float(b.get("height")) for b in bars]
    assert math.isclose(heights[1], 4 * heights[0], rel_tol=1e-3)
    assert any(t.text == "peak 50" for t in root.iter(f"{NS}text"))


def test_log_scale_uses_decades():
    root = parse(svg.chart({"x": [0, 1, 2], "series": {"a": [1, 100, 1e4]}, "y_scale": "log"}))
    labels = [t.text for t in root.iter(f"{NS}text")]
    assert "1" in labels and "100" in labels and "1e+04" in labels


@pytest.mark.parametrize("plot, message", [
    ({"kind": "pie", "x": [1], "series": {"a": [1]}}, "unknown plot kind"),
    ({"x": "abc", "series": {"a": [1]}}, "needs a list"),
    ({"x": [1], "series": {}}, "non-empty"),
])
def test_bad_plot_data_raises_value_error(plot, message):
    with pytest.raises(ValueError, match=message):
        svg.chart(plot)


values = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-10**9, 10**9),
                   st.none(), st.just("nan"))


@settings(max_examples=60, deadline=None)
@given(st.lists(values, min_size=1, max_size=30), st.sampled_from(["line", "bar"]),
       st.sampled_from(["linear", "log"]))
def test_any_series_renders_valid_svg_with_finite_coordinates(ys, kind, scale):
    text = svg.chart({"kind": kind, "x": list(range(len(ys))), "series": {"s": ys}, "y_scale": scale,
                      "hlines": {"h": 1.0}})
    root = parse(text)
    for element in root.iter():
        for attr in ("x", "y", "x1", "y1", "x2", "y2", "width", "height", "cx", "cy"):
            if element.get(attr) is not None:
                assert math.isfinite(float(element.get(attr))), (attr, element.get(attr))
