"""Benchmark (not a test): hopbench's TCP p50 beside a minimal blocking-socket ping-pong
of the same shape, on loopback, interleaved, several repeats, in one run.

    python benchmarks/bench_core.py [--repeats 5] [--cycles 2000] [--cpu same|split|none]

Both servers are separate processes; both clients run in this process. Placement is the
same for both (default: every process pinned to CPU 0, the VM's stable path; see
docs/MEASURED.md on the ~100 us cross-CPU wake-up). Prints per size the median of
the per-repeat p50s for each, and the ratio hopbench / minimal (target <= 1.05)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import minimal  # noqa: E402

from hopbench.core import protocol as P  # noqa: E402
from hopbench.core.client import Session  # noqa: E402
from hopbench.orchestration.serverproc import ready_port  # noqa: E402

SIZES = (61_440, 184_320)


def pinned(cmd: list[str], cpu: str | None) -> list[str]:
    return (["taskset", "-c", cpu] if cpu is not None else []) + cmd


def start(cmd: list[str], marker: str | None = None) -> tuple[subprocess.Popen, int]:
    """Start a server and read its port from its first output line (no sleeps)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if marker:  # a hopbench server: its ready line (hopbench.orchestration.serverproc)
        return proc, ready_port(proc)
    return proc, int(proc.stdout.readline())  # the minimal server prints its port alone


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--cpu", choices=["same", "split", "none"], default="same")
    a = ap.parse_args()
    server_cpu = {"same": "0", "split": "1", "none": None}[a.cpu]
    if a.cpu != "none":
        os.sched_setaffinity(0, {0})
    srv, port = start(pinned([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0"], server_cpu), "hop")
    session = Session("127.0.0.1", port)
    res: dict[tuple[str, int], list[float]] = {}
    rng = np.random.default_rng(12345)
    try:
        for _rep in range(a.repeats):
            order = [(impl, n) for impl in ("hopbench", "minimal") for n in SIZES]
            rng.shuffle(order)
            for impl, n in order:
                if impl == "hopbench":
                    plan = P.Plan("tcp", n, 8, 2, 4, a.cycles, a.warmup)
                    p50 = float(np.median(session.measure(plan).timed))
                else:
                    mp, mport = start(pinned([sys.executable, "benchmarks/minimal.py", "tcp", "127.0.0.1", str(n), "8"],
                                             server_cpu))
                    cl = minimal.TcpClient("127.0.0.1", mport, n, 8)
                    p50 = float(np.median(cl.measure(a.cycles, a.warmup)))
                    cl.close()
                    mp.wait(timeout=10)
                res.setdefault((impl, n), []).append(p50)
    finally:
        session.close()
        srv.terminate()
        srv.wait(timeout=10)
    print(f"loopback TCP, request N bytes / reply 8 bytes, placement={a.cpu}, "
          f"{a.repeats} interleaved repeats x {a.cycles} cycles; p50 in us (median of repeat p50s, [min-max])")
    print(f"{'N':>8} {'hopbench':>22} {'minimal socket':>22} {'ratio':>7}")
    for n in SIZES:
        h, m = np.array(res[("hopbench", n)]) / 1e3, np.array(res[("minimal", n)]) / 1e3
        print(f"{n:>8} {np.median(h):8.1f} [{h.min():5.1f}-{h.max():5.1f}] {np.median(m):8.1f} [{m.min():5.1f}-{m.max():5.1f}]"
              f" {np.median(h) / np.median(m):7.3f}")


if __name__ == "__main__":
    main()
