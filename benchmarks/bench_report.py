"""Benchmark (not a test): `hopbench report` on a sweep folder against its 3 s target
(issue 28 item 9), beside `hopbench plot` (the same three figures through matplotlib, the
way the report drew them before), interleaved, several repeats, in one run.

    python benchmarks/bench_report.py [FOLDER] [--repeats 3] [--target 3.0]

FOLDER defaults to the newest complete `make sweep` folder (results/*-sweep-default-default).
Each command runs as a user runs it: a fresh process (imports included), its output into a
temporary file. Then one in-process pass prints where the report's time goes (imports, the
folder read and checked, the analysis, the document, the figures). Prints medians and the
ratios report / target and report / plot; exits 1 when the report's median misses the target."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def newest_sweep() -> Path:
    for top in sorted((ROOT / "results").glob("*-sweep-default-default/sweep.json"), reverse=True):
        try:
            if json.loads(top.read_text()).get("status") == "complete":
                return top.parent
        except (OSError, ValueError):
            continue
    raise SystemExit("bench-report: no complete default sweep under results/: run `make sweep` first, "
                     "or give a folder")


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"bench-report: {' '.join(cmd)} failed: {r.stderr.strip()[-400:]}")
    return dt


STAGES = r"""
import sys, time, json
t0 = time.perf_counter()
from pathlib import Path
from hopbench.analysis import report as RP
from hopbench.analysis.data import load_groups, one_reading
from hopbench.shape import load_shape
import numpy, pandas, scipy.special
t = {"imports": time.perf_counter() - t0}
folder = Path(sys.argv[1])
with one_reading():
    t1 = time.perf_counter(); load_groups(folder); t["read + check"] = time.perf_counter() - t1
    t1 = time.perf_counter(); a = RP.analyse(folder, load_shape(None)); t["analysis"] = time.perf_counter() - t1
    t1 = time.perf_counter(); doc = RP.build_document(a); t["document"] = time.perf_counter() - t1
    t1 = time.perf_counter(); RP.render(a, doc); t["figures + page"] = time.perf_counter() - t1
print(json.dumps(t))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=3.0, help="seconds (issue 28 item 9: 3 s)")
    a = ap.parse_args()
    folder = (a.folder or newest_sweep()).resolve()
    cells = len(list((folder / "cells").glob("*/*/*/*")))
    print(f"folder {folder} ({cells} cell folders); {a.repeats} interleaved repeats, a fresh process each")
    hb = [sys.executable, "-m", "hopbench"]
    rep: list[float] = []
    plot: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            rep.append(timed(hb + ["report", str(folder), "-o", f"{tmp}/report-{i}.html"]))
            plot.append(timed(hb + ["plot", str(folder)]))  # rewrites the folder's derived plots/
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    r, p = med(rep), med(plot)
    print(f"hopbench report  median {r:6.2f} s  (runs: {', '.join(f'{x:.2f}' for x in rep)})")
    print(f"hopbench plot    median {p:6.2f} s  (runs: {', '.join(f'{x:.2f}' for x in plot)}; matplotlib, PNG + SVG)")
    stages = json.loads(subprocess.run([sys.executable, "-c", STAGES, str(folder)], capture_output=True, text=True,
                                       cwd=ROOT, check=True).stdout)
    print("report stages (one in-process pass): " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()))
    print(f"ratio report / target ({a.target:g} s): {r / a.target:.2f}   report / plot: {r / p:.2f}")
    verdict = "PASS" if r <= a.target else "MISS"
    print(f"{verdict}: report median {r:.2f} s {'<=' if r <= a.target else '>'} {a.target:g} s")
    sys.exit(0 if r <= a.target else 1)


if __name__ == "__main__":
    main()
