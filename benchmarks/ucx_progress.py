"""Benchmark (not a test): which ucxx progress model gives the lowest round trip?
ucxx's asyncio API (ucxx.create_endpoint, await ep.send/recv) against its synchronous
core API with blocking progress (arm + epoll) and with busy-polling progress — each as a
same-shape ping-pong (request N B, reply 8 B), UCX_TLS=tcp, loopback, interleaved repeats.

    python benchmarks/ucx_progress.py [--repeats 5] [--cycles 1000]"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
SIZES = (64, 61_440, 184_320)


def async_server(n: int) -> None:
    import ucxx

    async def main():
        done = asyncio.Event()

        async def handler(ep):
            req, rep = np.zeros(n, np.uint8), np.zeros(8, np.uint8)
            try:
                while True:
                    await ep.recv(req)
                    await ep.send(rep)
            except Exception:
                done.set()

        lst = ucxx.create_listener(handler)
        print(lst.port, flush=True)
        await done.wait()

    asyncio.run(main())


class AsyncClient:
    def __init__(self, port: int, n: int):
        import ucxx

        self.loop = asyncio.new_event_loop()
        self.ep = self.loop.run_until_complete(ucxx.create_endpoint("127.0.0.1", port))
        self.req, self.rep = np.zeros(n, np.uint8), np.zeros(8, np.uint8)

    def measure(self, cycles: int, warmup: int) -> np.ndarray:
        async def go():
            out = np.zeros(cycles, np.int64)
            clock = time.perf_counter_ns
            for i in range(cycles + warmup):
                t0 = clock()
                await self.ep.send(self.req)
                await self.ep.recv(self.rep)
                t1 = clock()
                if i >= warmup:
                    out[i - warmup] = t1 - t0
            return out

        return self.loop.run_until_complete(go())

    def close(self):
        self.loop.run_until_complete(self.ep.close())


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    while True:  # UCX may print warnings to stdout before the port line
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{' '.join(cmd)} exited without printing its port")
        if line.strip().isdigit():
            return p, int(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--async-server", type=int)
    a = ap.parse_args()
    if a.async_server:
        async_server(a.async_server)
        return
    import minimal

    # one server alive at a time: busy-polling servers left running would steal the
    # two CPUs from whatever is measured next
    def measure(mode: str, n: int) -> float:
        if mode == "async":
            p, port = start([sys.executable, __file__, "--async-server", str(n)])
        else:
            p, port = start([sys.executable, "benchmarks/minimal.py", "ucx", "127.0.0.1", str(n), "8"]
                            + (["busy"] if mode == "core-busy" else []))
        try:
            c = AsyncClient(port, n) if mode == "async" else minimal.UcxClient("127.0.0.1", port, n, 8, mode == "core-busy")
            v = float(np.median(c.measure(a.cycles, a.warmup)))
            c.close()
            return v
        finally:
            p.kill()
            p.wait()

    res: dict = {}
    rng = random.Random(5)
    for _ in range(a.repeats):
        keys = [(m, n) for m in ("async", "core-block", "core-busy") for n in SIZES]
        rng.shuffle(keys)
        for k in keys:
            res.setdefault(k, []).append(measure(*k))
    print(f"ucxx progress models, UCX_TLS=tcp, loopback, unpinned, {a.repeats} interleaved repeats x {a.cycles} cycles")
    print("p50 us (median of repeat p50s [min-max])")
    print(f"{'N':>7} " + " ".join(f"{m:>26}" for m in ("async API", "core, blocking", "core, busy-poll")))
    for n in SIZES:
        cells = []
        for m in ("async", "core-block", "core-busy"):
            v = np.array(res[(m, n)]) / 1e3
            cells.append(f"{np.median(v):10.1f} [{v.min():6.1f}-{v.max():6.1f}]")
        print(f"{n:>7} " + " ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
