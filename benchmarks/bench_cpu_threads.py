"""The tiny drafter's CPU forward started from the main thread and from a new thread
(docs/DRAFTER.md "One loop for the sessions"): torch's intra-op OpenMP regions cost more when
started from a thread other than the main one. Thread CPU time per forward, p50 of 250.

Usage: python benchmarks/bench_cpu_threads.py   (then again with OMP_NUM_THREADS=1)
"""

from __future__ import annotations

import threading
import time

import numpy as np

from hopbench.models import drafter as DM


def bench(m: DM.Model, bodies: list[bytes], tag: str) -> None:
    out = []
    for _ in range(300):
        c = time.thread_time_ns()
        m.run_bodies(bodies, 3, 2)
        out.append(time.thread_time_ns() - c)
    print(f"{tag:12s} forward of {len(bodies) * 3} rows: {np.median(out[50:]) / 1e6:.3f} ms of this thread's CPU (p50 of 250)")


def main() -> None:
    import torch

    m = DM.Model(DM.TINY, device="cpu")
    rng = np.random.default_rng(0)
    bodies = [rng.integers(0, 1 << 16, 3 * DM.TINY.fc_in_features, dtype=np.uint16).view(np.uint8).tobytes()
              for _ in range(4)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    bench(m, bodies, "main thread")
    t = threading.Thread(target=bench, args=(m, bodies, "new thread"))
    t.start()
    t.join()


if __name__ == "__main__":
    main()
