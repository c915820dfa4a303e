"""Benchmark (not a test): one server, M client processes at once (`serve --max-sessions`).

Server scaling on loopback (issue 32): a server process with --max-sessions, M client
processes, each its own session, released together by a barrier once every handshake is
done, each running the same closed-loop plan (64 B requests and 61,440 B = T1, K = 2 ids
back). Aggregate cycles/s at M against M x the single pair's rate measured in the same run
(M = 1 first, then each M, then M = 1 again); target >= 0.8. Client i is pinned to CPU
(i + 1) mod ncpu when --pin (the server keeps CPU 0), as the issue asks (M clients on M
distinct CPUs where the machine has them).

    python benchmarks/bench_sessions.py [--clients 1,2,4,8] [--cycles 3000] [--transport tcp] [--pin]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def client(port: int, transport: str, request: int, cycles: int, cpu: int | None, barrier, out) -> None:
    import numpy as np

    from hopbench.core import protocol as P
    from hopbench.core.client import Session

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    s = Session("127.0.0.1", port)
    try:
        barrier.wait(60)
        t0 = time.perf_counter()
        m = s.measure(P.Plan(transport, request, 8, 2, 4, cycles, 100))
        wall = time.perf_counter() - t0
        s.bye()
    finally:
        s.close()
    out.put({"cycles": m.completed, "wall_s": wall, "p50_us": float(np.median(m.timed)) / 1e3})


def run(port: int, transport: str, request: int, cycles: int, m: int, pin: bool) -> dict:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(m), ctx.Queue()
    ncpu = os.cpu_count() or 1
    procs = [ctx.Process(target=client, args=(port, transport, request, cycles,
                                              (i + 1) % ncpu if pin else None, barrier, out)) for i in range(m)]
    for p in procs:
        p.start()
    got = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    wall = max(g["wall_s"] for g in got)
    return {"m": m, "agg_cycles_s": sum(g["cycles"] for g in got) / wall,
            "p50_us": sorted(g["p50_us"] for g in got)[len(got) // 2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,2")
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--pin", action="store_true")
    a = ap.parse_args()
    from hopbench.core.server import ServerConfig
    from hopbench.orchestration.serverproc import ServerProcess

    ms = [int(x) for x in a.clients.split(",")]
    print(f"{os.cpu_count()} CPUs; server --max-sessions {max(ms)}; {a.transport}; {a.cycles} cycles per client; "
          f"pinned: {a.pin}")
    with ServerProcess(ServerConfig(host="127.0.0.1", port=0, max_sessions=max(max(ms), 2))) as srv:
        port = srv.address[1]
        for request in (64, 61440):
            single = [run(port, a.transport, request, a.cycles, 1, a.pin)]
            rows = [run(port, a.transport, request, a.cycles, m, a.pin) for m in ms if m > 1]
            single.append(run(port, a.transport, request, a.cycles, 1, a.pin))
            base = sum(r["agg_cycles_s"] for r in single) / 2
            print(f"request {request} B: single pair {base:,.0f} cycles/s (before/after: "
                  f"{single[0]['agg_cycles_s']:,.0f} / {single[1]['agg_cycles_s']:,.0f}), p50 {single[0]['p50_us']:.1f} us")
            for r in rows:
                ratio = r["agg_cycles_s"] / (r["m"] * base)
                print(f"  M = {r['m']}: aggregate {r['agg_cycles_s']:,.0f} cycles/s = {ratio:.2f} x M x single "
                      f"({'ok' if ratio >= 0.8 else 'below 0.8'}), median client p50 {r['p50_us']:.1f} us")


if __name__ == "__main__":
    main()
