"""The Hockney model: latency = alpha + bytes / beta, per rung x transport.

Method: iteratively reweighted least squares on *relative* residuals (weights 1/y^2, so a
4 MiB point does not drown the 64 B ones across four decades) with Huber down-weighting
of outliers (robust), through the cell estimates (hopbench.estimate); CIs take the repeat
as the unit (segment_ci). Where one line does not fit (max relative residual above
RESID_LIMIT), a two-segment fit is tried at every breakpoint between sampled sizes and
kept when it cuts the weighted squared error by more than half; its breakpoint is
reported (UCX's eager -> rendezvous switch, socket-buffer limits).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hopbench.analysis.data import Group
from hopbench.estimate import norm_ppf
from hopbench.records import MSS, WIRE_FRAME, Place, Series

RESID_LIMIT = 0.15  # judgement call: +-15% is beyond the per-point CI on a quiet link
HUBER_K = 1.345


@dataclass
class Line:
    alpha_s: float
    beta_Bps: float  # bytes per second; inf when the slope is not positive
    max_rel_resid: float
    sse: float
    lo_bytes: int
    hi_bytes: int


MAD_NORMAL = 1.0 / norm_ppf(0.75)  # the MAD of a normal sample times this estimates its SD (scipy's scale="normal")


def _median(v: Any) -> float:
    """np.median of a short array, the same value (the mean of the middle two: (a + b) / 2 =
    0.5 (a + b) exactly) without np.median's ~15 us of overhead: the fit takes thousands of
    medians of a handful of residuals."""
    s = np.sort(np.asarray(v, float))
    m = len(s) // 2
    return float(s[m]) if len(s) % 2 else float(0.5 * (s[m - 1] + s[m]))


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares of y = a + b x in closed form, about the weighted means (the
    centred form is well conditioned across six decades of x; numpy's SVD lstsq gave the
    same line to ~1e-12 at 30x the cost, and a sweep's fit calls this thousands of times)."""
    sw = float(w.sum())
    xm, ym = float(w @ x) / sw, float(w @ y) / sw
    dx = x - xm
    sxx = float(w @ (dx * dx))
    b = float(w @ (dx * (y - ym))) / sxx if sxx > 0 else 0.0
    return ym - b * xm, b


def fit_line(x: np.ndarray, y: np.ndarray, iters: int = 20) -> Line:
    """Robust relative-error fit of y = a + b x; returns alpha = a, beta = 1/b.

    The IRLS loop stays hand-written: scipy's robust fit (optimize.least_squares with
    loss='huber') holds the Huber scale fixed, while this one re-estimates it from the
    residuals' MAD every iteration (Huber's proposal, as statsmodels' RLM does). The MAD is
    the median of |r - median r| (_median: a short array sorted) times the normal-consistency
    factor MAD_NORMAL: scipy's median_abs_deviation costs ~1 ms a call in its nan-policy
    wrapper, and a sweep's fit takes thousands (8.8 s of `hopbench fit` on the default sweep)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    w = 1.0 / y**2
    a = b = 0.0
    for _ in range(iters):
        prev = (a, b)
        a, b = _wls(x, y, w)
        if abs(a - prev[0]) <= 1e-12 * abs(a) and abs(b - prev[1]) <= 1e-12 * abs(b):
            break  # converged: further iterations return the same line
        r = (y - (a + b * x)) / y
        s = MAD_NORMAL * _median(np.abs(r - _median(r))) or 1e-12
        u = np.abs(r) / (HUBER_K * s)
        hub = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
        w = hub / y**2
    r = (y - (a + b * x)) / y
    return Line(alpha_s=float(a), beta_Bps=float(1.0 / b) if b > 0 else float("inf"),
                max_rel_resid=float(np.max(np.abs(r))), sse=float(np.sum(r**2)),
                lo_bytes=int(x.min()), hi_bytes=int(x.max()))


def two_segment(x: np.ndarray, y: np.ndarray, min_points: int = 3) -> tuple[int, Line, Line] | None:
    order = np.argsort(x)
    x, y = x[order], y[order]
    best = None
    for i in range(min_points, len(x) - min_points + 1):
        left, right = fit_line(x[:i], y[:i]), fit_line(x[i:], y[i:])
        sse = left.sse + right.sse
        if best is None or sse < best[0]:
            best = (sse, int(np.sqrt(x[i - 1] * x[i])), left, right)
    return None if best is None else (best[1], best[2], best[3])


@dataclass
class Fit:
    rung: str
    transport: str
    points: int
    alpha_s: float
    beta_Bps: float
    alpha_ci: tuple[float, float]
    beta_ci: tuple[float, float]
    ci_level: float
    ci_scope: str  # "repeats" (run-to-run spread included) or "within-run" (a single run)
    ci_method: str
    n_repeats: int
    segment_lo_bytes: int  # the fitted segment holding the operating payload
    segment_hi_bytes: int
    n_half_bytes: float
    n_half_tokens: float
    rate_mbit: float | None
    wire_efficiency: float | None  # beta / (rate / 8)
    goodput_ratio: float | None  # beta / (rate x 1448/1538 / 8)
    max_rel_resid: float
    breakpoint_bytes: int | None
    segments: list[dict]
    operating_bytes: int
    share_bandwidth: float  # bandwidth term / (alpha + bandwidth term) at the operating payload
    regime: str
    #: the fit's identity, typed: where (its rung, placement and think time) and what crossed;
    #: `rung` and `transport` above are their labels (Place.label, Series.label)
    place: Place
    series: Series

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _segment_for(fit_segments: list[Line], nbytes: int) -> Line:
    for seg in fit_segments:
        if nbytes <= seg.hi_bytes:
            return seg
    return fit_segments[-1]


@dataclass(frozen=True)
class SegmentCI:
    alpha_ci: tuple[float, float]
    beta_ci: tuple[float, float]
    level: float
    scope: str
    method: str
    n_repeats: int


RANDOM_GROUPS = "random groups: one fit per repeat, Student t on their spread (R-1 df)"
WITHIN_RUN_BOOT = "bootstrap of one run's cycles"


def _t_interval(center: float, per_repeat: np.ndarray, level: float) -> tuple[float, float]:
    from hopbench.analysis.dist import t_ppf

    r = len(per_repeat)
    se = float(np.std(per_repeat, ddof=1)) / np.sqrt(r)
    t = t_ppf(0.5 + level / 2, r - 1)
    return center - t * se, center + t * se


def segment_ci(x: np.ndarray, groups_by_size: list[list[Group]], seg: Line, boot: int, rng: np.random.Generator,
               level: float = 0.95) -> SegmentCI:
    """The CI of a segment's alpha and beta with the repeat as the unit.

    A repeat is one pass over every cell, so a drift shared by every cell of a repeat (the
    normal case on a shared machine) moves all its points together. Resampling each
    payload's repeats independently averages that away (the audit: beta "95%" CIs covered
    the truth about half of the time). Here each repeat is fitted on its own and the spread
    of those fits, centred on their own mean (log scale for beta: the centre and the spread
    come from one estimator; centring on the fit through the cell medians, as before,
    under-covered under independent noise), gives a Student-t
    interval (the random-groups variance estimator): coverage 90-96% of nominal 95% on
    synthetic sweeps with a 3% per-repeat factor at 2, 3 and 5 repeats
    (tests/test_coverage.py). beta is handled on the log scale of the slope 1/beta.
    One run: no run-to-run spread exists in the data; the cycles of that run are
    bootstrapped and the interval is labelled within-run."""
    reps = sorted({r for grp in groups_by_size for g in grp for r in g.repeat_ids})
    slope = 1.0 / seg.beta_Bps if np.isfinite(seg.beta_Bps) and seg.beta_Bps > 0 else 0.0
    if len(reps) >= 2:
        alphas, slopes = _repeat_fits(x, groups_by_size, reps)
        if len(alphas) >= 2:
            return _holding_point(_random_groups(alphas, slopes, slope, level), seg)
    return _holding_point(_within_run(x, groups_by_size, boot, rng, level, len(reps)), seg)


def _repeat_fits(x: np.ndarray, groups_by_size: list[list[Group]], reps: list[Any]) -> tuple[list[float], list[float]]:
    """Each repeat's own line through its cells' medians: its alpha and slope 1/beta."""
    alphas, slopes = [], []
    for r in reps:
        xs, ys = [], []
        for v, grp in zip(x, groups_by_size):
            vals = [p for g in grp for rid, p in zip(g.repeat_ids, g.repeat_p50_ns) if rid == r]
            if vals:
                xs.append(v)
                ys.append(_median(vals) / 1e9)
        if len(xs) >= 2:
            f = fit_line(np.array(xs), np.array(ys), iters=8)
            alphas.append(f.alpha_s)
            slopes.append(1.0 / f.beta_Bps if np.isfinite(f.beta_Bps) and f.beta_Bps > 0 else 0.0)
    return alphas, slopes


def _random_groups(alphas: list[float], slopes: list[float], slope: float, level: float) -> SegmentCI:
    """The random-groups interval over the repeats' fits (beta on the log scale of 1/beta)."""
    a_ci = _t_interval(float(np.mean(alphas)), np.array(alphas), level)
    sl = np.array(slopes)
    if slope > 0 and np.all(sl > 0):
        lo, hi = _t_interval(float(np.mean(np.log(sl))), np.log(sl), level)
        b_ci = (float(np.exp(-hi)), float(np.exp(-lo)))
    else:
        lo, hi = _t_interval(slope, sl, level)
        b_ci = (1.0 / hi if hi > 0 else float("inf"), 1.0 / lo if lo > 0 else float("inf"))
    return SegmentCI((float(a_ci[0]), float(a_ci[1])), b_ci, level, "repeats", RANDOM_GROUPS, len(alphas))


def _within_run(x: np.ndarray, groups_by_size: list[list[Group]], boot: int, rng: np.random.Generator, level: float,
                repeats: int) -> SegmentCI:
    """One run: its cycles bootstrapped, the interval labelled within-run."""
    pooled = [np.concatenate([g.pooled for g in grp]) / 1e9 for grp in groups_by_size]
    alphas_b, slopes_b = [], []
    for _ in range(boot):
        yb = np.array([np.median(rng.choice(u, size=min(len(u), 4000))) for u in pooled])
        f = fit_line(x, yb, iters=8)
        alphas_b.append(f.alpha_s)
        # the slope 1/beta, always finite (a flat resample has slope 0, beta infinite: percentiles
        # of betas would subtract inf from inf); the interval is inverted after
        slopes_b.append(1.0 / f.beta_Bps if np.isfinite(f.beta_Bps) and f.beta_Bps > 0 else 0.0)
    q = [50 - level * 50, 50 + level * 50]
    a_lo, a_hi = np.percentile(alphas_b, q)
    s_lo, s_hi = (float(v) for v in np.percentile(slopes_b, q))
    b_ci = (1.0 / s_hi if s_hi > 0 else float("inf"), 1.0 / s_lo if s_lo > 0 else float("inf"))
    return SegmentCI((float(a_lo), float(a_hi)), b_ci, level, "within-run", WITHIN_RUN_BOOT, repeats)


WIDENED = "; widened to hold the point estimate"


def _holding_point(ci: SegmentCI, seg: Line) -> SegmentCI:
    """The interval, widened where needed to hold the segment's own alpha and beta. The point
    is the fit through the cell medians, the interval the spread of per-repeat fits (or of
    resampled fits) about their own centre: two estimators, which part when the repeats
    agree with each other more than with the pooled medians (a fit printed beta 26,216.8
    Mbit/s with a 95% CI of 27,642.8-36,622.4; issue 42). A printed point outside its own
    interval says nothing a reader can use; the hull of both says both, at no less than
    the stated level, and the method names the widening."""
    (alo, ahi), (blo, bhi) = ci.alpha_ci, ci.beta_ci
    a, b = seg.alpha_s, seg.beta_Bps
    if alo <= a <= ahi and (blo <= b <= bhi or not np.isfinite(b)):
        return ci
    beta_ci = (min(blo, b), max(bhi, b)) if np.isfinite(b) else (blo, bhi)
    return SegmentCI((min(alo, a), max(ahi, a)), beta_ci, ci.level, ci.scope, ci.method + WIDENED, ci.n_repeats)


def why_no_fit(groups: list[Group]) -> str:
    """Why fit_groups found nothing to fit: the payload sizes each rung x transport has."""
    sizes: dict[tuple[str, str], set[int]] = {}
    for g in groups:
        sizes.setdefault((g.place.label, g.series.label), set()).add(g.request_bytes)
    has = ", ".join(f"{r}/{t} {len(s)}" for (r, t), s in sorted(sizes.items())) or "no cells"
    return (f"no fit: a line needs at least 3 payload sizes per rung x transport x gap; this folder has {has} "
            "(measure more: run --bytes grid, or a sweep)")


def fit_groups(groups: list[Group], bytes_per_token: int, operating_tokens: int, boot: int = 300,
               seed: int = 7) -> list[Fit]:
    """One Fit per (rung, transport, think time) with at least 3 payload sizes; a rung with a
    gap is named with it (records.gap_label: the gap is part of the cell)."""
    rng = np.random.default_rng(seed)
    out = []
    keys = sorted({(g.place, g.series) for g in groups},
                  key=lambda k: (k[0].rung_label, k[1].label, k[0].gap_ms))
    op_bytes = operating_tokens * bytes_per_token
    for place, series in keys:
        rung, tr = place.label, series.label
        gs = sorted((g for g in groups if g.place == place and g.series == series), key=lambda g: g.request_bytes)
        by_size: dict[int, list[Group]] = {}
        for g in gs:
            by_size.setdefault(g.request_bytes, []).append(g)
        x = np.array(sorted(by_size), dtype=float)
        if len(x) < 3:
            continue
        y = np.array([np.median([g.p50_ns for g in by_size[int(v)]]) for v in x]) / 1e9
        main = fit_line(x, y)
        segments = [main]
        bp = None
        if main.max_rel_resid > RESID_LIMIT and len(x) >= 6:
            two = two_segment(x, y)
            if two and two[1].sse + two[2].sse < 0.5 * main.sse:
                bp, segments = two[0], [two[1], two[2]]
        seg_op = _segment_for(segments, op_bytes)
        seg_mask = (x >= seg_op.lo_bytes) & (x <= seg_op.hi_bytes)
        ci = segment_ci(x[seg_mask], [by_size[int(v)] for v in x[seg_mask]], seg_op, boot, rng)
        rate = gs[0].rate_mbit
        bw_term = op_bytes / seg_op.beta_Bps
        share = bw_term / (max(seg_op.alpha_s, 0.0) + bw_term) if bw_term > 0 else 0.0
        n_half = max(seg_op.alpha_s, 0.0) * seg_op.beta_Bps
        out.append(Fit(
            rung=rung, transport=tr, points=len(x), alpha_s=seg_op.alpha_s, beta_Bps=seg_op.beta_Bps,
            alpha_ci=ci.alpha_ci, beta_ci=ci.beta_ci, ci_level=ci.level, ci_scope=ci.scope, ci_method=ci.method,
            n_repeats=ci.n_repeats, segment_lo_bytes=seg_op.lo_bytes, segment_hi_bytes=seg_op.hi_bytes,
            n_half_bytes=n_half, n_half_tokens=n_half / bytes_per_token,
            rate_mbit=rate,
            wire_efficiency=seg_op.beta_Bps / (rate * 1e6 / 8) if rate else None,
            goodput_ratio=seg_op.beta_Bps / (rate * 1e6 / 8 * MSS / WIRE_FRAME) if rate else None,
            max_rel_resid=main.max_rel_resid, breakpoint_bytes=bp, segments=[asdict(s) for s in segments],
            operating_bytes=op_bytes, share_bandwidth=share,
            regime="bandwidth-bound" if share > 0.5 else "latency-bound", place=place, series=series))
    return out


def crossover(fits: list[Fit]) -> dict[str, str]:
    """Per transport, the study's sentence: where the regime flips along the rungs
    (ordered slowest to fastest by fitted beta)."""
    out = {}
    for tr in sorted({f.transport for f in fits}):
        fs = sorted((f for f in fits if f.transport == tr), key=lambda f: f.beta_Bps)
        bw = [f for f in fs if f.regime == "bandwidth-bound"]
        lat = [f for f in fs if f.regime == "latency-bound"]
        if not bw:
            out[tr] = (f"{tr}: every rung is latency-bound at the operating payload; no crossover within "
                       f"{', '.join(f.rung for f in fs)}")
        elif not lat:
            out[tr] = f"{tr}: every rung is bandwidth-bound at the operating payload; the crossover lies above {fs[-1].rung}"
        else:
            x, y = bw[-1], lat[0]
            clean = fs.index(x) < fs.index(y) and all(f.regime == "bandwidth-bound" for f in fs[: fs.index(x) + 1])
            note = "" if clean else " (the rungs do not order cleanly; see the table)"
            out[tr] = (f"{tr}: {', '.join(f.rung for f in bw)} bandwidth-bound, {', '.join(f.rung for f in lat)} "
                       f"latency-bound: the crossover sits between {x.rung} and {y.rung}{note}")
    return out


#: a shaped cell this far over wire + the unshaped round trip is judged: the host, not the link
LOADED_OVER = 0.5
LOADED_WARNING = "over by more than the link explains: a loaded host?"


def wire_check(groups: list[Group], bytes_per_token: int, tokens: int, unshaped_rung: str = "emu-unshaped") -> list[dict]:
    """Measured hop at T tokens on shaped rungs vs the physical wire time
    (request bytes x 1538/1448 x 8 / rate) plus the unshaped round trip of the same transport.
    A streamed series is not checked here: its samples are exposed hops, checked against the
    streamed model at run time (docs/STREAM.md)."""
    rows = []
    nbytes = tokens * bytes_per_token
    groups = [g for g in groups if not g.streamed]
    base = {g.transport: g.p50_ns for g in groups if g.rung == unshaped_rung and g.request_bytes == nbytes and g.gap_ms == 0}
    for g in groups:
        if g.rate_mbit and g.request_bytes == nbytes and g.gap_ms == 0 and g.transport in base:
            e = g.estimate()
            wire = nbytes * WIRE_FRAME / MSS * 8 / (g.rate_mbit * 1e6) * 1e9
            expected = wire + base[g.transport]
            rows.append({"rung": g.rung, "transport": g.transport, "tokens": tokens, "measured_ns": e.value,
                         "measured_lo_ns": e.lo, "measured_hi_ns": e.hi, "level": e.level, "scope": e.scope,
                         "repeats": e.n_repeats,
                         "wire_ns": wire, "unshaped_ns": base[g.transport], "expected_ns": expected,
                         "deviation": e.value / expected - 1})
    return rows
