"""How often a sequential run's interval covers the truth (issue 66: decide each size in less
device time by stopping it once its interval is decided either way). Seeded Monte Carlo of
benchmarks/native_paired.py's stop rule: pairs drawn one at a time, a look after every
`--every` pairs from the `--first`, the run stopped at the first look whose interval of the
median lies at or below the target ("meets"), above it ("misses") or within +-halfwidth
("narrow"), or at `--max-pairs`.

Three rules side by side: before (native_paired until now: a look after every pair from
the 8th at 95%, stopping only once within +-halfwidth), naive (the looks below at the
nominal 95%, stopping once decided or narrow: optional stopping erodes the level) and
corrected (hopbench.estimate.sequential_stop: every look at 1 - 0.05 / looks, Bonferroni
over the looks). Per distribution of the paired ratios: the final interval's real coverage of the
true median (with its 99% Wilson interval), how often a decision is wrong (meets while the
truth is above the target, or misses while it is at or below), and the mean pairs used.

The distributions: lognormal spreads of 1% and 3%, the 3% one with 10% of pairs 15% high,
and the measured pairs of docs/native/*.json (H100 host, tcp and ucx, 9-20 pairs a size),
resampled with a 0.2% jitter so that the median is one value. Targets sit at the truth and
2% on either side of it (the hard cases for a decision), and 8% above it (a size far from
its target, as tcp at 64 B against 1.10: decided at the first look).

    python benchmarks/sequential_coverage.py [--trials 2000] [--first 8] [--every 8] [--max-pairs 40]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Callable

import numpy as np

from hopbench.estimate import LEVEL, median_interval, sequential_stop

ROOT = Path(__file__).resolve().parent.parent
Draw = Callable[[np.random.Generator, int], np.ndarray]


def _wilson(k: int, n: int, z: float = 2.5758) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def _naive(values: np.ndarray, target: float, halfwidth: float) -> tuple[str | None, tuple[float, float, float]]:
    lo, hi, level = median_interval(values, LEVEL)
    med = float(np.median(values))
    if hi <= target:
        return "meets", (lo, hi, level)
    if lo > target:
        return "misses", (lo, hi, level)
    return ("narrow" if max(med - lo, hi - med) <= halfwidth * med else None), (lo, hi, level)


def one_run(draw: Draw, rng: np.random.Generator, target: float, a: argparse.Namespace,
            rule: str) -> tuple[str, float, float, int]:
    """One sequential run: (why it stopped, lo, hi, pairs). `rule`: "before" (native_paired
    until now: a look after every pair from the 8th, 95%, stopping only once narrow),
    "naive" (its looks, 95%, stopping once decided or narrow) or "corrected"
    (hopbench.estimate.sequential_stop)."""
    step = 1 if rule == "before" else a.every
    first = 8 if rule == "before" else a.first
    at = range(first, a.max_pairs + 1, step)
    values = draw(rng, a.max_pairs)
    lo = hi = 0.0
    for n in at:
        x = values[:n]
        stop, (lo, hi, _) = sequential_stop(x, target, a.halfwidth, len(at)) if rule == "corrected" else \
            _naive(x, target, a.halfwidth)
        if rule == "before" and stop != "narrow":
            stop = None
        if stop is not None:
            return stop, lo, hi, n
    return "max", lo, hi, a.max_pairs


def _lognormal(sd: float, outliers: float = 0.0, high: float = 0.15) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        x = np.exp(rng.normal(0.0, sd, n))
        return np.where(rng.random(n) < outliers, x * (1 + high), x)
    return draw


def _measured() -> dict[str, np.ndarray]:
    out = {}
    for f in sorted((ROOT / "docs" / "native").glob("*paired*.json")):
        for r in json.loads(f.read_text())["rows"]:
            if len(r.get("ratios") or []) >= 9:
                out[f"measured {r['transport']} {r['bytes']} B ({len(r['ratios'])} pairs)"] = np.asarray(r["ratios"])
    return out


def _resampled(pool: np.ndarray) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(pool, n) * np.exp(rng.normal(0.0, 0.002, n))
    return draw


def _truth(draw: Draw) -> float:
    return float(np.median(draw(np.random.default_rng(1), 400_000)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--first", type=int, default=8)
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--max-pairs", type=int, default=40)
    ap.add_argument("--halfwidth", type=float, default=0.03)
    a = ap.parse_args()
    looks = len(range(a.first, a.max_pairs + 1, a.every))
    print(f"looks at {list(range(a.first, a.max_pairs + 1, a.every))} pairs ({looks}); corrected: each look at "
          f"{1 - (1 - LEVEL) / looks:.2%}; stop when decided at the target or within +-{a.halfwidth:.0%}; "
          f"{a.trials} trials a row, coverage with its 99% Wilson interval")
    dists: dict[str, Draw] = {"lognormal 1%": _lognormal(0.01), "lognormal 3%": _lognormal(0.03),
                              "lognormal 3%, 10% of pairs +15%": _lognormal(0.03, 0.10)}
    dists.update({k: _resampled(v) for k, v in _measured().items()})
    print(f"{'distribution':<44} {'target':>7} {'rule':>9} {'coverage':>8} {'99% Wilson':>14} {'wrong':>6} "
          f"{'pairs':>6}")
    rng = np.random.default_rng(2026)
    for name, draw in dists.items():
        truth = _truth(draw)
        for shift in (-0.02, 0.0, 0.02, 0.08):
            target = truth * (1 + shift)
            for rule in ("before", "naive", "corrected"):
                covered = wrong = pairs = 0
                for _ in range(a.trials):
                    why, lo, hi, n = one_run(draw, rng, target, a, rule)
                    covered += lo <= truth <= hi
                    wrong += (why == "meets" and truth > target) or (why == "misses" and truth <= target)
                    pairs += n
                w = _wilson(covered, a.trials)
                print(f"{name:<44} {shift:>+7.0%} {rule:>9} "
                      f"{covered / a.trials:>8.1%} {w[0]:>6.1%}-{w[1]:<6.1%} {wrong / a.trials:>6.1%} "
                      f"{pairs / a.trials:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
