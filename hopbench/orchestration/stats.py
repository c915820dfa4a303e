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




HDR_RANGE_NS = (1, 3_600_000_000_000)  # 1 ns .. 1 h
HDR_DIGITS = 3  # 0.1% resolution at every magnitude


def hdr_histogram(samples_ns: np.ndarray | None = None, encoded: str | None = None) -> Any:
    """An HdrHistogram (the `hdrhistogram` package) of round trips in ns: mergeable, so targets
    on several processes or hosts add into one (HdrHistogram.add); from samples or from its
    encoded text (what a payload record keeps as `hdr`)."""
    from hdrh.histogram import HdrHistogram

    if encoded is not None:
        return HdrHistogram.decode(encoded.encode())
    h = HdrHistogram(*HDR_RANGE_NS, HDR_DIGITS)
    for v in np.clip(np.asarray(samples_ns if samples_ns is not None else [], dtype=np.int64), *HDR_RANGE_NS):
        h.record_value(int(v))
    return h


def hdr_tails(h: Any) -> dict[str, Any]:
    """p99 and p99.9 read from a histogram (0.1% resolution) and its encoded text."""
    if not h.get_total_count():
        return {"hdr_p99_ns": None, "hdr_p999_ns": None}
    return {"hdr_p99_ns": int(h.get_value_at_percentile(99.0)), "hdr_p999_ns": int(h.get_value_at_percentile(99.9))}


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal shares, 1/n = one takes all."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.any(x):
        return None
    return float(x.sum() ** 2 / (x.size * np.square(x).sum()))
