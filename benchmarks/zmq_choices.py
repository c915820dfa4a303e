"""Benchmark (not a test): the ZeroMQ socket pattern and copy mode for the hop.
PAIR/PAIR, DEALER/ROUTER and REQ/REP ping-pongs (request N B, reply 8 B), and PAIR with
copy=True vs copy=False for the request, at the mission's sizes, loopback, interleaved.

    python benchmarks/zmq_choices.py [--repeats 5] [--cycles 1000]"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time

import numpy as np
import zmq

SIZES = (64, 61_440, 184_320, 524_288, 1 << 20)


TYPES = {"PAIR": (zmq.PAIR, zmq.PAIR), "DEALER/ROUTER": (zmq.DEALER, zmq.ROUTER), "REQ/REP": (zmq.REQ, zmq.REP)}


def server(kind: str, n: int) -> None:
    """Runs in its own process (a thread would share the GIL with the client)."""
    b = zmq.Context.instance().socket(TYPES[kind][1])
    print(b.bind_to_random_port("tcp://127.0.0.1"), flush=True)
    req, rep = bytearray(n), bytearray(8)
    while True:
        if kind == "DEALER/ROUTER":
            ident = b.recv()
            b.recv_into(req)
            b.send_multipart([ident, rep])
        else:
            b.recv_into(req)
            b.send(rep)


def connect(kind: str, port: int):
    a = zmq.Context.instance().socket(TYPES[kind][0])
    a.connect(f"tcp://127.0.0.1:{port}")
    return a


def measure(a, n, copy, cycles, warmup):
    req, rep = bytearray(n), bytearray(8)
    out = np.zeros(cycles, np.int64)
    clock = time.perf_counter_ns
    for i in range(cycles + warmup):
        t0 = clock()
        a.send(req, copy=copy)
        a.recv_into(rep)
        t1 = clock()
        if i >= warmup:
            out[i - warmup] = t1 - t0
    return float(np.median(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--server", nargs=2)
    a = ap.parse_args()
    if a.server:
        server(a.server[0], int(a.server[1]))
        return
    # Every process and thread on CPU 0: with 4 threads per ping-pong (two apps, two
    # ZeroMQ I/O threads) on 2 vCPUs, unpinned runs measure the hypervisor's cross-CPU
    # wake-ups (~100 us each, MEASURED.md), not the pattern.
    os.sched_setaffinity(0, {0})
    keys = [(kind, n, copy) for kind in TYPES for n in SIZES for copy in ((True, False) if kind == "PAIR" else (n < 65536,))]
    procs, socks = [], {}
    for kind in TYPES:
        for n in SIZES:
            p = subprocess.Popen([sys.executable, __file__, "--server", kind, str(n)], stdout=subprocess.PIPE, text=True)
            procs.append(p)
            port = int(p.stdout.readline())
            for k in keys:
                if k[0] == kind and k[1] == n:
                    socks[k] = connect(kind, port) if kind != "PAIR" or not any(
                        kk[0] == kind and kk[1] == n and kk in socks for kk in keys) else socks[next(
                            kk for kk in keys if kk[0] == kind and kk[1] == n and kk in socks)]
    res = {}
    rng = random.Random(3)
    try:
        for _ in range(a.repeats):
            rng.shuffle(keys)
            for k in keys:
                res.setdefault(k, []).append(measure(socks[k], k[1], k[2], a.cycles, 100))
    finally:
        for p in procs:
            p.kill()
    print(f"pyzmq {zmq.__version__} / libzmq {zmq.zmq_version()}, loopback, server in its own process (blocking), all on CPU 0, "
          f"{a.repeats} interleaved repeats; p50 us (median of repeat p50s)")
    print(f"{'pattern':<14} {'copy':<6} " + " ".join(f"{n:>10}" for n in SIZES))
    for kind in ("PAIR", "DEALER/ROUTER", "REQ/REP"):
        for copy in (True, False, None):
            row = []
            for n in SIZES:
                k = (kind, n, copy) if copy is not None else (kind, n, n < 65536)
                row.append(f"{np.median(res[k]) / 1e3:10.1f}" if k in res else f"{'-':>10}")
            if kind == "PAIR" and copy is None or kind != "PAIR" and copy is not None:
                continue
            print(f"{kind:<14} {str(copy) if copy is not None else 'auto':<6} " + " ".join(row))


if __name__ == "__main__":
    main()
