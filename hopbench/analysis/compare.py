"""Comparing two sets of measurements of the same cells: B against A, per matching cell.

The unit is the repeat (a whole run), never the single cycle: on shared machines the
run-to-run spread is the real uncertainty (the sister study's lesson: +-20% between runs,
medians of three repeats could not resolve a 9% effect). Three designs, chosen per cell:

- paired: repeat r of A with repeat r of B, where the pairing is real: the two cells of one
  sweep (measured in the same repeat pass, e.g. gap vs no gap), or two lists of runs that
  were interleaved in time (A1 B1 A2 B2 ..., checked from their start times). A drift
  shared by a repeat cancels in the pair. Statistic: the mean of log(B_r / A_r) with a
  Student-t interval and p-value (scipy.stats.ttest_1samp).
- unpaired repeats: both sides have >= 2 repeats but no pairing. Welch's t on the log
  repeat medians (scipy.stats.ttest_ind, equal_var=False). Any offset between the two
  sessions is part of the difference: the baseline check below lists what changed.
- one run on a side: the data hold no run-to-run spread, so the difference is set against
  a stated spread (the relative SD of a run's median): measured from repeats where a side
  has them, else --run-spread, else the default below. A difference inside
  1.96 x spread x sqrt(1/n_A + 1/n_B) is reported as not resolvable.

Ratios are B / A of the cell estimates' scale; "rel" = ratio - 1 with its 95% interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from hopbench.analysis import dist as D
from hopbench.analysis.data import Group
from hopbench.records import CellKey, Place

LEVEL = 0.95
# Default run-to-run spread (relative SD of one run's median) when no side has repeats: the
# sister study's "+-20% run-to-run spread" read as +-2 SD. A judgement call, stated in the
# output; give --run-spread (or compare sweeps with repeats) to replace it.
DEFAULT_RUN_SPREAD = 0.10
DEFAULT_RUN_SPREAD_SOURCE = "default: the seed study's +-20% run-to-run spread read as +-2 SD"


@dataclass
class Comparison:
    rung: str
    transport: str
    payload: str
    gap_a_ms: float
    gap_b_ms: float
    design: str
    n_a: int  # repeats (runs) on each side
    n_b: int
    n_pairs: int
    median_a_ns: float
    median_b_ns: float
    diff_ns: float
    diff_rel: float  # B / A - 1 (geometric mean of the paired ratios when paired)
    diff_rel_ci: tuple[float, float]
    level: float
    p: float | None
    spread: float | None  # relative SD of one run's median, where it was needed
    spread_source: str | None
    significant: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def call(self) -> str:
        if self.significant:
            return "B slower" if self.diff_rel > 0 else "B faster"
        if self.spread is not None:
            return f"not resolvable below the run-to-run spread ({self.spread:.1%})"
        return "no difference resolved"

    @property
    def tone(self) -> str | None:
        """B slower costs, B faster pays; a difference not resolved has none."""
        return None if not self.significant else "costs" if self.diff_rel > 0 else "pays"


def _spread_of(g: Group) -> float | None:
    x = np.log(np.asarray(g.repeat_p50_ns, float))
    return float(np.std(x, ddof=1)) if len(x) >= 3 else None


def paired_ids(a: Group, b: Group) -> list[int]:
    return sorted(set(a.repeat_ids) & set(b.repeat_ids))


def _paired(d: np.ndarray) -> tuple[float, float, float, float]:
    """Paired by repeat: the mean of the log differences, its t interval and p."""
    m = float(d.mean())
    if np.all(d == d[0]):
        return m, m, m, 0.0 if m != 0 else 1.0
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    t = D.t_ppf(0.5 + LEVEL / 2, len(d) - 1)
    return m, m - t * se, m + t * se, D.ttest_1samp_p(d, 0.0)


def _welch(la: np.ndarray, lb: np.ndarray) -> tuple[float, float, float, float]:
    """Unpaired repeats: the difference of the log means, Welch's interval and p."""
    m = float(lb.mean() - la.mean())
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return m, m, m, 0.0 if m != 0 else 1.0
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    t = D.t_ppf(0.5 + LEVEL / 2, df)
    return m, m - t * se, m + t * se, D.welch_p(lb, la)


def _one_run(a: Group, b: Group, la: np.ndarray, lb: np.ndarray, run_spread: float | None,
             spread_source: str | None) -> tuple[float, float, float, float | None, float, str]:
    """One run on a side: the difference against a run-to-run spread (given, measured on the
    side with repeats, or the default), a normal interval and p; with the spread and its source."""
    if run_spread is not None:
        spread, src = run_spread, spread_source or "given (--run-spread)"
    else:
        measured = [s for s in (_spread_of(a), _spread_of(b)) if s is not None]
        if measured:
            spread, src = float(max(measured)), "measured: the SD of log repeat medians of the side with repeats"
        else:
            spread, src = DEFAULT_RUN_SPREAD, DEFAULT_RUN_SPREAD_SOURCE
    m = float(lb.mean() - la.mean())
    scale = spread * math.sqrt(1 / len(la) + 1 / len(lb))
    half = D.norm_ppf(0.5 + LEVEL / 2) * scale
    p = float(2 * D.norm_sf(abs(m) / scale)) if spread > 0 else None
    return m, m - half, m + half, p, spread, src


def compare_groups(a: Group, b: Group, paired: bool = False, run_spread: float | None = None,
                   spread_source: str | None = None) -> Comparison:
    ea, eb = a.estimate(), b.estimate()
    la = np.log(np.asarray(a.repeat_p50_ns, float))
    lb = np.log(np.asarray(b.repeat_p50_ns, float))
    ids = paired_ids(a, b) if paired else []
    p: float | None
    spread: float | None = None
    src: str | None = None
    n_pairs = 0
    if paired and len(ids) >= 2:
        ra = {r: v for r, v in zip(a.repeat_ids, la)}
        rb = {r: v for r, v in zip(b.repeat_ids, lb)}
        design, n_pairs = "paired by repeat", len(ids)
        m, lo, hi, p = _paired(np.array([rb[r] - ra[r] for r in ids]))
    elif len(la) >= 2 and len(lb) >= 2:
        design = "unpaired repeats (Welch)"
        m, lo, hi, p = _welch(la, lb)
    else:
        design = "one run each" if len(la) == 1 and len(lb) == 1 else "one run on a side"
        m, lo, hi, p, spread, src = _one_run(a, b, la, lb, run_spread, spread_source)
    return Comparison(a.rung, a.transport, a.payload, a.gap_ms, b.gap_ms, design, len(la), len(lb), n_pairs,
                      ea.value, eb.value, eb.value - ea.value, math.exp(m) - 1, (math.exp(lo) - 1, math.exp(hi) - 1),
                      LEVEL, p, spread, src, bool(lo > 0 or hi < 0))


def match(groups_a: list[Group], groups_b: list[Group]) -> list[tuple[Group, Group]]:
    idx = {g.key: g for g in groups_b}
    pairs = [(g, idx[g.key]) for g in groups_a if g.key in idx]
    if not pairs:  # two single runs of different rung names: match on series, payload and think time
        idx2 = {_anywhere(g.key): g for g in groups_b}
        pairs = [(g, idx2[_anywhere(g.key)]) for g in groups_a if _anywhere(g.key) in idx2]
    return pairs


def _anywhere(key: CellKey) -> CellKey:
    """The cell with its rung and placement left out (its think time kept)."""
    return replace(key, place=Place("", "", key.gap_ms))


def gap_pairs(groups: list[Group]) -> list[tuple[Group, Group]]:
    """Within one sweep: each gap > 0 group against its gap-0 twin."""
    base = {g.key: g for g in groups if g.gap_ms == 0}
    twin = {g.key: replace(g.key, place=g.place.unhurried) for g in groups if g.gap_ms > 0}
    return [(base[twin[g.key]], g) for g in groups if g.gap_ms > 0 and twin[g.key] in base]


def interleaved(a: Group, b: Group) -> bool:
    """True when A's and B's repeats alternate in time (A1 B1 A2 B2 ... or B1 A1 B2 A2 ...),
    so that repeat r of A and repeat r of B form a real pair."""
    ids = paired_ids(a, b)
    if len(ids) < 2 or len(ids) != len(a.repeat_ids) or len(ids) != len(b.repeat_ids):
        return False
    ta = dict(zip(a.repeat_ids, a.started_unix))
    tb = dict(zip(b.repeat_ids, b.started_unix))
    if any(ta[r] is None or tb[r] is None for r in ids):
        return False
    seq: list[float] = []
    for r in ids:
        a_t, b_t = float(ta[r] or 0.0), float(tb[r] or 0.0)
        seq += sorted((a_t, b_t))
    return all(x < y for x, y in zip(seq, seq[1:]))


# What a baseline's recorded environment is compared on (label, path in the header).
ENV_KEYS = [
    ("software", ("software",)), ("client host", ("client_env", "hostname")),
    ("client kernel", ("client_env", "kernel")), ("client CPU", ("client_env", "cpu_model")),
    ("client pinning", ("client_env", "pinned")), ("client CPU governor", ("client_env", "cpu_governor")),
    ("client python", ("client_env", "python")), ("client packages", ("client_env", "packages")),
    ("tcp congestion control", ("client_env", "tcp_congestion_control")),
    ("server host", ("server_env", "hostname")), ("server kernel", ("server_env", "kernel")),
    ("server CPU governor", ("server_env", "cpu_governor")), ("server software", ("server_software",)),
    ("placement", ("placement",)), ("poll", ("config", "poll")), ("client CPUs", ("config", "cpu")),
    ("transport settings", ("transport_settings",)), ("peer", ("peer",)),
]


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def baseline_warnings(env_a: dict, env_b: dict, max_age_days: float = 1.0) -> list[str]:
    """What differs between the two recorded environments, and how far apart in time they
    were measured: each a line. env_*: a run's report header (see data.first_header)."""
    out = []
    from datetime import datetime

    ta, tb = env_a.get("created_utc"), env_b.get("created_utc")
    try:
        dt = (datetime.fromisoformat(str(tb).replace("Z", "+00:00")) -
              datetime.fromisoformat(str(ta).replace("Z", "+00:00"))).total_seconds() / 86400
        if abs(dt) > max_age_days:
            out.append(f"the baseline A was measured {abs(dt):.1f} days {'before' if dt > 0 else 'after'} B: a stale "
                       f"baseline compares two machines' states, not two settings; re-measure A beside B")
    except (TypeError, ValueError):
        out.append("the measurement time of A or B is not recorded: its age cannot be checked")
    for label, path in ENV_KEYS:
        va, vb = _get(env_a, path), _get(env_b, path)
        if va != vb:
            if isinstance(va, dict) and isinstance(vb, dict):
                keys = sorted(k for k in set(va) | set(vb) if va.get(k) != vb.get(k))
                diff = ", ".join(f"{k} {va.get(k)!r} -> {vb.get(k)!r}" for k in keys)
                out.append(f"{label} differ: {diff}")
            else:
                out.append(f"{label} differs: A {va!r}, B {vb!r}")
    return out


def format_table(cs: list[Comparison], label_a: str = "A", label_b: str = "B") -> str:
    lines = ["difference B - A per cell; rel = B/A - 1 with its 95% CI (repeats as the unit; design per row); "
             "n = repeats A/B (pairs)"]
    rows = []
    for c in cs:
        n = f"{c.n_a}/{c.n_b}" + (f"({c.n_pairs})" if c.n_pairs else "")
        p = "-" if c.p is None else f"{c.p:.3f}"
        rows.append([c.rung, c.transport, c.payload, c.design, n, f"{c.median_a_ns / 1e3:.1f}",
                     f"{c.median_b_ns / 1e3:.1f}", f"{c.diff_ns / 1e3:.1f}", f"{c.diff_rel:+.1%}",
                     f"{c.diff_rel_ci[0]:+.1%}..{c.diff_rel_ci[1]:+.1%}", p, c.call])
    from hopbench.analysis.tables import render

    lines.append(render(["rung", "tr", "payload", "design", "n", label_a + " p50 us", label_b + " p50 us", "diff us", "rel",
                         "rel 95% CI", "p", "call"], rows, right=set(range(4, 11)), call_column=11,
                        tones=[c.tone for c in cs]))
    spreads = {(c.spread, c.spread_source) for c in cs if c.spread is not None}
    for s, src in sorted(spreads, key=str):
        lines.append(f"run-to-run spread used where a side has one run: {s:.1%} (relative SD of a run's median; {src})")
    return "\n".join(lines)
