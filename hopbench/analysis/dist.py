"""The few distribution functions the analysis needs, in the standard library's terms:
importing scipy costs ~1.5 s (scipy.stats) or ~0.5 s (scipy.special) on the development
VM, a sixth to a half of a report's 3 s budget, for five functions. The normal quantile is
hopbench.estimate's (statistics.NormalDist, full double precision); Student's t comes from
the regularized incomplete beta function by its continued fraction (modified Lentz, as in
Numerical Recipes' betacf) and its quantile by bisection. tests/test_estimate.py checks
each against scipy.stats to 1e-9 relative."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hopbench.estimate import norm_ppf

__all__ = ["betainc", "norm_ppf", "norm_sf", "t_ppf", "t_sf", "t_two_sided_p", "ttest_1samp_p", "welch_p"]


def norm_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z (scipy.stats.norm.sf)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T_df > t) (scipy.stats.t.sf)."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_ppf(p: float, df: float) -> float:
    """Student's t quantile with df degrees of freedom (scipy.stats.t.ppf), by bisection."""
    if not 0.0 < p < 1.0:
        return math.copysign(math.inf, p - 0.5) if p != 0.5 else 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return 0.5 * (lo + hi)


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p of a t statistic: 2 P(T_df > |t|)."""
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def ttest_1samp_p(d: Any, mu: float = 0.0) -> float:
    """scipy.stats.ttest_1samp(d, mu).pvalue."""
    d = np.asarray(d, float)
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    return t_two_sided_p((float(d.mean()) - mu) / se, len(d) - 1)


def welch_p(b: Any, a: Any) -> float:
    """scipy.stats.ttest_ind(b, a, equal_var=False).pvalue."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t_two_sided_p((float(b.mean()) - float(a.mean())) / math.sqrt(va + vb), df)
