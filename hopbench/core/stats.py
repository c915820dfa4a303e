"""Per-payload statistics from raw round-trip samples (ns)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hopbench.estimate import drift, median_interval


def summarize(samples_ns: np.ndarray) -> dict[str, Any]:
    """Summary of timed samples in ns: n, min, p50, p90, p99, p99.9, max, mean, std,
    within-run 95% CI of the median, and a ramp check (first vs last third)."""
    x = np.sort(np.asarray(samples_ns, dtype=np.int64))
    n = len(x)
    if n == 0:
        return {"n": 0}
    q = np.percentile(x, [50, 90, 99, 99.9])
    lo, hi, level = median_interval(x)
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
        "p50_ci_level": level,  # within this run (cycles as the unit): see hopbench.estimate
    }
    out.update(drift(np.asarray(samples_ns, dtype=np.int64)))
    return out


