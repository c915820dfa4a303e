"""Inline SVG charts for the report page, written directly (no matplotlib).

The report is one self-contained page; its three figures cost 4.5 s through matplotlib
(import, layout, the SVG backend) against a 3 s budget for the whole `hopbench report` on the
default sweep (issue 28 item 9). The figures' data come from the same functions the
matplotlib plots use (hopbench.analysis.plot: latency_series, hop_bars, cdf_lines), so the
page and `hopbench plot` draw the same numbers; only the drawing differs. What is drawn:
log or linear axes with decade ticks (and 2, 5 between them where the range is narrow),
points with interval bars, lines (solid, dashed, dotted), bars with interval bars,
horizontal and vertical reference lines, a legend per panel, titles and axis labels as
<text>. The page's CSS scales each <svg> to its width (viewBox)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

Values = Any  # numbers: a sequence or a numpy array

#: matplotlib's tab10, so the page's colours match `hopbench plot`'s
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
DASH = {"-": "", "--": "6,4", ":": "2,3"}


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@dataclass
class Series:
    kind: str  # "points", "line", "bars"
    x: Values
    y: Values
    color: str
    label: str | None = None
    style: str = "-"  # line dash: "-", "--", ":"
    lo: Values | None = None  # interval bars (points, bars)
    hi: Values | None = None
    marker: str = "o"  # points: "o" filled circle, "D" open diamond
    width: float = 0.0  # bars: width in x units
    notes: Sequence[str] | None = None  # bars: a label above each bar (vertical)


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str = ""
    xlog: bool = True
    ylog: bool = True
    series: list[Series] = field(default_factory=list)
    hlines: list[tuple[float, str, str, str]] = field(default_factory=list)  # y, colour, dash, legend label
    vlines: list[tuple[float, str, str]] = field(default_factory=list)  # x, colour, text at the top
    categories: list[str] | None = None  # a categorical x axis: tick i at x = i
    ylim: tuple[float, float] | None = None
    legend: str = "upper left"  # or "upper right", "lower right" (inside, where the data leave room), "below"


W, H = 440, 320  # one panel, px
ML, MR, MT, MB = 62, 12, 30, 48  # margins: ticks and labels left and below, the title above


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _fmt(v: float) -> str:
    """A tick label: 1, 20, 500, 1k, 20k, 1M; below 1, as many decimals as needed."""
    if v >= 1e6 and v % 1e6 == 0:
        return f"{v / 1e6:g}M"
    if v >= 1e3 and v % 1e3 == 0:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Decades inside [lo, hi]; with 1, 2 and 5 of each decade where fewer than 3 decades show."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    subs = (1, 2, 5) if b - a <= 2 else (1,)
    ticks = [m * 10.0**e for e in range(a, b + 1) for m in subs if lo <= m * 10.0**e <= hi]
    if len(ticks) > 9:  # many decades: every other one
        ticks = ticks[:: math.ceil(len(ticks) / 8)]
    return ticks


def _lin_ticks(lo: float, hi: float) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    step = 10 ** math.floor(math.log10(span / 4))
    for m in (1, 2, 2.5, 5, 10):
        if span / (m * step) <= 6:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


class _Scale:
    def __init__(self, lo: float, hi: float, log: bool, a: float, b: float):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.log, self.a, self.b = lo, hi, log, a, b

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-300))
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _extent(values: list[float], log: bool, pad: float) -> tuple[float, float]:
    vals = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not vals:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(vals), max(vals)
    if log:
        return lo / pad, hi * pad
    span = (hi - lo) or abs(hi) or 1.0
    return lo - 0.05 * span * pad, hi + 0.05 * span * pad


def _limits(p: Panel) -> tuple[float, float, float, float]:
    """The panel's x and y extents: every series (and its interval), line and category in view."""
    xs: list[float] = []
    ys: list[float] = []
    for s in p.series:
        xs += list(s.x)
        ys += list(s.y) + list(s.lo if s.lo is not None else []) + list(s.hi if s.hi is not None else [])
    xs += [v for v, _, _ in p.vlines]
    ys += [v for v, _, _, _ in p.hlines]
    if p.categories is not None:
        xlo, xhi = -0.6, len(p.categories) - 0.4
    else:
        xlo, xhi = _extent(xs, p.xlog, 1.4)
    ylo, yhi = p.ylim or _extent(ys, p.ylog, 1.3)
    return xlo, xhi, ylo, yhi


def _grid(p: Panel, sx: Any, sy: Any, box: tuple[float, float, float, float], limits: tuple[float, ...]) -> list[str]:
    """The panel's grid lines and tick labels (categories on x where it has them)."""
    x0, x1, y0, y1 = box
    xlo, xhi, ylo, yhi = limits
    out = []
    for v in _log_ticks(ylo, yhi) if p.ylog else _lin_ticks(ylo, yhi):
        y = sy(v)
        out.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{x0 - 4:.1f}" y="{y + 3:.1f}" text-anchor="end">{_esc(_fmt(v))}</text>')
    if p.categories is not None:
        for i, c in enumerate(p.categories):
            out.append(f'<text x="{sx(i):.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{_esc(c)}</text>')
        return out
    for v in _log_ticks(xlo, xhi) if p.xlog else _lin_ticks(xlo, xhi):
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y0:.1f}" stroke="#ddd"/>'
                   f'<text x="{x:.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{_esc(_fmt(v))}</text>')
    return out


def _panel(p: Panel, ox: float, oy: float, clip: str, w: float) -> str:
    xlo, xhi, ylo, yhi = limits = _limits(p)
    x0, x1, y0, y1 = ox + ML, ox + w - MR, oy + H - MB, oy + MT
    sx, sy = _Scale(xlo, xhi, p.xlog and p.categories is None, x0, x1), _Scale(ylo, yhi, p.ylog, y0, y1)
    out = [f'<clipPath id="{clip}"><rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}"/>'
           "</clipPath>",
           f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}" fill="white" stroke="#333"/>']
    out += _grid(p, sx, sy, (x0, x1, y0, y1), limits)
    body = []
    for v, col, text in p.vlines:
        x = sx(v)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y1:.1f}" y2="{y0:.1f}" stroke="{col}" stroke-dasharray="2,3"/>'
                    f'<text x="{x + 2:.1f}" y="{y1 + 10:.1f}" fill="{col}" font-size="8">{_esc(text)}</text>')
    for v, col, dash, _ in p.hlines:
        y = sy(v)
        body.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{col}" stroke-width="1.5" '
                    f'stroke-dasharray="{DASH.get(dash, "")}"/>')
    for s in p.series:
        body.append(_series(s, sx, sy, y0))
    out.append(f'<g clip-path="url(#{clip})">{"".join(body)}</g>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{oy + 18:.1f}" text-anchor="middle" font-size="11" '
               f'font-weight="bold">{_esc(p.title)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y0 + 32:.1f}" text-anchor="middle">{_esc(p.xlabel)}</text>')
    if p.ylabel:
        cy = (y0 + y1) / 2
        out.append(f'<text x="{ox + 14:.1f}" y="{cy:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 {ox + 14:.1f} {cy:.1f})">{_esc(p.ylabel)}</text>')
    out.append(_legend(p, (x0, x1, y0, y1)))
    return "".join(out)


def _series(s: Series, sx: _Scale, sy: _Scale, base: float) -> str:
    pts = [(float(x), float(y)) for x, y in zip(s.x, s.y) if math.isfinite(float(y))]
    out = []
    if s.kind == "line":
        d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{s.color}" stroke-width="1.3" '
                   f'stroke-dasharray="{DASH.get(s.style, "")}"/>')
    elif s.kind == "points":
        for i, (x, y) in enumerate(pts):
            cx, cy = sx(x), sy(y)
            if s.lo is not None and s.hi is not None:
                out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{sy(s.lo[i]):.1f}" y2="{sy(s.hi[i]):.1f}" '
                           f'stroke="{s.color}"/>')
            if s.marker == "D":
                out.append(f'<path d="M{cx:.1f},{cy - 5:.1f}l5,5l-5,5l-5,-5z" fill="white" stroke="{s.color}"/>')
            else:
                out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.6" fill="{s.color}"/>')
    elif s.kind == "bars":
        half = s.width / 2
        for i, (x, y) in enumerate(pts):
            left, right, top = sx(x - half), sx(x + half), sy(y)
            out.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{max(base - top, 0):.1f}" '
                       f'fill="{s.color}"/>')
            cx = (left + right) / 2
            up = top
            if s.lo is not None and s.hi is not None:
                up = sy(s.hi[i])
                out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{sy(s.lo[i]):.1f}" y2="{up:.1f}" stroke="#222"/>')
            if s.notes:
                out.append(f'<text x="{cx + 3:.1f}" y="{up - 4:.1f}" font-size="8" '
                           f'transform="rotate(-90 {cx + 3:.1f} {up - 4:.1f})">{_esc(s.notes[i])}</text>')
    return "".join(out)


def _legend(p: Panel, box: tuple[float, float, float, float]) -> str:
    items = [(s.color, s.kind, s.style, s.label) for s in p.series if s.label]
    items += [(col, "line", dash, label) for _, col, dash, label in p.hlines if label]
    if not items:
        return ""
    x0, x1, y0, y1 = box
    width = min(26 + 4.6 * max(len(label) for *_, label in items), x1 - x0 - 12)
    height = _legend_height(p)
    x = x1 - 6 - width if p.legend.endswith("right") else x0 + 6
    y = y0 - 6 - height if p.legend.startswith("lower") else y1 + 6
    if p.legend == "below":  # under the x axis label: covers nothing
        x, y = x0, y0 + MB
    out = [f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height}" '
           'fill="white" fill-opacity="0.85" stroke="#bbb"/>']
    for i, (col, kind, style, label) in enumerate(items):
        yy = y + 10 + 12 * i
        if kind == "line":
            out.append(f'<line x1="{x + 4:.1f}" x2="{x + 18:.1f}" y1="{yy - 3:.1f}" y2="{yy - 3:.1f}" stroke="{col}" '
                       f'stroke-dasharray="{DASH.get(style, "")}"/>')
        else:
            out.append(f'<rect x="{x + 6:.1f}" y="{yy - 7:.1f}" width="8" height="8" fill="{col}"/>')
        out.append(f'<text x="{x + 22:.1f}" y="{yy:.1f}" font-size="8">{_esc(label)}</text>')
    return "".join(out)


def _legend_height(p: Panel) -> int:
    n = sum(1 for s in p.series if s.label) + sum(1 for h in p.hlines if h[3])
    return 12 * n + 4 if n else 0


def figure(panels: list[Panel], title: str, fid: str, panel_width: float = W) -> str:
    """Panels side by side under one title, as an <svg> element (ids prefixed with fid)."""
    below = max((_legend_height(p) + 6 for p in panels if p.legend == "below"), default=0)
    width, height = panel_width * len(panels), H + 24 + below
    body = "".join(_panel(p, panel_width * i, 24, f"{fid}-clip{i}", panel_width) for i, p in enumerate(panels))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" '
            f'height="{height}" font-family="sans-serif" font-size="9" role="img" aria-label="{_esc(title)}">'
            f'<title>{_esc(title)}</title><text x="{width / 2:.0f}" y="15" text-anchor="middle" font-size="12">'
            f'{_esc(title)}</text>{body}</svg>')
