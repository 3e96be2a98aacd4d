"""Step charts as inline SVG, in plain Python: the plots of ``registry report`` (no plotting library, no script).

A series is a list of (x, y) points of a quantity that holds until the next point (a best latency so far), drawn as
a staircase: one ``<polyline class="curve">`` per series, whose ``data-points`` attribute says how many data points
it holds. Every text that reaches the SVG is escaped here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")

# x in seconds: the unit shown for the span of the axis
_TIME_UNITS = ((120.0, "s", 1.0), (7200.0, "min", 60.0), (172800.0, "h", 3600.0), (math.inf, "days", 86400.0))


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]  # (x, y), sorted by x
    color: str = PALETTE[0]


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 times powers of ten within [lo, hi]; only the powers of ten when there are many."""
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                ticks.append(v)
    if len(ticks) > 8:
        ticks = [v for v in ticks if math.log10(v).is_integer()] or ticks
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        return f"{v:.0e}"
    return f"{v:,.4g}"


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit (name, seconds) an axis spanning ``span_s`` seconds is labelled in."""
    for limit, name, seconds in _TIME_UNITS:
        if span_s <= limit:
            return name, seconds
    return "s", 1.0


def step_chart(
    series: list[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_max: float | None = None,
    width: int = 640,
    height: int = 260,
    log_y: bool | None = None,
) -> str:
    """An SVG element: each series as a staircase from its first point to the right end of the axis, ``x_max``
    (default: the last x of all) plus a margin."""
    drawn = [s for s in series if s.points]
    left, right, top, bottom = 64, 16, 28, 44
    legend = len(drawn) > 1
    if legend:
        bottom += 16 * ((len(drawn) + 2) // 3)
    pw, ph = width - left - right, height - top - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{left}" y="18" class="title">{escape(title)}</text>',
    ]
    if not drawn:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle">no data</text></svg>')
        return "".join(out)
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points if y > 0 and math.isfinite(y)]
    x0 = min(0.0, min(xs))
    x1 = max(max(xs), x_max or 0.0)
    # a margin on the right, so that a curve whose last point is the axis's last still shows as a line
    x1 = x0 + 1.0 if x1 - x0 <= 0 else x1 + (x1 - x0) * 0.04
    y0, y1 = (min(ys), max(ys)) if ys else (1.0, 10.0)
    if log_y is None:
        log_y = y1 / y0 > 20
    if log_y:
        y0, y1 = y0 / 1.2, y1 * 1.2
        yt = log_ticks(y0, y1) or [y0, y1]

        def fy(v: float) -> float:
            return top + ph * (1 - (math.log10(v) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)))
    else:
        pad = (y1 - y0) * 0.08 or abs(y1) * 0.1 or 1.0
        y0, y1 = max(0.0, y0 - pad), y1 + pad
        yt = nice_ticks(y0, y1)
        yt = [v for v in yt if y0 <= v <= y1] or [y0]

        def fy(v: float) -> float:
            return top + ph * (1 - (v - y0) / (y1 - y0))

    def fx(v: float) -> float:
        return left + pw * (v - x0) / (x1 - x0)

    # axes, grid and ticks
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>')
    for v in yt:
        y = fy(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    unit, per = time_unit(x1 - x0) if x_label == "time" else ("", 1.0)
    for v in nice_ticks(x0 / per, x1 / per):
        x = fx(v * per)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">{_fmt(v)}</text>')
    xl = f"time ({unit})" if unit else x_label
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 30}" text-anchor="middle">{escape(xl)}</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 {top + ph / 2})">'
        f"{escape(y_label)}</text>"
    )
    # the curves
    for s in drawn:
        pts: list[tuple[float, float]] = []
        for x, y in s.points:
            if pts:
                pts.append((fx(x), pts[-1][1]))
            pts.append((fx(x), fy(y)))
        pts.append((fx(x1), pts[-1][1]))
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(
            f'<polyline class="curve" fill="none" stroke="{s.color}" stroke-width="2" '
            f'data-label="{escape(s.label)}" data-points="{len(s.points)}" points="{coords}"/>'
        )
        for x, y in s.points:
            out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="2.5" fill="{s.color}"/>')
    if legend:
        for i, s in enumerate(drawn):
            lx, ly = left + (i % 3) * (pw // 3), top + ph + 46 + 16 * (i // 3)
            out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{s.color}"/>')
            out.append(f'<text x="{lx + 14}" y="{ly}">{escape(s.label[:40])}</text>')
    out.append("</svg>")
    return "".join(out)
