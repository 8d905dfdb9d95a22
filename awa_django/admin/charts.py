"""Line charts as inline SVG, drawn on the server from the per-minute rollups: no chart
library, nothing fetched from the internet (decision 021). Pure: points in, markup out.

Every text that reaches the markup (queue names, titles) is escaped by `format_html`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 640, 180
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 48, 12, 14, 24
# One colour per queue, in the order of the queue names; the legend repeats it.
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777")


@dataclass(frozen=True, slots=True)
class Series:
    """One queue's values, one per minute of the chart's range (None: no rollup)."""

    name: str
    values: Sequence[float | None]
    colour: str


def colours(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per queue name (sorted, then the palette round)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(names))}


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is >= value (1 for 0)."""
    if not value > 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value * 0.9999)


def line_chart(
    chart_id: str, title: str, unit: str, series: Sequence[Series], start: dt.datetime
) -> SafeString:
    """An SVG line chart of `series` over consecutive minutes from `start`."""
    points = max((len(s.values) for s in series), default=0)
    top = nice_ceiling(max((v or 0.0 for s in series for v in s.values), default=0.0))
    lines = format_html_join(
        "",
        '<polyline class="awa-series" data-series="{}" fill="none" stroke="{}" '
        'stroke-width="2" points="{}"><title>{}</title></polyline>',
        ((s.name, s.colour, _points(s.values, points, top), s.name) for s in series),
    )
    return format_html(
        '<svg class="awa-chart" id="{}" role="img" aria-label="{}" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="none" xmlns="http://www.w3.org/2000/svg">'
        "{}{}{}</svg>",
        chart_id,
        title,
        WIDTH,
        HEIGHT,
        _axes(top, unit),
        _time_labels(start, points),
        lines,
    )


def _x(index: int, points: int) -> float:
    span = WIDTH - PAD_LEFT - PAD_RIGHT
    return PAD_LEFT + (span * index / (points - 1) if points > 1 else span / 2)


def _y(value: float, top: float) -> float:
    span = HEIGHT - PAD_TOP - PAD_BOTTOM
    return PAD_TOP + span * (1 - min(value, top) / top)


def _points(values: Sequence[float | None], points: int, top: float) -> str:
    """A minute without a rollup is drawn at 0: the queue did nothing that minute."""
    return " ".join(
        f"{_x(i, points):.1f},{_y(value or 0.0, top):.1f}" for i, value in enumerate(values)
    )


def _axes(top: float, unit: str) -> SafeString:
    bottom = HEIGHT - PAD_BOTTOM
    grid = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e5e7eb"/>'
        '<text x="{}" y="{}" font-size="10" text-anchor="end" fill="#6b7280">{}</text>',
        (
            (PAD_LEFT, WIDTH - PAD_RIGHT, y, y, PAD_LEFT - 4, y + 3, label)
            for y, label in ((_y(top * f, top), _label(top * f, unit)) for f in (0.0, 0.5, 1.0))
        ),
    )
    axis = format_html(
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#9ca3af"/>',
        PAD_LEFT,
        WIDTH - PAD_RIGHT,
        bottom,
        bottom,
    )
    return mark_safe(grid + axis)


def _label(value: float, unit: str) -> str:
    shown = f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
    return f"{shown}{unit}"


def _time_labels(start: dt.datetime, points: int) -> SafeString:
    """The first, middle and last minute under the axis (UTC, HH:MM)."""
    if points == 0:
        return mark_safe("")
    marks = sorted({0, (points - 1) // 2, points - 1})
    anchors = {0: "start", points - 1: "end"}  # the edge labels stay inside the chart
    return format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" text-anchor="{}" fill="#6b7280">{}</text>',
        (
            (
                f"{_x(i, points):.1f}",
                HEIGHT - 6,
                anchors.get(i, "middle"),
                (start + dt.timedelta(minutes=i)).strftime("%H:%M"),
            )
            for i in marks
        ),
    )
