"""Benchmark (not a test): the ZeroMQ socket pattern and copy mode for the hop.
PAIR/PAIR, DEALER/ROUTER and REQ/REP ping-pongs (request N B, reply 8 B), and PAIR with
copy=True vs copy=False for the request, at the mission's sizes, loopback, interleaved.

    python benchmarks/zmq_choices.py [--repeats 5] [--cycles 1000]"""

from __future__ import annotations

import argparse
import random
import threading
import time

import numpy as np
import zmq

SIZES = (64, 61_440, 184_320, 1 << 20)


def pair(kind: str):
    ctx = zmq.Context.instance()
    if kind == "PAIR":
        a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    elif kind == "DEALER/ROUTER":
        a, b = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    else:
        a, b = ctx.socket(zmq.REQ), ctx.socket(zmq.REP)
    port = b.bind_to_random_port("tcp://127.0.0.1")
    a.connect(f"tcp://127.0.0.1:{port}")
    return a, b


def server(b, kind, n, stop):
    req, rep = bytearray(n), bytearray(8)
    b.setsockopt(zmq.RCVTIMEO, 200)
    while not stop.is_set():
        try:
            if kind == "DEALER/ROUTER":
                ident = b.recv()
                b.recv_into(req)
                b.send_multipart([ident, rep])
            else:
                b.recv_into(req)
                b.send(rep)
        except zmq.Again:
            continue


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
    a = ap.parse_args()
    setups = {}
    stops = []
    for kind in ("PAIR", "DEALER/ROUTER", "REQ/REP"):
        for n in SIZES:
            for copy in ((True, False) if kind == "PAIR" else (n < 65536,)):
                x, y = pair(kind)
                stop = threading.Event()
                threading.Thread(target=server, args=(y, kind, n, stop), daemon=True).start()
                stops.append(stop)
                setups[(kind, n, copy)] = x
    res = {}
    rng = random.Random(3)
    for _ in range(a.repeats):
        keys = list(setups)
        rng.shuffle(keys)
        for k in keys:
            res.setdefault(k, []).append(measure(setups[k], k[1], k[2], a.cycles, 100))
    for s in stops:
        s.set()
    print(f"pyzmq {zmq.__version__} / libzmq {zmq.zmq_version()}, loopback, server thread in the same process, "
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
