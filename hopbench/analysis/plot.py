"""Charts from result files (matplotlib, Agg backend): PNG and SVG, readable without
the code: titles, units, legends."""

from __future__ import annotations

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


def latency_vs_payload(groups: list[Group], fits: list[Fit], bytes_per_token: int):
    plt = _plt()
    transports = sorted({g.transport for g in groups})
    rungs = sorted({g.rung for g in groups})
    colors = {r: plt.cm.tab10(i % 10) for i, r in enumerate(rungs)}
    fig, axes = plt.subplots(1, len(transports), figsize=(6 * len(transports), 5), squeeze=False, sharey=True)
    for ax, tr in zip(axes[0], transports):
        for rung in rungs:
            gs = sorted((g for g in groups if g.transport == tr and g.rung == rung and g.gap_ms == 0),
                        key=lambda g: g.request_bytes)
            if not gs:
                continue
            x = np.array([g.request_bytes for g in gs])
            es = [g.estimate() for g in gs]
            y = np.array([e.value for e in es]) / 1e3
            lo = np.array([e.lo if e.has_interval else e.value for e in es]) / 1e3
            hi = np.array([e.hi if e.has_interval else e.value for e in es]) / 1e3
            ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="o", ms=4, color=colors[rung],
                        label=f"{rung} (median, {es[0].label()})")
            fit = next((f for f in fits if f.rung == rung and f.transport == tr), None)
            if fit:
                for seg in fit.segments:
                    xs = np.geomspace(seg["lo_bytes"], seg["hi_bytes"], 50)
                    ax.plot(xs, (seg["alpha_s"] + xs / seg["beta_Bps"]) * 1e6, "--", color=colors[rung], lw=1)
                if fit.n_half_bytes > 0 and x.min() <= fit.n_half_bytes <= x.max():
                    ax.plot([fit.n_half_bytes], [2 * fit.alpha_s * 1e6], marker="D", color=colors[rung], ms=7,
                            mfc="white", label=f"{rung} n½ = {fit.n_half_bytes / 1e3:.1f} kB")
        for t in (1, 3, 8):
            ax.axvline(t * bytes_per_token, color="tab:purple", lw=1.0, ls=":", zorder=0)
            ax.annotate(f"T={t}", (t * bytes_per_token, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
                        textcoords="offset points", fontsize=7, color="tab:purple")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("request payload (bytes; dotted purple: T = 1, 3, 8 accepted tokens)")
        ax.set_title(f"{tr}: round trip vs payload (dashed: fit α + bytes/β)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("round trip p50 (µs)")
    fig.suptitle("Speculative hop latency vs payload per link rung")
    return fig


def hop_cost(verdicts, t_draft_ms: float, operating_tokens: int):
    plt = _plt()
    rungs = list(dict.fromkeys(v.rung for v in verdicts))
    transports = sorted({v.transport for v in verdicts})
    width = 0.8 / max(1, len(transports))
    fig, ax = plt.subplots(figsize=(max(7, 2.2 * len(rungs)), 5.5))
    for i, tr in enumerate(transports):
        xs, ys, lo, hi = [], [], [], []
        for j, r in enumerate(rungs):
            v = next((v for v in verdicts if v.rung == r and v.transport == tr), None)
            if v is None:
                continue
            xs.append(j + (i - (len(transports) - 1) / 2) * width)
            ys.append(v.hop_ms)
            c = v.hop_ci_ms or (v.hop_ms, v.hop_ms)
            lo.append(v.hop_ms - c[0])
            hi.append(c[1] - v.hop_ms)
        bars = ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=3, label=tr)
        for bar, v, up in zip(bars, [v for r in rungs for v in verdicts if v.rung == r and v.transport == tr], hi):
            # vertical, above the error bar: neighbouring bars' labels cannot overlap
            ax.annotate(f"{v.hop_ms:.3g} ms  {v.gain:+.1%}", (bar.get_x() + bar.get_width() / 2, bar.get_height() + up),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                        rotation=90)
    ax.axhline(t_draft_ms, color="crimson", ls="--", label=f"break-even hop = t_draft = {t_draft_ms} ms")
    ax.set_xticks(range(len(rungs)), rungs)
    ax.set_yscale("log")
    levels = sorted({pct(v.hop_ci_level) for v in verdicts if v.hop_ci_level})
    ax.set_ylabel(f"hop cost at T = {operating_tokens} (ms, median; CI {', '.join(levels) or 'none'})")
    # an explicit bottom below every bar and interval: left to autoscale, a log axis can put
    # it above a lone bar (a single run's bar was invisible); the top leaves room for the labels
    lows = [(v.hop_ci_ms or (v.hop_ms, v.hop_ms))[0] for v in verdicts] + [v.hop_ms for v in verdicts]
    ax.set_ylim(bottom=max(min(x for x in lows + [t_draft_ms] if x > 0) / 5, 1e-6),
                top=max([v.hop_ms for v in verdicts] + [t_draft_ms]) * 40)
    ax.set_title("Hop cost per rung against the break-even hop (below the line: moving the drafter pays;\n"
                 "label: hop and projected tok/s gain)", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return fig


CDF_POINTS = 400  # points drawn per CDF line: its quantiles (a sweep pools thousands of cycles per cell)


def cdf_tokens(groups: list[Group], most: int = 4) -> list[int]:
    """The token counts a CDF figure shows: every measured T, or `most` of them spread from the
    smallest to the largest (never a fixed list: a T = 2 run is shown)."""
    ts = sorted({g.tokens for g in groups if g.tokens and g.samples and g.gap_ms == 0})
    if len(ts) <= most:
        return ts
    return sorted({ts[round(i * (len(ts) - 1) / (most - 1))] for i in range(most)})


def cdfs(groups: list[Group], tokens: list[int] | None = None):
    plt = _plt()
    tokens = tokens if tokens is not None else cdf_tokens(groups)
    rungs = sorted({g.rung for g in groups})
    styles = {"tcp": "-", "zmq": "--", "ucx": ":"}
    fig, axes = plt.subplots(1, len(rungs), figsize=(5 * len(rungs), 4), squeeze=False)
    for ax, rung in zip(axes[0], rungs):
        for k, t in enumerate(tokens):
            for g in groups:
                if g.rung == rung and g.tokens == t and g.gap_ms == 0 and g.samples:
                    x = np.sort(g.pooled) / 1e3
                    idx = np.unique(np.linspace(0, len(x) - 1, min(len(x), CDF_POINTS)).round().astype(int))
                    ax.plot(x[idx], (idx + 1) / len(x), styles.get(g.transport, "-"),
                            color=plt.cm.tab10(k), label=f"{g.transport} T={t}")
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
    modes = ["local", "sync", "overlap"]
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
    modes = [m for m in ("local", "sync", "overlap") if (cycles["mode"] == m).any()]  # cycles: a DataFrame
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
