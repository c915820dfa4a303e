"""Benchmark (not a test): what one small pinned copy costs after the thread has been idle.

    python benchmarks/gpu_copy_probe.py [--n 300]

gpu_paths.py found that an 8-byte H2D copy right after a network receive cost 145-280 us
while the same copy back to back costs ~10 us. This probe separates the causes: each
copy (H2D and D2H, 8 B and 184,320 B, pinned host memory, a non-blocking stream) is
timed by host timers around cudaMemcpyAsync + cudaStreamSynchronize and by CUDA events
around the copy alone (GPU-side time), after

    hot     the previous copy (back to back)
    sleep   time.sleep(100 us)   - the thread sleeps, as in a blocking receive
    spin    a 100 us busy-wait   - the thread stays on its CPU, the GPU idles

under each CUDA scheduling flag (auto, spin, yield, blocking-sync; set before the
context exists, so each runs in its own process). Prints p50s in microseconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

FLAGS = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}


def probe(flag: str, n: int) -> dict:
    import cupy as cp
    import numpy as np
    from cuda.bindings import (
        driver,  # the primary context's scheduling flags, before it exists
    )

    driver.cuInit(0)
    _, dev0 = driver.cuDeviceGet(0)
    err, = driver.cuDevicePrimaryCtxSetFlags(dev0, FLAGS[flag])
    assert int(err) == 0, err
    cp.zeros(1)
    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    out = {}
    for size in (8, 184_320):
        dev = cp.zeros(size, dtype=cp.uint8)
        pinned = cp.cuda.alloc_pinned_memory(size)
        host = np.frombuffer(pinned, dtype=np.uint8, count=size)
        for kind, name in ((1, "h2d"), (2, "d2h")):
            dst, src = (dev.data.ptr, host.ctypes.data) if kind == 1 else (host.ctypes.data, dev.data.ptr)
            for mode in ("hot", "sleep", "spin"):
                wall, gpu_t = np.zeros(n), np.zeros(n)
                for i in range(n):
                    if mode == "sleep":
                        time.sleep(100e-6)
                    elif mode == "spin":
                        end = time.perf_counter_ns() + 100_000
                        while time.perf_counter_ns() < end:
                            pass
                    t0 = time.perf_counter_ns()
                    e0.record(stream)
                    rt.memcpyAsync(dst, src, size, kind, stream.ptr)
                    e1.record(stream)
                    rt.streamSynchronize(stream.ptr)
                    wall[i] = (time.perf_counter_ns() - t0) / 1e3
                    gpu_t[i] = cp.cuda.get_elapsed_time(e0, e1) * 1e3
                out[f"{name} {size} B {mode}"] = (float(np.median(wall[n // 10:])), float(np.median(gpu_t[n // 10:])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(probe(a.child, a.n)))
        return
    res = {}
    for flag in FLAGS:
        r = subprocess.run([sys.executable, __file__, "--child", flag, "--n", str(a.n)], capture_output=True, text=True)
        if r.returncode:
            print(f"{flag}: failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        res[flag] = json.loads(r.stdout.strip().splitlines()[-1])
    keys = list(next(iter(res.values())))
    print(f"{'copy':>22} " + " ".join(f"{f + ' host/gpu us':>20}" for f in res))
    for k in keys:
        print(f"{k:>22} " + " ".join(f"{res[f][k][0]:10.1f}/{res[f][k][1]:<9.1f}" for f in res))


if __name__ == "__main__":
    main()
