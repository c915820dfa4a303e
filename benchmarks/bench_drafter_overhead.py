"""The served drafter's own work outside the forward, in one process on a GPU (issue 50,
docs/DRAFTER.md): `Model.run_bodies` (the staged call) and `Batcher.submit` (the same call
through the server's batcher, one session) alternated, the wall time of each call minus the
forward's CUDA-event time, p50 over `--repeats` calls; then the staged call's steps apart
(the body into the pinned buffer, the copy's and the replay's enqueue, the wait after it).
Usage: python benchmarks/bench_drafter_overhead.py [--shape dspark-glm5] [--rows 3] [--repeats 400]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hopbench.core.batcher import Batcher
from hopbench.models import drafter as D


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="dspark-glm5")
    ap.add_argument("--rows", type=int, default=3)
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=400)
    a = ap.parse_args()
    m = D.Model(D.parse_shape(a.shape))
    if m.device != "cuda":
        raise SystemExit("needs a GPU (torch sees none here)")
    batcher = Batcher(m, 300e-6, 8)
    batcher.join()
    rows, k = a.rows, a.k
    body = bytearray(np.random.default_rng(0).integers(0, 256, rows * m.shape.row_bytes, dtype=np.uint8).tobytes())
    for _ in range(10):
        m.run_bodies([body], rows, k)
    ways = {"run_bodies": lambda: m.run_bodies([body], rows, k)[1], "submit": lambda: batcher.submit(body, rows, k).draft_ns}
    res: dict[str, list[tuple[int, int]]] = {n: [] for n in ways}
    for i in range(a.repeats):
        for name in (list(ways) if i % 2 == 0 else list(ways)[::-1]):  # ABBA
            t0 = time.perf_counter_ns()
            ns = ways[name]()
            res[name].append((time.perf_counter_ns() - t0, ns))
    for name, v in res.items():
        x = np.array(v)
        print(f"{name}: call p50 {np.median(x[:, 0]) / 1e6:.3f} ms, forward p50 {np.median(x[:, 1]) / 1e6:.3f} ms, "
              f"outside the forward p50 {np.median(x[:, 0] - x[:, 1]) / 1e6:.3f} ms")
    steps(m, body, rows, k, a.repeats)


def steps(m: D.Model, body: bytearray, rows: int, k: int, repeats: int) -> None:
    """The staged call's steps apart, p50 us each."""
    torch = m.torch
    g, inp, out, stage, back, *_ = m._graph((1, rows, m.shape.fc_in_features), k, staged=True)
    host, n = stage.numpy(), rows * m.shape.row_bytes
    start, end = m._events()
    t: dict[str, list[float]] = {x: [] for x in ("into pinned", "copy enqueue", "replay enqueue", "wait after", "outside")}
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        host[:n] = np.frombuffer(body, dtype=np.uint8)
        t1 = time.perf_counter_ns()
        with torch.inference_mode():
            inp.copy_(stage.view(torch.bfloat16).view(inp.shape), non_blocking=True)
            t2 = time.perf_counter_ns()
            start.record()
            g.replay()
            end.record()
            t3 = time.perf_counter_ns()
            back.copy_(out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            t4 = time.perf_counter_ns()
        fwd = start.elapsed_time(end) * 1e6
        for key, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3 - fwd, t4 - t0 - fwd)):
            t[key].append(v)
    print("the staged call's steps, p50 us: " + ", ".join(f"{x} {np.median(v) / 1e3:.1f}" for x, v in t.items()))


if __name__ == "__main__":
    main()
