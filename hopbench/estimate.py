"""The one estimator: a cell's repeats -> (estimate, interval, n, method, level).

Every figure hopbench prints or writes for a cell (summary.csv, fit, verdict, export,
plot, compare) comes from `cell_estimate`, so the same cell has the same number
everywhere.

The unit is the repeat (a whole run of the cell). On shared machines the run-to-run spread
is the real uncertainty (the sister study: +-20% between runs, medians of three repeats
could not resolve a 9% effect), so cycles inside one run are not independent draws of
"the link's latency": a CI over pooled cycles covers only that run.

- point estimate: the median of the repeat medians (one run: that run's median);
- interval, two repeats or more: the distribution-free order-statistic interval of the
  median of the repeat medians. Its coverage is exact (binomial(n, 1/2)) and is reported
  as the *achieved* level: the narrowest symmetric interval reaching the asked level, or,
  when no interval can (n <= 5 for 95%), the full range [min, max] with its true level
  (50% at 2 repeats, 75% at 3, 87.5% at 4, 93.75% at 5). Never labelled 95% when it is not.
- one run: no run-level interval exists. The within-run interval (order statistics over
  that run's cycles) is carried with `scope="within-run"` so tables can say that it does
  not include the run-to-run spread.

Hand-written (no scipy) because this module is on the measuring path: `hopbench run` on a
remote host needs numpy only. tests/test_estimate.py checks it against scipy.stats.binom.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

LEVEL = 0.95

REPEAT_METHOD = "order statistics of repeat medians"
WITHIN_RUN_METHOD = "order statistics of one run's cycles"


def binom_half_cdf(c: int, n: int) -> float:
    """P(B <= c) for B ~ Binomial(n, 1/2), exact (integer arithmetic)."""
    if c < 0:
        return 0.0
    return float(sum(math.comb(n, j) for j in range(min(c, n) + 1)) / 2**n)


def ranks_for_level(n: int, level: float = LEVEL) -> tuple[int, int, float]:
    """0-based ranks (lo, hi) of the narrowest symmetric order-statistic interval of the
    median whose coverage is >= level, and that coverage. When no interval reaches the
    level, the full range and its (lower) coverage."""
    if n < 1:
        raise ValueError("need at least one value")
    if n == 1:
        return 0, 0, 0.0
    if n > 1000:  # normal approximation of the binomial, one rank wider per side (safe side)
        z = float(norm_ppf(0.5 + level / 2))
        c = max(0, int(math.floor(n / 2 - z * math.sqrt(n) / 2)) - 1)
        return c, n - 1 - c, 1 - 2 * _norm_cdf((c + 0.5 - n / 2) / (math.sqrt(n) / 2))
    # walk the rank offset c up while 1 - 2 P(B <= c) still reaches the level: P(B <= c) is
    # accumulated exactly in integers, comb(n, c) from comb(n, c - 1) (O(n), not O(n^2) sums)
    total = 2**n
    term = cum = 1  # comb(n, 0), P(B <= 0) * 2^n
    best = 0
    for c in range((n - 1) // 2 + 1):
        if c:
            term = term * (n - c + 1) // c
            cum += term
        if total - 2 * cum >= level * total:
            best = c
        else:
            break
    c = best
    cov = 1 - 2 * binom_half_cdf(c, n)
    return c, n - 1 - c, cov


def _norm_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def norm_ppf(p: float) -> float:
    """The standard normal quantile (scipy.stats.norm.ppf): the standard library's
    NormalDist (Wichura's AS241, full double precision); the one definition hopbench uses."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def median_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(lo, hi, achieved level) of the distribution-free interval of the median."""
    x = np.sort(np.asarray(values, dtype=float))
    lo, hi, cov = ranks_for_level(len(x), level)
    return float(x[lo]), float(x[hi]), cov


def looked_level(looks: int, level: float = LEVEL) -> float:
    """The level each look's interval is taken at when a run may stop at any of `looks` looks
    (Bonferroni over the looks: the chance that any look's interval misses is at most
    1 - level, so the interval a run stops with covers the median at `level` whatever rule
    stopped it)."""
    return 1 - (1 - level) / max(1, looks)


def sequential_stop(values: Sequence[float] | np.ndarray, target: float, halfwidth: float, looks: int,
                    level: float = LEVEL) -> tuple[str | None, tuple[float, float, float]]:
    """A sequential look at paired ratios: the median's interval at the looked level
    (looked_level), and why to stop now, or None to go on: "meets" (the interval lies at or
    below `target`), "misses" (above it), or "narrow" (within `halfwidth` of the median on
    both sides). The interval the run stops with keeps its coverage (benchmarks/
    sequential_coverage.py measures it)."""
    lo, hi, achieved = median_interval(values, looked_level(looks, level))
    med = float(np.median(np.asarray(values, dtype=float)))
    if hi <= target:
        return "meets", (lo, hi, achieved)
    if lo > target:
        return "misses", (lo, hi, achieved)
    if max(med - lo, hi - med) <= halfwidth * med:
        return "narrow", (lo, hi, achieved)
    return None, (lo, hi, achieved)


@dataclass(frozen=True)
class Estimate:
    """A cell's latency estimate. Units are those of the input (ns in hopbench)."""

    value: float
    lo: float | None
    hi: float | None
    level: float | None  # the achieved coverage of [lo, hi]
    scope: str  # "repeats" (run-to-run spread included) or "within-run" (one run: it is not)
    method: str
    n_repeats: int
    n_samples: int

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    def label(self) -> str:
        """e.g. '93.8% CI over 5 repeats' / 'within-run 95% CI, 1 run'."""
        if not self.has_interval or self.level is None:
            return f"no interval ({self.n_repeats} repeat{'s' if self.n_repeats != 1 else ''})"
        if self.scope == "within-run":
            return f"within-run {pct(self.level)} CI, 1 run of {self.n_samples} cycles"
        return f"{pct(self.level)} CI over {self.n_repeats} repeats"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def shifted(self, delta: float) -> "Estimate":
        """The same estimate with a known constant added (a measured extraction cost)."""
        return Estimate(self.value + delta, None if self.lo is None else self.lo + delta,
                        None if self.hi is None else self.hi + delta, self.level, self.scope, self.method,
                        self.n_repeats, self.n_samples)

    def scaled(self, factor: float) -> "Estimate":
        return Estimate(self.value * factor, None if self.lo is None else self.lo * factor,
                        None if self.hi is None else self.hi * factor, self.level, self.scope, self.method,
                        self.n_repeats, self.n_samples)


def median_text(values: Sequence[float], fmt: str = ".3f") -> str:
    """The median of a few runs as printed beside its distribution-free interval, its
    achieved level and n: '0.172 [0.158-0.178, 75%, n = 3]'; one value is printed alone."""
    v = [float(x) for x in values]
    if not v:
        return "-"
    med = f"{float(np.median(v)):{fmt}}"
    if len(v) < 2:
        return f"{med} (n = 1)"
    lo, hi, level = median_interval(v)
    return f"{med} [{lo:{fmt}}-{hi:{fmt}}, {pct(level)}, n = {len(v)}]"


def pct(level: float) -> str:
    """A level as printed: 95%, 93.8%, 75%."""
    s = f"{level * 100:.1f}".rstrip("0").rstrip(".")
    return f"{s}%"


def cell_estimate(repeat_medians: Sequence[float], within_run_samples: np.ndarray | None = None,
                  n_samples: int | None = None, level: float = LEVEL) -> Estimate:
    """The estimate of one cell from its repeats' medians. `within_run_samples`: the timed
    cycles of the single run, used only when there is exactly one repeat."""
    reps = np.asarray(repeat_medians, dtype=float)
    if reps.size == 0:
        raise ValueError("a cell needs at least one repeat")
    n_s = int(n_samples if n_samples is not None else (0 if within_run_samples is None else len(within_run_samples)))
    if reps.size >= 2:
        lo, hi, cov = median_interval(reps, level)
        return Estimate(float(np.median(reps)), lo, hi, cov, "repeats", REPEAT_METHOD, int(reps.size), n_s)
    if within_run_samples is not None and len(within_run_samples) >= 2:
        x = np.sort(np.asarray(within_run_samples, dtype=float))
        lo, hi, cov = median_interval(x, level)
        return Estimate(float(reps[0]), lo, hi, cov, "within-run", WITHIN_RUN_METHOD, 1, n_s)
    return Estimate(float(reps[0]), None, None, None, "within-run", WITHIN_RUN_METHOD, 1, n_s)


# ---- drift: a ramp inside a run, a trend across repeats ------------------------------

# A shift smaller than this is not called drift even when it is significant: with
# thousands of samples any 1% wobble is significant. 3% is a judgement call (the seeds'
# ramps were 5-20%), not a derived number.
DRIFT_MIN_REL = 0.03
DRIFT_P = 0.01  # in-run ramp: one test per payload and run, so a strict threshold
TREND_P = 0.05


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value, normal approximation with tie correction and
    continuity correction. Hand-written (the measuring path has numpy only); it agrees with
    scipy.stats.mannwhitneyu(method='asymptotic') (tests/test_estimate.py)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    n1, n2 = len(a), len(b)
    allv = np.concatenate([a, b])
    order = np.argsort(allv, kind="mergesort")
    ranks = np.empty(len(allv))
    sorted_v = allv[order]
    i = 0
    tie_term = 0.0
    while i < len(sorted_v):  # average ranks over ties
        j = i
        while j + 1 < len(sorted_v) and sorted_v[j + 1] == sorted_v[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return float(min(1.0, 2 * (1 - _norm_cdf(max(z, 0.0)))))


def drift(samples_in_order: np.ndarray) -> dict[str, Any]:
    """A ramp inside one run: the first third of the cycles against the last third (time
    order), Mann-Whitney U. Flagged when p < DRIFT_P and the medians differ by more than
    DRIFT_MIN_REL. Works from 12 cycles (4 per third): the 100 Mbit operating payload gets
    ~23 cycles per repeat."""
    x = np.asarray(samples_in_order, dtype=float)
    n = len(x)
    if n < 12:
        return {"drift_rel": None, "drift": False, "drift_p": None}
    third = n // 3
    first, last = x[:third], x[-third:]
    m1, m3 = float(np.median(first)), float(np.median(last))
    rel = (m3 - m1) / m1 if m1 else 0.0
    p = mann_whitney_p(first, last)
    return {"drift_rel": rel, "drift": bool(p < DRIFT_P and abs(rel) > DRIFT_MIN_REL), "drift_p": p}


def kendall_trend_p(values: Sequence[float]) -> float:
    """Two-sided p of Kendall's tau between order and y: exact (all permutations counted by
    the Mahonian recurrence) without ties, which is the case for repeat factors."""
    y = np.asarray(values, float)
    n = len(y)
    if n < 3:
        return 1.0
    s = 0
    for i in range(n):
        s += int(np.sum(np.sign(y[i + 1:] - y[i])))
    # distribution of the number of inversions for n items (Mahonian numbers)
    dist = [1]
    for m in range(2, n + 1):
        new = [0] * (len(dist) + m - 1)
        for k, c in enumerate(dist):
            for j in range(m):
                new[k + j] += c
        dist = new
    total = math.factorial(n)
    pairs = n * (n - 1) // 2
    # S = pairs - 2 * inversions; P(|S| >= |s|)
    tail = sum(c for inv, c in enumerate(dist) if abs(pairs - 2 * inv) >= abs(s))
    return tail / total


def repeat_factors(cells: Sequence[tuple[Sequence[int], Sequence[float]]]) -> dict[int, float]:
    """Per repeat index, the median over cells of (repeat median / cell median): the
    factor a repeat shares with every cell measured in it."""
    ratios: dict[int, list[float]] = {}
    for ids, values in cells:
        meds = np.asarray(values, float)
        if len(meds) < 2:
            continue
        m = float(np.median(meds))
        if m <= 0:
            continue
        for r, v in zip(ids, meds):
            ratios.setdefault(int(r), []).append(v / m)
    return {r: float(np.median(v)) for r, v in sorted(ratios.items())}


def repeat_trend(cells: Sequence[tuple[Sequence[int], Sequence[float]]]) -> dict[str, Any]:
    """A trend across repeat order (the repeats are measured one after another, so repeat
    order is time order): Kendall's test on the per-repeat shared factors. Flagged when
    p < TREND_P and the factors span more than DRIFT_MIN_REL. With 5 repeats only a
    monotone series reaches p < 0.05 (p = 0.017), so a flag means a clear ramp."""
    f = repeat_factors(cells)
    if len(f) < 3:
        return {"factors": f, "p": None, "span_rel": None, "trend": False}
    vals = list(f.values())
    p = kendall_trend_p(vals)
    span = max(vals) - min(vals)
    return {"factors": f, "p": p, "span_rel": span, "trend": bool(p < TREND_P and span > DRIFT_MIN_REL)}
