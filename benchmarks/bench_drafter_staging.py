"""The drafter server's own work per cycle outside the forward (issue 50, docs/DRAFTER.md),
two ways side by side in one process, on a GPU:

- pageable: rows_from (a pageable host tensor copied to the GPU, its NaNs cleaned as separate
  launches) then run (the static input's copy, the graph, the ids' synchronous copy back);
- staged: run_bodies (the body copied into a pinned buffer, one asynchronous copy, the
  cleaning captured in the graph, the ids copied back into pinned memory).

For each: the wall time of the whole call and the forward's own CUDA-event time, p50 over
`--repeats` calls, alternated in ABBA blocks; the overhead is wall - forward.
Usage: python benchmarks/bench_drafter_staging.py [--shape dspark-glm5] [--rows 3] [--repeats 300]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from hopbench.models import drafter as D


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="dspark-glm5")
    ap.add_argument("--rows", default="1,3")
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=300)
    a = ap.parse_args()
    m = D.Model(D.parse_shape(a.shape))
    if m.device != "cuda":
        raise SystemExit("needs a GPU (torch sees none here)")
    out = []
    for rows in [int(r) for r in a.rows.split(",")]:
        body = np.random.default_rng(rows).integers(0, 1 << 16, rows * m.shape.fc_in_features,
                                                     dtype=np.uint16).view(np.uint8).tobytes()

        def pageable(body: bytes = body, rows: int = rows) -> tuple[np.ndarray, int]:
            return m.run(m.rows_from(np.frombuffer(body, dtype=np.uint8), 1, rows), a.k)

        def staged(body: bytes = body, rows: int = rows) -> tuple[np.ndarray, int]:
            return m.run_bodies([body], rows, a.k)

        ways = {"pageable": pageable, "staged": staged}
        for f in ways.values():
            for _ in range(5):
                f()
        assert (pageable()[0] == staged()[0]).all(), "the two paths must give the same ids"
        wall: dict[str, list[int]] = {k: [] for k in ways}
        fwd: dict[str, list[int]] = {k: [] for k in ways}
        for i in range(a.repeats):
            for name in (["pageable", "staged"] if i % 2 == 0 else ["staged", "pageable"]):  # ABBA
                t0 = time.perf_counter_ns()
                _, ns = ways[name]()
                wall[name].append(time.perf_counter_ns() - t0)
                fwd[name].append(ns)
        row = {"rows": rows}
        for name in ways:
            w, f = np.median(wall[name]) / 1e6, np.median(fwd[name]) / 1e6
            over = np.median(np.array(wall[name]) - np.array(fwd[name])) / 1e6
            row[name] = {"wall_p50_ms": w, "forward_p50_ms": f, "overhead_p50_ms": over}
            print(f"rows {rows:3d} {name:8s}: call p50 {w:.3f} ms, forward {f:.3f} ms, outside the forward {over:.3f} ms")
        print(f"rows {rows:3d}: staged overhead / pageable overhead = "
              f"{row['staged']['overhead_p50_ms'] / row['pageable']['overhead_p50_ms']:.2f}")
        out.append(row)
    print(json.dumps({"gpu": m.info().get("gpu"), "shape": a.shape, "rows": out}))


if __name__ == "__main__":
    main()
