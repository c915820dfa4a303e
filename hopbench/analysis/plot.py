"""Charts from result files (matplotlib, Agg backend): PNG and SVG, readable without
the code: titles, units, legends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hopbench.analysis.data import Group
from hopbench.analysis.fit import Fit
from hopbench.estimate import pct


def _plt():
    try:
        import matplotlib
    except ImportError:
        from hopbench.errors import HopbenchError

        raise HopbenchError("plotting needs matplotlib: pip install 'hopbench[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, stem: str) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        p = out / f"{stem}.{ext}"
        fig.savefig(p, dpi=130, bbox_inches="tight")
        paths.append(p)
    return paths


@dataclass
class LatencyLine:
    """One rung's points on a transport's latency-vs-payload panel (µs), with its fit."""

    rung: str
    color: int  # index into the palette (rungs in sorted order)
    x: np.ndarray  # request bytes
    y: np.ndarray  # p50, µs
    lo: np.ndarray
    hi: np.ndarray
    label: str
    segments: list[tuple[np.ndarray, np.ndarray]]  # the fit's dashed lines (bytes, µs)
    n_half: tuple[float, float, str] | None  # (bytes, µs, label) where n½ lies inside the points


def latency_series(groups: list[Group], fits: list[Fit]) -> dict[str, list[LatencyLine]]:
    """transport -> its rungs' points and fits (gap 0): what both renderings draw."""
    transports = sorted({g.transport for g in groups})
    rungs = sorted({g.rung for g in groups})
    out: dict[str, list[LatencyLine]] = {}
    for tr in transports:
        lines = out.setdefault(tr, [])
        for ci, rung in enumerate(rungs):
            gs = sorted((g for g in groups if g.transport == tr and g.rung == rung and g.gap_ms == 0),
                        key=lambda g: g.request_bytes)
            if not gs:
                continue
            x = np.array([g.request_bytes for g in gs])
            es = [g.estimate() for g in gs]
            y = np.array([e.value for e in es]) / 1e3
            lo = np.array([e.lo if e.has_interval else e.value for e in es]) / 1e3
            hi = np.array([e.hi if e.has_interval else e.value for e in es]) / 1e3
            fit = next((f for f in fits if f.rung == rung and f.transport == tr), None)
            segs, n_half = [], None
            if fit:
                for seg in fit.segments:
                    xs = np.geomspace(seg["lo_bytes"], seg["hi_bytes"], 50)
                    segs.append((xs, (seg["alpha_s"] + xs / seg["beta_Bps"]) * 1e6))
                if fit.n_half_bytes > 0 and x.min() <= fit.n_half_bytes <= x.max():
                    n_half = (fit.n_half_bytes, 2 * fit.alpha_s * 1e6, f"{rung} n½ = {fit.n_half_bytes / 1e3:.1f} kB")
            lines.append(LatencyLine(rung, ci, x, y, lo, hi, f"{rung} (median, {es[0].label()})", segs, n_half))
    return out


LATENCY_TITLE = "Speculative hop latency vs payload per link rung"
LATENCY_XLABEL = "request payload (bytes; dotted purple: T = 1, 3, 8 accepted tokens)"


def latency_vs_payload(groups: list[Group], fits: list[Fit], bytes_per_token: int):
    plt = _plt()
    series = latency_series(groups, fits)
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 5), squeeze=False, sharey=True)
    for ax, (tr, lines) in zip(axes[0], series.items()):
        for ln in lines:
            color = plt.cm.tab10(ln.color % 10)
            ax.errorbar(ln.x, ln.y, yerr=[ln.y - ln.lo, ln.hi - ln.y], fmt="o", ms=4, color=color, label=ln.label)
            for xs, ys in ln.segments:
                ax.plot(xs, ys, "--", color=color, lw=1)
            if ln.n_half:
                ax.plot([ln.n_half[0]], [ln.n_half[1]], marker="D", color=color, ms=7, mfc="white", label=ln.n_half[2])
        for t in (1, 3, 8):
            ax.axvline(t * bytes_per_token, color="tab:purple", lw=1.0, ls=":", zorder=0)
            ax.annotate(f"T={t}", (t * bytes_per_token, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
                        textcoords="offset points", fontsize=7, color="tab:purple")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(LATENCY_XLABEL)
        ax.set_title(f"{tr}: round trip vs payload (dashed: fit α + bytes/β)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("round trip p50 (µs)")
    fig.suptitle(LATENCY_TITLE)
    return fig


@dataclass
class HopBars:
    """One transport's bars on the hop-cost figure: x positions around each rung's index."""

    transport: str
    x: list[float]
    y: list[float]  # hop, ms
    lo: list[float]  # interval ends, ms
    hi: list[float]
    notes: list[str]  # "hop ms  gain"


def hop_bars(verdicts) -> tuple[list[str], float, list[HopBars]]:
    """(rungs in order, bar width, bars per transport): what both renderings draw."""
    rungs = list(dict.fromkeys(v.rung for v in verdicts))
    transports = sorted({v.transport for v in verdicts})
    width = 0.8 / max(1, len(transports))
    out = []
    for i, tr in enumerate(transports):
        b = HopBars(tr, [], [], [], [], [])
        for j, r in enumerate(rungs):
            v = next((v for v in verdicts if v.rung == r and v.transport == tr), None)
            if v is None:
                continue
            c = v.hop_ci_ms or (v.hop_ms, v.hop_ms)
            b.x.append(j + (i - (len(transports) - 1) / 2) * width)
            b.y.append(v.hop_ms)
            b.lo.append(c[0])
            b.hi.append(c[1])
            b.notes.append(f"{v.hop_ms:.3g} ms  {v.gain:+.1%}")
        out.append(b)
    return rungs, width, out


def hop_ylim(verdicts, t_draft_ms: float) -> tuple[float, float]:
    """An explicit bottom below every bar and interval: left to autoscale, a log axis can put
    it above a lone bar (a single run's bar was invisible); the top leaves room for the labels."""
    lows = [(v.hop_ci_ms or (v.hop_ms, v.hop_ms))[0] for v in verdicts] + [v.hop_ms for v in verdicts]
    return (max(min(x for x in lows + [t_draft_ms] if x > 0) / 5, 1e-6),
            max([v.hop_ms for v in verdicts] + [t_draft_ms]) * 40)


def hop_ylabel(verdicts, operating_tokens: int) -> str:
    levels = sorted({pct(v.hop_ci_level) for v in verdicts if v.hop_ci_level})
    return f"hop cost at T = {operating_tokens} (ms, median; CI {', '.join(levels) or 'none'})"


HOP_HEAD = "Hop cost per rung against the break-even hop"
HOP_TITLE = f"{HOP_HEAD} (below the line: moving the drafter pays;\nlabel: hop and projected tok/s gain)"


def hop_cost(verdicts, t_draft_ms: float, operating_tokens: int):
    plt = _plt()
    rungs, width, per_transport = hop_bars(verdicts)
    fig, ax = plt.subplots(figsize=(max(7, 2.2 * len(rungs)), 5.5))
    for b in per_transport:
        lo = [y - v for y, v in zip(b.y, b.lo)]
        hi = [v - y for y, v in zip(b.y, b.hi)]
        bars = ax.bar(b.x, b.y, width=width, yerr=[lo, hi], capsize=3, label=b.transport)
        for bar, note, up in zip(bars, b.notes, hi):
            # vertical, above the error bar: neighbouring bars' labels cannot overlap
            ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height() + up),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                        rotation=90)
    ax.axhline(t_draft_ms, color="crimson", ls="--", label=f"break-even hop = t_draft = {t_draft_ms} ms")
    ax.set_xticks(range(len(rungs)), rungs)
    ax.set_yscale("log")
    ax.set_ylabel(hop_ylabel(verdicts, operating_tokens))
    bottom, top = hop_ylim(verdicts, t_draft_ms)
    ax.set_ylim(bottom=bottom, top=top)
    ax.set_title(HOP_TITLE, fontsize=10)
    if ax.get_legend_handles_labels()[0]:  # below the axes: inside, it hid the bars' labels (issue 42)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return fig


@dataclass
class TargetLine:
    label: str  # "emu-1g tcp"
    x: list[int]  # targets at once
    y: list[float]  # per-target hop, ms
    lo: list[float]
    hi: list[float]


def target_lines(verdicts) -> list[TargetLine]:
    """Per rung and series measured with several targets (tcp, tcp@2, ...): hop against M."""
    from hopbench.analysis.verdict import targets_calls

    out = []
    for t in targets_calls(verdicts):
        pts = t["points"]
        out.append(TargetLine(f"{t['rung']} {t['transport']}", [p["targets"] for p in pts], [p["hop_ms"] for p in pts],
                              [(p["hop_ci_ms"] or (p["hop_ms"],))[0] for p in pts],
                              [(p["hop_ci_ms"] or (p["hop_ms"], p["hop_ms"]))[1] for p in pts]))
    return out


TARGETS_TITLE = "Per-target hop against the targets sharing one drafter (below the line: each still beats co-located)"


def hop_vs_targets(verdicts, t_draft_ms: float, operating_tokens: int):
    lines = target_lines(verdicts)
    if not lines:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    for ln in lines:
        ax.errorbar(ln.x, ln.y, yerr=[[y - lo for y, lo in zip(ln.y, ln.lo)], [hi - y for y, hi in zip(ln.y, ln.hi)]],
                    marker="o", capsize=3, label=ln.label)
    ax.axhline(t_draft_ms, color="crimson", ls="--", label=f"break-even hop = t_draft = {t_draft_ms} ms")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({x for ln in lines for x in ln.x}), [str(x) for x in sorted({x for ln in lines for x in ln.x})])
    ax.set_yscale("log")
    ax.set_xlabel("targets at once (M)")
    ax.set_ylabel(f"per-target hop at T = {operating_tokens} (ms, median; CI)")
    ax.set_title(TARGETS_TITLE, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def targets_svg(verdicts, t_draft_ms: float, operating_tokens: int, fid: str) -> str:
    from hopbench.analysis import svgplot as SVG

    p = SVG.Panel("per-target hop against M", "targets at once (M)", f"per-target hop at T = {operating_tokens} (ms)",
                xlog=True, legend="below")
    p.series = [SVG.Series("points", ln.x, ln.y, SVG.color(i), ln.label, lo=ln.lo, hi=ln.hi)
                for i, ln in enumerate(target_lines(verdicts))]
    p.series += [SVG.Series("line", ln.x, ln.y, SVG.color(i)) for i, ln in enumerate(target_lines(verdicts))]
    p.hlines = [(t_draft_ms, "crimson", "--", f"break-even hop = t_draft = {t_draft_ms} ms")]
    return SVG.figure([p], TARGETS_TITLE, fid)


CDF_POINTS = 400  # points drawn per CDF line: its quantiles (a sweep pools thousands of cycles per cell)


def cdf_tokens(groups: list[Group], most: int = 4) -> list[int]:
    """The token counts a CDF figure shows: every measured T, or `most` of them spread from the
    smallest to the largest (never a fixed list: a T = 2 run is shown)."""
    ts = sorted({g.tokens for g in groups if g.tokens and g.samples and g.gap_ms == 0})
    if len(ts) <= most:
        return ts
    return sorted({ts[round(i * (len(ts) - 1) / (most - 1))] for i in range(most)})


CDF_STYLES = {"tcp": "-", "zmq": "--", "ucx": ":"}  # line style per transport; others solid


def cdf_lines(groups: list[Group], tokens: list[int] | None = None) -> dict[str, list[tuple]]:
    """rung -> (colour index, line style, label, x µs, cumulative fraction) per line, at
    CDF_POINTS quantiles: what both renderings draw."""
    tokens = tokens if tokens is not None else cdf_tokens(groups)
    out: dict[str, list[tuple]] = {}
    for rung in sorted({g.rung for g in groups}):
        rows = out.setdefault(rung, [])
        for k, t in enumerate(tokens):
            for g in groups:
                if g.rung == rung and g.tokens == t and g.gap_ms == 0 and g.samples:
                    x = np.sort(g.pooled) / 1e3
                    idx = np.unique(np.linspace(0, len(x) - 1, min(len(x), CDF_POINTS)).round().astype(int))
                    rows.append((k, CDF_STYLES.get(g.transport, "-"), f"{g.transport} T={t}", x[idx], (idx + 1) / len(x)))
    return out


def cdfs(groups: list[Group], tokens: list[int] | None = None):
    plt = _plt()
    lines = cdf_lines(groups, tokens)
    fig, axes = plt.subplots(1, len(lines), figsize=(5 * len(lines), 4), squeeze=False)
    for ax, (rung, rows) in zip(axes[0], lines.items()):
        for k, style, label, x, y in rows:
            ax.plot(x, y, style, color=plt.cm.tab10(k), label=label)
        ax.set_xscale("log")
        # a narrow range (one decade or less, e.g. the 100 Mbit panel) gets minor tick labels
        # that overlap: keep at most a few plain labels
        from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.set_xlabel("round trip (µs)")
        ax.set_title(f"{rung}: latency CDF per payload")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("fraction of cycles ≤ x")
    return fig


def write_all(out: Path, groups, fits, verdicts, bytes_per_token: int, t_draft_ms: float, operating_tokens: int) -> list[Path]:
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    makers = [("latency_vs_payload", lambda: latency_vs_payload(groups, fits, bytes_per_token)),
              ("hop_cost", lambda: hop_cost(verdicts, t_draft_ms, operating_tokens) if verdicts else None),
              ("hop_vs_targets", lambda: hop_vs_targets(verdicts, t_draft_ms, operating_tokens) if verdicts else None),
              ("latency_cdf", lambda: cdfs(groups) if cdf_tokens(groups) else None)]
    for stem, make in makers:
        fig = make()
        if fig is None:  # nothing of that kind was measured (no operating payload, no token payloads)
            continue
        paths += _save(fig, out, stem)
        plt.close(fig)
    return paths


def spec_modes(per_rung: dict[str, list]):
    """Tokens/s per mode per rung (bars with the interval over repeats, values on them)."""
    plt = _plt()
    rungs = list(per_rung)
    modes = ["local", "sync", "overlap", "stream"]
    width = 0.8 / len(modes)
    fig, ax = plt.subplots(figsize=(max(6, 2.5 * len(rungs)), 4.5))
    for i, mode in enumerate(modes):
        xs, ys, lo, hi = [], [], [], []
        for j, rung in enumerate(rungs):
            r = next((r for r in per_rung[rung] if r.mode == mode), None)
            if r is None:
                continue
            e = r.tok_s
            xs.append(j + (i - 1) * width)
            ys.append(e.value)
            lo.append(e.value - (e.lo if e.has_interval else e.value))
            hi.append((e.hi if e.has_interval else e.value) - e.value)
        if not xs:
            continue
        bars = ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=3, label=mode)
        for bar, y, up in zip(bars, ys, hi):  # above the error bar, not on it
            ax.annotate(f"{y:.2f}", (bar.get_x() + bar.get_width() / 2, y + up), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rungs)), rungs)
    levels = sorted({pct(r.tok_s.level) for rs in per_rung.values() for r in rs if r.tok_s.level})
    ax.set_ylabel(f"tokens/s (median of repeats; CI {', '.join(levels) or 'none'})")
    ax.set_title("The speculative loop over the link: local vs sync vs overlap", fontsize=10)
    ax.margins(y=0.2)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def spec_timeline(cycles, rung: str, n: int = 6):
    """A few timed cycles per mode (repeat 0): verify, then the wait for the draft (hop +
    draft), as horizontal segments on one time axis per mode."""
    plt = _plt()
    modes = [m for m in ("local", "sync", "overlap", "stream") if (cycles["mode"] == m).any()]  # cycles: a DataFrame
    fig, ax = plt.subplots(figsize=(10, 1 + 0.8 * len(modes)))
    colors = {"verify": "tab:blue", "draft": "tab:orange", "hop": "tab:red", "hit": "tab:green"}
    for y, mode in enumerate(modes):
        rows = cycles[(cycles["mode"] == mode) & (cycles["repeat"] == 0) & (cycles["phase"] == 2)].head(n)
        t = 0.0
        for c in rows.to_dict("records"):
            v, d, h = int(c["verify_ns"]) / 1e6, int(c["draft_ns"]) / 1e6, int(c["hop_ns"]) / 1e6
            ax.barh(y, v, left=t, color=colors["verify"], height=0.5)
            t += v
            if mode == "local":
                ax.barh(y, d, left=t, color=colors["draft"], height=0.5)
                t += d
            else:
                wait = int(c["wait_ns"]) / 1e6
                if c["hit"] == 1:
                    ax.barh(y, wait, left=t, color=colors["hit"], height=0.5)
                else:
                    ax.barh(y, h, left=t, color=colors["hop"], height=0.5)
                    ax.barh(y, max(wait - h, 0.0), left=t + h, color=colors["draft"], height=0.5)
                t += wait
            ax.axvline(t, color="white", lw=0.6)
    ax.set_yticks(range(len(modes)), modes)
    ax.set_xlabel("ms (first timed cycles of repeat 0)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, ["verify", "draft", "network (hop)", "cache hit: ids at once"], fontsize=7, ncol=4,
              loc="upper center", bbox_to_anchor=(0.5, -0.35))
    ax.set_title(f"{rung}: timeline of {n} cycles per mode", fontsize=10)
    fig.tight_layout()
    return fig


def write_spec(out: Path, folders: list[Path]) -> list[Path]:
    from hopbench.analysis import spec as A

    plt = _plt()
    per_rung = {}
    paths: list[Path] = []
    (Path(out) / "plots").mkdir(parents=True, exist_ok=True)
    for f in folders:
        _, res = A.analyse(f)
        per_rung[f.name] = res
        _, cycles, _ = A.load(f)
        fig = spec_timeline(cycles, f.name)
        paths += _save(fig, Path(out) / "plots", f"spec_timeline_{f.name}")
        plt.close(fig)
    fig = spec_modes(per_rung)
    paths += _save(fig, Path(out) / "plots", "spec_tokens_per_s")
    plt.close(fig)
    return paths


# ---------------------------------------------------------------- the report page's SVG
# The same figures drawn by hopbench.analysis.svgplot (no matplotlib: the page's budget).


def latency_svg(groups: list[Group], fits: list[Fit], bytes_per_token: int, fid: str) -> str:
    from hopbench.analysis import svgplot as SVG

    panels = []
    for tr, lines in latency_series(groups, fits).items():
        p = SVG.Panel(f"{tr}: round trip vs payload (dashed: fit α + bytes/β)", LATENCY_XLABEL, "round trip p50 (µs)",
                    legend="below")
        for ln in lines:
            col = SVG.color(ln.color)
            p.series.append(SVG.Series("points", ln.x, ln.y, col, ln.label, lo=ln.lo, hi=ln.hi))
            p.series += [SVG.Series("line", xs, ys, col, style="--") for xs, ys in ln.segments]
            if ln.n_half:
                p.series.append(SVG.Series("points", [ln.n_half[0]], [ln.n_half[1]], col, ln.n_half[2], marker="D"))
        p.vlines = [(t * bytes_per_token, "#9467bd", f"T={t}") for t in (1, 3, 8)]
        panels.append(p)
    return SVG.figure(panels, LATENCY_TITLE, fid)


def hop_svg(verdicts, t_draft_ms: float, operating_tokens: int, fid: str) -> str:
    from hopbench.analysis import svgplot as SVG

    rungs, width, per_transport = hop_bars(verdicts)
    p = SVG.Panel(HOP_HEAD, "rung (label: hop and projected tok/s gain)",
                hop_ylabel(verdicts, operating_tokens), xlog=False, categories=rungs,
                ylim=hop_ylim(verdicts, t_draft_ms), legend="below")  # above the bars it hid their labels (issue 42)
    p.series = [SVG.Series("bars", b.x, b.y, SVG.color(i), b.transport, lo=b.lo, hi=b.hi, width=width, notes=b.notes)
                for i, b in enumerate(per_transport)]
    p.hlines = [(t_draft_ms, "crimson", "--", f"break-even hop = t_draft = {t_draft_ms} ms")]
    return SVG.figure([p], "Hop cost against the break-even hop: below the line, moving the drafter pays", fid,
                    panel_width=max(440, 150 * len(rungs)))


def cdf_svg(groups: list[Group], fid: str) -> str:
    from hopbench.analysis import svgplot as SVG

    panels = []
    for rung, rows in cdf_lines(groups).items():
        p = SVG.Panel(f"{rung}: latency CDF per payload", "round trip (µs)", "fraction of cycles ≤ x", ylog=False,
                    ylim=(0.0, 1.02), legend="below")
        p.series = [SVG.Series("line", x, y, SVG.color(k), label, style=style) for k, style, label, x, y in rows]
        panels.append(p)
    return SVG.figure(panels, "Latency CDFs per rung", fid, panel_width=360)
