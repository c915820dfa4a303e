"""A matrix folder (hopbench matrix) read back: the hop per pair at the operating payload,
the outliers named with their likely cause, and heatmaps of hop cost and goodput.

Outliers, with the thresholds stated (robust statistics: median and MAD, which a minority
of bad values cannot drag):
- a node is named when the median hop of the pairs it is in sits more than Z robust
  standard deviations (1.4826 x MAD, floored at FLOOR of the median) above the median of
  all nodes' medians, and at least RATIO x that median. Per node, the median over its
  pairs is the statistic because one slow node is in 2/n of all pairs (half of them at
  four nodes: too many for a per-pair median), but in only 1/(n-1) of another node's;
- a pair is named when it is not explained by a named node and its hop is as far (Z,
  RATIO) above the pairs that involve no named node.
The likely cause compares the node's doctor record with the other nodes': the route's
interface (negotiated speed, MTU, driver, state), a shaper on it (qdisc), and its warnings."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopbench import results as R
from hopbench.analysis.data import Reading, load_groups, recorded_shape
from hopbench.errors import HopbenchError
from hopbench.estimate import Estimate, pct

Z = 3.5
RATIO = 1.5
FLOOR = 0.05


@dataclass
class Finding:
    kind: str  # "node" or "pair"
    name: str
    hop_ms: float
    baseline_ms: float
    robust_z: float
    causes: list[str]

    def describe(self) -> str:
        cause = "; ".join(self.causes) if self.causes else "no difference in the doctor records (look at the switch port)"
        return (f"{self.kind} {self.name}: hop {self.hop_ms:.3f} ms vs {self.baseline_ms:.3f} ms typical "
                f"(x{self.hop_ms / self.baseline_ms:.1f}, robust z {self.robust_z:.1f}); likely cause: {cause}")


def _robust(values: list[float]) -> tuple[float, float]:
    """(median, robust sd = 1.4826 MAD, floored at FLOOR x median)."""
    v = np.asarray(values, float)
    m = float(np.median(v))
    return m, max(1.4826 * float(np.median(np.abs(v - m))), FLOOR * m)


def load_matrix(folder: "Path | Reading") -> dict[str, Any]:
    from hopbench.analysis.data import read_folder

    f = read_folder(folder)  # checked when read, once per Reading
    top = f.top
    if f.kind != "sweep" or top.get("kind") != "matrix":
        raise HopbenchError(f"{folder}: not a hopbench matrix folder")
    return top


def estimates(folder: "Path | Reading", transport: str = "tcp", tokens: int | None = None,
              groups: list | None = None) -> tuple[dict[tuple[str, str], Estimate], int]:
    """(client, server) -> the hop's cell estimate in ms at the operating payload (its
    interval over repeats at its achieved level), and that payload in tokens (groups: the
    folder's, when already loaded)."""
    top = load_matrix(folder)
    if groups is None:
        groups, _ = load_groups(folder)
    op = tokens or recorded_shape(folder)[1]
    out = {}
    for g in groups:
        r = top["rungs"].get(g.rung)
        if r and g.transport == transport and g.tokens == op and g.gap_ms == 0:
            out[(r["client"], r["server"])] = g.estimate().scaled(1e-6)
    return out, op


def hops(folder: "Path | Reading", transport: str = "tcp", tokens: int | None = None,
         groups: list | None = None) -> tuple[dict[tuple[str, str], float], int]:
    """(client, server) -> hop p50 in ms at the operating payload, and that payload in tokens."""
    est, op = estimates(folder, transport, tokens, groups)
    return {p: e.value for p, e in est.items()}, op


def _iface(rep: dict) -> dict:
    name = rep.get("route_interface")
    return next((i for i in rep.get("interfaces", []) if i.get("name") == name), {}) if name else {}


def causes(node: str, nodes: dict[str, dict]) -> list[str]:
    """What in this node's doctor record differs from most other nodes'."""
    mine = (nodes.get(node) or {}).get("doctor") or {}
    others = [(v.get("doctor") or {}) for n, v in nodes.items() if n != node]
    out = []
    fields = (("speed_mbps", "negotiated speed {} Mbit/s"), ("mtu", "MTU {}"), ("driver", "driver {}"),
              ("operstate", "link state {}"), ("duplex", "duplex {}"))
    for key, text in fields:
        mv = _iface(mine).get(key)
        common = Counter(str(_iface(o).get(key)) for o in others).most_common(1)
        if common and str(mv) != common[0][0]:
            out.append(f"{text.format(mv)} (the others: {common[0][0]})")
    q = [f"{x.get('kind')} {json.dumps(x.get('options'), sort_keys=True)}" for x in (mine.get("qdisc") or [])
         if x.get("kind") in ("tbf", "htb", "netem", "cake", "hfsc")]
    if q and not all(any(x.get("kind") in ("tbf", "htb", "netem", "cake", "hfsc") for x in (o.get("qdisc") or []))
                     for o in others):
        out.append(f"a shaper on {mine.get('route_interface')}: " + ", ".join(q))
    warns = [f["message"] for f in mine.get("findings", []) if f.get("level") == "warn"]
    out += [f"doctor: {w}" for w in warns[:3]]
    return out


def outliers(pair_hops: dict[tuple[str, str], float], nodes: dict[str, dict]) -> list[Finding]:
    names = sorted({n for p in pair_hops for n in p})
    per_node = {n: float(np.median([v for p, v in pair_hops.items() if n in p])) for n in names
                if any(n in p for p in pair_hops)}
    found: list[Finding] = []
    if len(per_node) >= 3:
        m, s = _robust(list(per_node.values()))
        for n, v in sorted(per_node.items(), key=lambda kv: -kv[1]):
            z = (v - m) / s
            if z > Z and v >= RATIO * m:
                found.append(Finding("node", n, v, m, z, causes(n, nodes)))
    named = {f.name for f in found}
    rest = {p: v for p, v in pair_hops.items() if not named & set(p)}
    if len(rest) >= 3:
        m, s = _robust(list(rest.values()))
        for p, v in sorted(rest.items(), key=lambda kv: -kv[1]):
            z = (v - m) / s
            if z > Z and v >= RATIO * m:
                found.append(Finding("pair", f"{p[0]} -> {p[1]}", v, m, z,
                                     [f"{n}: {c}" for n in p for c in causes(n, nodes)]))
    return found


def report(folder: Path, transport: str = "tcp", tokens: int | None = None) -> tuple[list[str], dict]:
    """Lines for people and a JSON document (also written to analysis/matrix.json)."""
    from hopbench.results import atomic_write

    top = load_matrix(folder)
    est, op = estimates(folder, transport, tokens)
    if not est:
        raise HopbenchError(f"{folder}: no complete {transport} measurement at T = {op}")
    ph = {p: e.value for p, e in est.items()}
    found = outliers(ph, top["matrix"].get("nodes", {}))
    bpt = recorded_shape(folder)[0]
    ns = sorted({(e.n_repeats, e.n_samples) for e in est.values()})
    levels = sorted({pct(e.level) for e in est.values() if e.level is not None})
    lines = [f"matrix: hop at T = {op} ({op * bpt:,} B) over {transport}, p50 (median of repeat medians) per pair, ms",
             "n per pair: " + ", ".join(f"{r} repeats / {c} cycles" for r, c in ns)
             + f"; each pair's interval over its repeats (order statistics) is at {', '.join(levels) or 'no'} level "
               f"(hopbench verdict or report lists them)"]
    names = sorted({n for p in ph for n in p})
    corner = "client / server"
    lines.append(f"{corner:>18} " + " ".join(f"{n:>14}" for n in names))
    for a in names:
        row = [ph.get((a, b), ph.get((b, a)) if not top["matrix"]["config"].get("ordered") else None) for b in names]
        lines.append(f"{a:>18} " + " ".join(f"{v:14.3f}" if v is not None else f"{'-':>14}" for v in row))
    lines.append(f"outliers (robust: median and MAD; named when > {Z} robust SD and >= {RATIO}x the typical hop):")
    lines += [f"  {f.describe()}" for f in found] or ["  none: every node and pair within the thresholds"]
    for n, why in (top["matrix"].get("left") or {}).items():
        lines.append(f"node {n} left the cluster ({why}); its pairs are marked failed")
    doc = R.document("matrix-verdict", {"transport": transport, "operating_tokens": op,
           "hops_ms": [{"client": a, "server": b, "hop_ms": e.value, "hop_ci_ms": [e.lo, e.hi] if e.has_interval else None,
                        "hop_ci_level": e.level, "repeats": e.n_repeats, "cycles": e.n_samples}
                       for (a, b), e in sorted(est.items())],
           "outliers": [asdict(f) for f in found], "thresholds": {"robust_z": Z, "ratio": RATIO, "mad_floor": FLOOR},
           "left": top["matrix"].get("left") or {}})
    from hopbench.results import ResultFolder

    atomic_write(ResultFolder(folder).analysis_dir() / "matrix.json", json.dumps(doc, indent=1) + "\n")
    return lines, doc


def heatmaps(folder: Path, transport: str = "tcp", tokens: int | None = None) -> list[Path]:
    """Hop cost and goodput per (client, server), PNG + SVG in plots/."""
    from hopbench.analysis import plot as PL

    plt = PL._plt()
    top = load_matrix(folder)
    ph, op = hops(folder, transport, tokens)
    bpt = recorded_shape(folder)[0]
    names = sorted({n for p in ph for n in p})
    ordered = bool(top["matrix"]["config"].get("ordered"))
    hop = np.full((len(names), len(names)), np.nan)
    for (a, b), v in ph.items():
        hop[names.index(a), names.index(b)] = v
        if not ordered:
            hop[names.index(b), names.index(a)] = v
    good = op * bpt * 8 / (hop / 1e3) / 1e6  # Mbit/s of request payload per hop
    paths = []
    out = Path(folder) / "plots"
    out.mkdir(exist_ok=True)
    for stem, data, label, cmap, fmt in (("matrix_hop", hop, f"hop at T = {op} (ms, p50)", "magma_r", "{:.2f}"),
                                         ("matrix_goodput", good, "goodput of the hop (Mbit/s)", "viridis", "{:.0f}")):
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(names), 1.2 + 1.1 * len(names)))
        im = ax.imshow(data, cmap=cmap)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlabel("server")
        ax.set_ylabel("client")
        for i in range(len(names)):
            for j in range(len(names)):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, fmt.format(data[i, j]), ha="center", va="center", fontsize=8,
                            color="white" if data[i, j] > np.nanmean(data) else "black")
        fig.colorbar(im, ax=ax, label=label)
        ax.set_title(f"{transport}: {label} per pair", fontsize=10)
        for ext in ("png", "svg"):
            p = out / f"{stem}.{ext}"
            fig.savefig(p, dpi=130, bbox_inches="tight")
            paths.append(p)
        plt.close(fig)
    return paths
