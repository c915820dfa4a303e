"""Paired comparison of two result folders (or, within one sweep, gap vs no gap):
per matching cell the difference of medians with a bootstrap 95% CI, the effect size in
robust standard deviations, and whether the difference is significant (CI excludes 0).

The unit of resampling is the repeat when both sides have >= 5 repeats (run-to-run spread
is the real uncertainty on these machines: the quantized-drafter study's lesson), else
the individual samples."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from hopbench.data import Group

MIN_REPEATS = 5


def robust_sigma(x: np.ndarray) -> float:
    x = np.asarray(x, float)
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def diff_of_medians(a: np.ndarray, b: np.ndarray, boot: int = 2000, seed: int = 11) -> tuple[float, float, float]:
    """median(b) - median(a) with a percentile-bootstrap 95% CI."""
    rng = np.random.default_rng(seed)
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    d = float(np.median(b) - np.median(a))
    # resample in chunks to bound memory for large samples
    diffs = np.empty(boot)
    chunk = max(1, int(2e7 // max(len(a), len(b))))
    for s in range(0, boot, chunk):
        m = min(chunk, boot - s)
        ma = np.median(a[rng.integers(0, len(a), (m, len(a)))], axis=1)
        mb = np.median(b[rng.integers(0, len(b), (m, len(b)))], axis=1)
        diffs[s:s + m] = mb - ma
    return d, float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


@dataclass
class Comparison:
    rung: str
    transport: str
    payload: str
    gap_a_ms: float
    gap_b_ms: float
    unit: str
    n_a: int
    n_b: int
    median_a_ns: float
    median_b_ns: float
    diff_ns: float
    diff_ci_ns: tuple[float, float]
    diff_rel: float
    effect_sigma: float
    significant: bool

    def to_dict(self) -> dict:
        return asdict(self)


def compare_groups(a: Group, b: Group, boot: int = 2000) -> Comparison:
    if len(a.repeat_p50_ns) >= MIN_REPEATS and len(b.repeat_p50_ns) >= MIN_REPEATS:
        unit, xa, xb = "repeat medians", np.array(a.repeat_p50_ns), np.array(b.repeat_p50_ns)
    else:
        unit, xa, xb = "samples", a.pooled.astype(float), b.pooled.astype(float)
    d, lo, hi = diff_of_medians(xa, xb, boot=boot)
    sig = np.sqrt((robust_sigma(xa) ** 2 + robust_sigma(xb) ** 2) / 2) or float("nan")
    ma = float(np.median(xa))
    return Comparison(a.rung, a.transport, a.payload, a.gap_ms, b.gap_ms, unit, len(xa), len(xb), ma,
                      float(np.median(xb)), d, (lo, hi), d / ma if ma else 0.0, d / sig, bool(lo > 0 or hi < 0))


def match(groups_a: list[Group], groups_b: list[Group]) -> list[tuple[Group, Group]]:
    idx = {(g.rung, g.transport, g.payload, g.gap_ms): g for g in groups_b}
    pairs = [(g, idx[(g.rung, g.transport, g.payload, g.gap_ms)]) for g in groups_a
             if (g.rung, g.transport, g.payload, g.gap_ms) in idx]
    if not pairs:  # two single runs of different rung names: match on transport and payload
        idx2 = {(g.transport, g.payload, g.gap_ms): g for g in groups_b}
        pairs = [(g, idx2[(g.transport, g.payload, g.gap_ms)]) for g in groups_a if (g.transport, g.payload, g.gap_ms) in idx2]
    return pairs


def gap_pairs(groups: list[Group]) -> list[tuple[Group, Group]]:
    """Within one sweep: each gap > 0 group against its gap-0 twin."""
    base = {(g.rung, g.transport, g.payload): g for g in groups if g.gap_ms == 0}
    return [(base[(g.rung, g.transport, g.payload)], g) for g in groups
            if g.gap_ms > 0 and (g.rung, g.transport, g.payload) in base]


def format_table(cs: list[Comparison], label_a: str = "A", label_b: str = "B") -> str:
    lines = [f"{'rung':<14} {'tr':<4} {'payload':<9} {'unit':<15} {label_a + ' p50 us':>11} {label_b + ' p50 us':>11} "
             f"{'diff us':>9} {'95% CI us':>21} {'rel':>7} {'sigma':>6}  verdict"]
    for c in cs:
        lines.append(f"{c.rung:<14} {c.transport:<4} {c.payload:<9} {c.unit:<15} {c.median_a_ns / 1e3:11.1f} "
                     f"{c.median_b_ns / 1e3:11.1f} {c.diff_ns / 1e3:9.1f} "
                     f"{c.diff_ci_ns[0] / 1e3:9.1f}..{c.diff_ci_ns[1] / 1e3:<9.1f} {c.diff_rel:+7.1%} {c.effect_sigma:6.2f}  "
                     f"{'significant' if c.significant else 'not significant'}")
    return "\n".join(lines)
