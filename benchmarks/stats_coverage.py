"""How often hopbench's intervals cover the truth (seeded Monte Carlo, synthetic sweeps of
known alpha and beta with a 3% drift factor shared by every cell of a repeat), and
compare's false-positive rate and power under run-level offsets. Prints the figures;
tests/test_estimate.py asserts the same properties with fewer trials."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_estimate import _cell_pair, synth_sweep  # noqa: E402

from hopbench.analysis import compare as C  # noqa: E402
from hopbench.analysis import fit as F  # noqa: E402

TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 400


def _wilson(k: int, n: int, z: float = 2.5758) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n at 99% (a coverage row is one of 18)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def main() -> None:
    from math import comb

    rng = np.random.default_rng(2026)
    rows: list[bool] = []
    # how often an interval that covers exactly 95% shows >= 38 of 40: a count of 40 is too
    # few to tell 95% from 90% (issue 27 asked for >= 38 of 40 per row)
    p38 = sum(comb(40, k) * 0.95**k * 0.05 ** (40 - k) for k in (38, 39, 40))
    print(f"(a correct 95% interval shows >= 38 of 40 in {p38:.0%} of rows; each row's coverage is given with "
          f"its 99% Wilson interval over {TRIALS} trials instead)")
    for noise, kw in (("per-repeat drift (a 3% factor shared by a repeat's cells, 1% per cell)",
                       {"rep_sd": 0.03, "cell_sd": 0.01}),
                      ("independent noise (3% per cell and repeat, nothing shared)", {"rep_sd": 0.0, "cell_sd": 0.03})):
        print(f"fit CI coverage of the true alpha and beta, {TRIALS} trials each; {noise}")
        for name, alpha, beta in (("1 GbE-like", 150e-6, 117.5e6), ("RoCE-like", 190e-6, 25e9),
                                  ("100 Mb-like", 300e-6, 11.7e6)):
            for reps in (2, 3, 5):
                hb = ha = 0
                first40 = 0
                for i in range(TRIALS):
                    (f,) = F.fit_groups(synth_sweep(rng, alpha, beta, reps, **kw), 61440, 3)
                    hit = f.beta_ci[0] <= beta <= f.beta_ci[1]
                    hb += hit
                    first40 += hit and i < 40
                    ha += f.alpha_ci[0] <= alpha <= f.alpha_ci[1]
                lo, hi = _wilson(hb, TRIALS)
                ok = "consistent with 95%" if lo <= 0.95 <= hi else ("OVER-covers" if lo > 0.95 else "UNDER-covers")
                print(f"  {name:<12} {reps} repeats: beta {hb / TRIALS:6.1%} [{lo:.1%}-{hi:.1%}] {ok:<19} "
                      f"(first 40 sweeps: {first40} of 40)  alpha {ha / TRIALS:6.1%}  (nominal 95%)")
                rows.append(lo <= 0.95 <= hi)
    print(f"fit: {sum(rows)} of {len(rows)} beta rows consistent with their stated 95% (99% Wilson interval)")
    print(f"compare, {TRIALS} trials each: share of cell pairs called significant")
    for label, reps, kw, paired in (("paired by repeat, 5 repeats, 5% shared offset", 5, {}, True),
                                    ("unpaired, 5 repeats each, 5% offsets", 5, {}, False),
                                    ("one run each, 8% run offsets", 1, {"rep_sd": 0.0, "cell_sd": 0.08}, False)):
        null = sum(C.compare_groups(*_cell_pair(rng, reps, 1.0, **kw), paired=paired).significant
                   for _ in range(TRIALS)) / TRIALS
        pw = sum(C.compare_groups(*_cell_pair(rng, reps, 1.10, **kw), paired=paired).significant
                 for _ in range(TRIALS)) / TRIALS
        print(f"  {label:<48} false positives {null:6.1%}   +10% shift found {pw:6.1%}")


if __name__ == "__main__":
    main()
