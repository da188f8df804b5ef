"""Tiny inline-SVG charts for the HTML report: line and bar charts with axes, ticks, a legend and optional
reference lines. No JavaScript, no network. The input is the plot-data shape in docs/report-schema.md."""
from __future__ import annotations

import math
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
WIDTH, HEIGHT = 640, 300
MARGIN = {"left": 64, "right": 16, "top": 28, "bottom": 48}


def nice_ticks(low: float, high: float, count: int = 5, min_step: float = 0.0) -> list[float]:
    """Round tick values covering [low, high] with steps of 1, 2 or 5 x 10^k (at least min_step)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = max(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw), min_step)
    ticks = [math.floor(low / step) * step]
    while ticks[-1] < high - step * 1e-9:  # the last tick is at or above the highest value
        ticks.append(ticks[-1] + step)
    return [round(t, 12) for t in ticks]


def fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-3:
        return f"{value:.2g}"
    return f"{value:.4g}"


def _numbers(values) -> list[float | None]:
    out = []
    for v in values:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        out.append(float(v) if ok else None)  # null, "nan", "inf": a gap in the line
    return out


class _Frame:
    """Maps data coordinates to pixels inside the plot area (optionally log10 on y)."""

    def __init__(self, x_range: tuple[float, float], y_values: list[float], log_y: bool):
        self.log_y = log_y and all(v > 0 for v in y_values)
        ys = [math.log10(v) for v in y_values] if self.log_y else y_values
        low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
        if not self.log_y:
            low = min(low, 0.0) if low >= 0 and high > 0 and low < 0.5 * high else low
        self.y_ticks = nice_ticks(low, high, min_step=1.0 if self.log_y else 0.0)  # log: whole decades
        self.y_low, self.y_high = self.y_ticks[0], max(self.y_ticks[-1], self.y_ticks[0] + 1e-12)
        self.x_low, self.x_high = x_range if x_range[1] > x_range[0] else (x_range[0] - 0.5, x_range[0] + 0.5)
        self.left, self.top = MARGIN["left"], MARGIN["top"]
        self.width = WIDTH - MARGIN["left"] - MARGIN["right"]
        self.height = HEIGHT - MARGIN["top"] - MARGIN["bottom"]

    def px(self, x: float) -> float:
        return self.left + (x - self.x_low) / (self.x_high - self.x_low) * self.width

    def py(self, y: float) -> float:
        value = math.log10(y) if self.log_y else y
        return self.top + (1 - (value - self.y_low) / (self.y_high - self.y_low)) * self.height

    def y_tick_label(self, tick: float) -> str:
        return fmt(10 ** tick) if self.log_y else fmt(tick)

    def y_tick_value(self, tick: float) -> float:
        return 10 ** tick if self.log_y else tick


def _axes(frame: _Frame, x_ticks: list[tuple[float, str]], x_label: str, y_label: str) -> list[str]:
    out = []
    for tick in frame.y_ticks:
        y = frame.py(frame.y_tick_value(tick))
        out.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.width}" y2="{y:.1f}" '
                   f'stroke="#e5e7eb"/><text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{frame.y_tick_label(tick)}</text>')
    bottom = frame.top + frame.height
    for x, label in x_ticks:
        out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#6b7280"/>'
                   f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(label)}</text>')
    out.append(f'<line x1="{frame.left}" y1="{bottom}" x2="{frame.left + frame.width}" y2="{bottom}" '
               f'stroke="#6b7280"/><line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" y2="{bottom}" '
               f'stroke="#6b7280"/>')
    out.append(f'<text x="{frame.left + frame.width / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {frame.top + frame.height / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    return out


def _legend(names: list[str], frame: _Frame) -> list[str]:
    out, x = [], frame.left
    for i, name in enumerate(names):
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14}" y="17">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    return out


def _hlines(hlines: dict, frame: _Frame) -> list[str]:
    out = []
    for name, value in hlines.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or (frame.log_y and value <= 0):
            continue
        y = frame.py(value)
        if frame.top <= y <= frame.top + frame.height:
            out.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.width}" y2="{y:.1f}" '
                       f'stroke="#111827" stroke-dasharray="6 4"/><text x="{frame.left + frame.width - 4}" '
                       f'y="{y - 4:.1f}" text-anchor="end">{escape(str(name))} {fmt(value)}</text>')
    return out


def _wrap(title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
            f'height="{HEIGHT}" role="img" font-family="sans-serif" font-size="11" fill="#374151">'
            f'<title>{escape(title)}</title>' + "".join(body) + "</svg>")


def line_chart(x: list, series: dict[str, list], *, title: str = "", x_label: str = "", y_label: str = "",
               y_scale: str = "linear", hlines: dict | None = None) -> str:
    xs = _numbers(x) if all(isinstance(v, (int, float)) for v in x) else [float(i) for i in range(len(x))]
    labels = [str(v) for v in x]
    clean = {name: _numbers(values) for name, values in series.items()}
    ys = [v for values in clean.values() for v in values if v is not None]
    ys += [v for v in (hlines or {}).values() if isinstance(v, (int, float)) and math.isfinite(v)]
    valid_x = [v for v in xs if v is not None] or [0.0]
    frame = _Frame((min(valid_x), max(valid_x)), ys, y_scale == "log")
    tick_idx = sorted(set(round(i * (len(xs) - 1) / 8) for i in range(9))) if len(xs) > 12 else range(len(xs))
    body = _axes(frame, [(frame.px(xs[i]), labels[i]) for i in tick_idx if xs[i] is not None], x_label, y_label)
    for i, (name, values) in enumerate(clean.items()):
        colour = PALETTE[i % len(PALETTE)]
        for segment in _segments(xs, values, frame):
            if len(segment) == 1:  # an isolated point between gaps: a dot, since a line needs two
                body.append(f'<circle cx="{segment[0][0]:.1f}" cy="{segment[0][1]:.1f}" r="3" fill="{colour}"/>')
                continue
            points = " ".join(f"{px:.1f},{py:.1f}" for px, py in segment)
            body.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
    body += _hlines(hlines or {}, frame) + _legend(list(clean), frame)
    return _wrap(title, body)


def _segments(xs, values, frame: _Frame) -> list[list[tuple[float, float]]]:
    """Runs of valid points; a missing or non-finite value breaks the line instead of faking a value."""
    segments, current = [], []
    for x, y in zip(xs, values):
        if x is None or y is None or (frame.log_y and y <= 0):
            if current:
                segments.append(current)
            current = []
        else:
            current.append((frame.px(x), frame.py(y)))
    if current:
        segments.append(current)
    return segments


def bar_chart(x: list, series: dict[str, list], *, title: str = "", x_label: str = "", y_label: str = "",
              y_scale: str = "linear", hlines: dict | None = None) -> str:
    clean = {name: _numbers(values) for name, values in series.items()}
    ys = [v for values in clean.values() for v in values if v is not None] + [0.0] * (y_scale != "log")
    ys += [v for v in (hlines or {}).values() if isinstance(v, (int, float)) and math.isfinite(v)]
    frame = _Frame((-0.5, len(x) - 0.5), ys, y_scale == "log")
    group = frame.width / max(len(x), 1)
    bar = group * 0.8 / max(len(clean), 1)
    body = _axes(frame, [(frame.px(i), str(label)) for i, label in enumerate(x)], x_label, y_label)
    base = frame.py(frame.y_tick_value(frame.y_ticks[0])) if frame.log_y else frame.py(max(frame.y_low, 0.0))
    for s, (name, values) in enumerate(clean.items()):
        colour = PALETTE[s % len(PALETTE)]
        for i, value in enumerate(values[: len(x)]):
            if value is None or (frame.log_y and value <= 0):
                continue
            left = frame.px(i) - group * 0.4 + s * bar
            top = frame.py(value)
            body.append(f'<rect x="{left:.1f}" y="{min(top, base):.1f}" width="{bar:.1f}" '
                        f'height="{abs(base - top):.1f}" fill="{colour}"><title>{escape(str(x[i]))}: '
                        f'{fmt(value)}</title></rect>')
    body += _hlines(hlines or {}, frame) + _legend(list(clean), frame)
    return _wrap(title, body)


def chart(plot: dict) -> str:
    """Render one plot-data dict ({"kind": "line"|"bar", "x": [...], "series": {...}, ...})."""
    kind = plot.get("kind", "line")
    if kind not in ("line", "bar"):
        raise ValueError(f"unknown plot kind {kind!r}")
    x, series = plot.get("x"), plot.get("series")
    if not isinstance(x, list) or not isinstance(series, dict) or not series:
        raise ValueError("a plot needs a list 'x' and a non-empty object 'series'")
    draw = line_chart if kind == "line" else bar_chart
    return draw(x, series, title=str(plot.get("title", "")), x_label=str(plot.get("x_label", "")),
                y_label=str(plot.get("y_label", "")), y_scale=plot.get("y_scale", "linear"),
                hlines=plot.get("hlines") if isinstance(plot.get("hlines"), dict) else None)
