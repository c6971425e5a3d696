"""The report's charts as inline SVG, drawn here so the page needs no script library.

Timelines are drawn at the resolution they are seen at: each row is cut into ``width``
pixel columns, every column takes the state that covers most of it, and runs of equal
columns become one rectangle. A row therefore has at most ``width`` rectangles however long
the run, which keeps a 10,000-sample report light; short states still show as long as
they fill most of one pixel column.
"""

from __future__ import annotations

import math
from html import escape
from typing import Iterable, Sequence

#: fill colour of each state or outcome
COLOURS = {
    "booting": "#9ecae1", "idle": "#d9d9d9", "leased": "#3182bd", "resetting": "#fdae6b",
    "dead": "#de2d26", "success": "#31a354", "failure": "#e6550d", "infra": "#756bb1",
}
_LABEL_W = 90
_ROW_H = 16


def fmt_s(seconds: float) -> str:
    """A duration as the charts and cards print it: 1.2h, 3.4m or three figures of seconds."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.3g}s"


def _columns(segments: Iterable[Sequence], t0: float, t1: float, width: int) -> list[str | None]:
    """The dominant state of every pixel column of one row."""
    span = max(t1 - t0, 1e-9)
    per_col = span / width
    cover: list[dict[str, float]] = [{} for _ in range(width)]
    for seg in segments:
        start, end, state = seg[0], seg[1], seg[2]
        if end <= start:
            end = start + per_col * 0.5  # an instant still shows
        first = max(0, min(width - 1, int((start - t0) / per_col)))
        last = max(0, min(width - 1, int(math.ceil((end - t0) / per_col)) - 1))
        for col in range(first, last + 1):
            col_start = t0 + col * per_col
            overlap = min(end, col_start + per_col) - max(start, col_start)
            if overlap > 0:
                cover[col][state] = cover[col].get(state, 0.0) + overlap
    return [max(c, key=c.get) if c else None for c in cover]


def timeline_svg(rows: dict[str, list[Sequence]], t0: float, t1: float, *, kind: str,
                 width: int = 1000) -> str:
    """One labelled row per key of ``rows``; each segment is (start, end, state, …)."""
    height = _ROW_H * len(rows) + 24
    total_w = _LABEL_W + width + 30
    parts = [f'<svg class="timeline" data-kind="{kind}" width="{total_w}" height="{height}" '
             f'viewBox="0 0 {total_w} {height}" xmlns="http://www.w3.org/2000/svg" role="img">']
    span = max(t1 - t0, 1e-9)
    for index, (name, segments) in enumerate(rows.items()):
        y = index * _ROW_H
        parts.append(f'<g class="row" data-row="{escape(name)}">'
                     f'<text x="{_LABEL_W - 6}" y="{y + 12}" text-anchor="end">{escape(name)}</text>')
        columns = _columns(segments, t0, t1, width)
        col = 0
        while col < width:
            state = columns[col]
            run_end = col
            while run_end + 1 < width and columns[run_end + 1] == state:
                run_end += 1
            if state is not None:
                start_s = col * span / width
                end_s = (run_end + 1) * span / width
                parts.append(
                    f'<rect x="{_LABEL_W + col}" y="{y + 2}" width="{run_end - col + 1}" height="{_ROW_H - 4}" '
                    f'fill="{COLOURS.get(state, "#999")}" class="s-{escape(state)}">'
                    f'<title>{escape(name)}: {escape(state)} {fmt_s(start_s)}–{fmt_s(end_s)}</title></rect>')
            col = run_end + 1
        parts.append("</g>")
    axis_y = _ROW_H * len(rows) + 4
    for tick in range(6):
        x = _LABEL_W + tick * width / 5
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{axis_y}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{fmt_s(span * tick / 5)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def legend(states: Iterable[str]) -> str:
    """Coloured keys for ``states``."""
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{COLOURS.get(s, "#999")}"></i>{escape(s)}</span>' for s in states) + "</div>"


def histogram_svg(values: Sequence[float], *, label: str, markers: dict[str, float] | None = None,
                  bins: int = 30, width: int = 480, height: int = 160) -> str:
    """A histogram of ``values`` with vertical lines at ``markers`` (p50, p90 …)."""
    if not values:
        return f'<p class="muted">no {escape(label)} recorded</p>'
    low, high = min(values), max(values)
    step = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / step))] += 1
    top = max(counts)
    plot_h, pad = height - 30, 40
    bar_w = (width - pad - 10) / bins
    parts = [f'<svg class="histogram" data-label="{escape(label)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">']
    for index, count in enumerate(counts):
        if not count:
            continue
        bar_h = plot_h * count / top
        lo = low + index * step
        parts.append(f'<rect x="{pad + index * bar_w:.1f}" y="{plot_h - bar_h + 4:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                     f'height="{bar_h:.1f}" fill="#6baed6"><title>{fmt_s(lo)}–{fmt_s(lo + step)}: {count}'
                     f'</title></rect>')
    for index, (name, value) in enumerate((markers or {}).items()):
        if value is None:
            continue
        x = pad + (value - low) / step * bar_w if high > low else pad
        # labels one under the other: p50, p90 and p99 are often a few pixels apart
        anchor = "end" if x > width * 0.6 else "start"
        parts.append(f'<line x1="{x:.1f}" y1="4" x2="{x:.1f}" y2="{plot_h + 4}" class="marker"/>'
                     f'<text x="{x + (-3 if anchor == "end" else 3):.1f}" y="{14 + 12 * index}" text-anchor="{anchor}" '
                     f'class="marker-label">{escape(name)} {fmt_s(value)}</text>')
    parts.append(f'<text x="{pad}" y="{height - 6}">{fmt_s(low)}</text>'
                 f'<text x="{width - 10}" y="{height - 6}" text-anchor="end">{fmt_s(high)}</text>'
                 f'<text x="4" y="14">{top}</text></svg>')
    return "".join(parts)
