"""Per-payload statistics from raw round-trip samples (ns)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Z95 = 1.959963984540054


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based order-statistic ranks (lo, hi) bracketing the median with at least
    `confidence` coverage, distribution-free (binomial(n, 1/2)). Exact for n <= 1000,
    normal approximation above (error < 0.1% there)."""
    if n < 1:
        raise ValueError("need at least one sample")
    alpha = 1 - confidence
    if n <= 1000:
        # coverage of [x_(c), x_(n-1-c)] (0-based) is 1 - 2 P(B <= c), B ~ Bin(n, 1/2):
        # find the first j with P(B <= j) > alpha/2, then c = j - 1.
        cdf = 0.0
        j = 0
        log_half_n = n * math.log(0.5)
        while j < n // 2:
            p = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + log_half_n)
            if cdf + p > alpha / 2:
                break
            cdf += p
            j += 1
        c = max(j - 1, 0)  # tiny n (< 6): no interval reaches 95%, the full range is the best
        return c, n - 1 - c
    half = Z95 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return lo, hi


def median_ci(sorted_x: np.ndarray) -> tuple[float, float]:
    lo, hi = median_ci_ranks(len(sorted_x))
    return float(sorted_x[lo]), float(sorted_x[hi])


def summarize(samples_ns: np.ndarray) -> dict[str, Any]:
    """Summary of timed samples in ns: n, min, p50, p90, p99, p99.9, max, mean, std,
    95% CI of the median, and a drift check (first vs last third)."""
    x = np.sort(np.asarray(samples_ns, dtype=np.int64))
    n = len(x)
    if n == 0:
        return {"n": 0}
    q = np.percentile(x, [50, 90, 99, 99.9])
    lo, hi = median_ci(x)
    out: dict[str, Any] = {
        "n": n,
        "min_ns": int(x[0]),
        "p50_ns": float(q[0]),
        "p90_ns": float(q[1]),
        "p99_ns": float(q[2]),
        "p999_ns": float(q[3]),
        "max_ns": int(x[-1]),
        "mean_ns": float(x.mean()),
        "std_ns": float(x.std(ddof=1)) if n > 1 else 0.0,
        "p50_ci_lo_ns": lo,
        "p50_ci_hi_ns": hi,
    }
    out.update(drift(np.asarray(samples_ns, dtype=np.int64)))
    return out


# A shift smaller than this is not called drift even when the CIs separate: with
# thousands of samples the CIs get so narrow that a 1% wobble would always be flagged.
# The 3% is a judgement call (the seeds' ramps were 5-20%), not a derived number.
DRIFT_MIN_REL = 0.03


def drift(samples_in_order: np.ndarray) -> dict[str, Any]:
    """Compare the medians of the first and last thirds (in time order). Drift is flagged
    when their 95% CIs do not overlap and they differ by more than DRIFT_MIN_REL."""
    n = len(samples_in_order)
    if n < 30:
        return {"drift_rel": None, "drift": False}
    third = n // 3
    first = np.sort(samples_in_order[:third])
    last = np.sort(samples_in_order[-third:])
    m1, m3 = float(np.median(first)), float(np.median(last))
    (a_lo, a_hi), (b_lo, b_hi) = median_ci(first), median_ci(last)
    rel = (m3 - m1) / m1 if m1 else 0.0
    separated = a_hi < b_lo or b_hi < a_lo
    return {"drift_rel": rel, "drift": bool(separated and abs(rel) > DRIFT_MIN_REL)}
