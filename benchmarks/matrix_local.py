"""Demonstration (not a test): `hopbench matrix` on a local Ray cluster of N nodes, each in its
own network namespace on one bridge, one node's link shaped slower. Needs root and Ray.

    python benchmarks/matrix_local.py [--nodes 4] [--slow 2] [--slow-mbit 100] [--out DIR]

Prints what `hopbench matrix --quick --concurrency 1` prints (the hop per pair, the named
outliers, the heatmaps) and how long it took; cleans up its namespaces and Ray processes."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--slow", type=int, default=2)
    ap.add_argument("--slow-mbit", type=float, default=100.0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    from hopbench.testing import raycluster

    why = raycluster.available()
    if why:
        raise SystemExit(f"cannot build a local cluster here: {why}")
    out = a.out or ROOT / "results" / f"matrix-local-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    cluster = raycluster.LocalCluster(nodes=a.nodes, slow=a.slow, slow_mbit=a.slow_mbit, subnet=87)
    t0 = time.monotonic()
    try:
        cluster.start()
        t1 = time.monotonic()
        print(f"{a.nodes}-node Ray cluster in namespaces {', '.join(cluster.ns)} up in {t1 - t0:.0f} s; node "
              f"{cluster.addresses[a.slow]} shaped to {a.slow_mbit:g} Mbit/s both ways", flush=True)
        r = subprocess.run([*cluster.exec_prefix(0), sys.executable, "-m", "hopbench", "matrix", "--ray", cluster.head,
                            "--quick", "--wait-nodes", str(a.nodes), "--concurrency", "1", "--out", str(out)],
                           cwd=ROOT, timeout=900)
        print(f"matrix: {time.monotonic() - t1:.0f} s (exit {r.returncode}); with the cluster's start "
              f"{time.monotonic() - t0:.0f} s")
    finally:
        cluster.stop()
        left = cluster.leftovers()
        print("cleaned up" if not left else f"LEFT BEHIND: {left}")


if __name__ == "__main__":
    main()
