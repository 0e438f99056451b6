"""The run report's page: self-contained HTML with inline SVG plots, written with the standard library.

No plotting library and no script: every plot is an `<svg>` drawn here (lines for time series,
bars for the alerts' timeline), so the page needs no network at view time and the trainer wheel no
extra dependency. A Content-Security-Policy meta tag forbids every fetch (`default-src 'none'`;
inline styles only), so a browser opening the page makes no request even if a value smuggled a URL
into it; every value is HTML-escaped.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 28, 30
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]


@dataclass
class Plot:
    """One plot: `name` (the page's `data-plot`), its title, the unit of its values, its series."""

    name: str
    title: str
    unit: str  # "ratio" (0-1 shown in %), "percent", "seconds", "per_second" or ""
    series: list[Series] = field(default_factory=list)
    empty_reason: str = "no data"

    @property
    def points(self) -> int:
        return sum(len(s.points) for s in self.series)


@dataclass
class Span:
    """An alert that fired from `start` to `end` (unix seconds)."""

    label: str
    start: float
    end: float


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def _value(v: float, unit: str) -> str:
    if unit == "ratio":
        return f"{v * 100:.3g}%"
    if unit == "percent":
        return f"{v:.3g}%"
    if unit == "seconds":
        return f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    if unit == "per_second":
        return f"{v:.4g}/s"
    return f"{v:.4g}"


def _frame(name: str, title: str, points: int, body: list[str], t0: float, t1: float) -> str:
    e = html.escape
    x0, x1, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{e(name)}" data-points="{points}" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
        f"<title>{e(title)}</title>",
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{e(title)}</text>',
        f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#444"/>',
        f'<line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y1}" stroke="#444"/>',
        f'<text x="{x0}" y="{HEIGHT - 10}" font-size="10">{_clock(t0)}</text>',
        f'<text x="{x1}" y="{HEIGHT - 10}" font-size="10" text-anchor="end">{_clock(t1)} UTC</text>',
        *body,
        "</svg>",
    ]
    return "\n".join(parts)


def _empty(name: str, title: str, reason: str) -> str:
    e = html.escape
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot empty" data-plot="{e(name)}" data-points="0" '
        f'width="{WIDTH}" height="60" viewBox="0 0 {WIDTH} 60" role="img"><title>{e(title)}</title>'
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{e(title)}</text>'
        f'<text x="{LEFT}" y="40" font-size="12" fill="#777">{e(reason)}</text></svg>'
    )


def line_plot(plot: Plot, t0: float, t1: float) -> str:
    """The plot's series as polylines over [t0, t1]; a plot without points says why."""
    series = [s for s in plot.series if s.points]
    if not series:
        return _empty(plot.name, plot.title, plot.empty_reason)
    times = [t for s in series for t, _ in s.points]
    t0, t1 = min(t0, *times), max(t1, *times)  # the job's life, and the rules' records after it
    values = [v for s in series for _, v in s.points]
    low, high = min(values), max(values)
    if plot.unit in ("ratio", "percent") or low > 0:
        low = min(low, 0.0)
    if high <= low:
        high = low + (abs(low) or 1.0)
    span = max(t1 - t0, 1e-9)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM

    def xy(t: float, v: float) -> str:
        x = x0 + (x1 - x0) * (t - t0) / span
        y = y1 - (y1 - y0) * (v - low) / (high - low)
        return f"{x:.1f},{y:.1f}"

    top, bottom = html.escape(_value(high, plot.unit)), html.escape(_value(low, plot.unit))
    body = [
        f'<text x="{x0 - 4}" y="{y0 + 4}" font-size="10" text-anchor="end">{top}</text>',
        f'<text x="{x0 - 4}" y="{y1}" font-size="10" text-anchor="end">{bottom}</text>',
    ]
    for index, s in enumerate(series):
        color = COLORS[index % len(COLORS)]
        path = " ".join(xy(t, v) for t, v in s.points)
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        if len(s.points) == 1:
            x, y = xy(*s.points[0]).split(",")
            body.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{color}"/>')
        last = _value(s.points[-1][1], plot.unit)
        body.append(
            f'<text x="{x1 + 8}" y="{y0 + 12 + 14 * index}" font-size="11" fill="{color}">'
            f"{html.escape(s.label)} ({html.escape(last)})</text>"
        )
    return _frame(plot.name, plot.title, plot.points, body, t0, t1)


def timeline(name: str, title: str, spans: Sequence[Span], t0: float, t1: float, empty: str) -> str:
    """Each span as a bar on its own row, over [t0, t1]."""
    if not spans:
        return _empty(name, title, empty)
    span = max(t1 - t0, 1e-9)
    x0, x1 = LEFT, WIDTH - RIGHT
    labels = list(dict.fromkeys(s.label for s in spans))
    body = []
    for s in spans:
        row = labels.index(s.label)
        a = x0 + (x1 - x0) * (max(s.start, t0) - t0) / span
        b = x0 + (x1 - x0) * (min(s.end, t1) - t0) / span
        body.append(
            f'<rect class="span" x="{a:.1f}" y="{TOP + 6 + 22 * row}" width="{max(b - a, 2):.1f}" height="16" '
            f'fill="{COLORS[3]}"><title>{html.escape(s.label)}: {_clock(s.start)}-{_clock(s.end)}</title></rect>'
        )
    for row, label in enumerate(labels):
        body.append(f'<text x="{x1 + 8}" y="{TOP + 18 + 22 * row}" font-size="11">{html.escape(label)}</text>')
    return _frame(name, title, len(spans), body, t0, t1)


def page(title: str, sections: Sequence[tuple[str, Sequence[str], Sequence[str]]], comparison: Sequence[str]) -> str:
    """The whole page: `sections` of (heading, summary lines, plot SVGs), the comparison lines first."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;margin:24px;max-width:1400px}"
        "section{margin-bottom:32px}.plots{display:flex;flex-wrap:wrap;gap:12px}"
        "svg.plot{border:1px solid #ddd;background:#fff}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}"
        "</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    if comparison:
        parts.append('<section id="comparison"><h2>Comparison</h2>')
        parts += [f"<p>{e(line)}</p>" for line in comparison]
        parts.append("</section>")
    for heading, lines, plots in sections:
        parts.append(f'<section class="job"><h2>{e(heading)}</h2><pre>{e(chr(10).join(lines))}</pre>')
        parts.append('<div class="plots">')
        parts += plots
        parts.append("</div></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
