"""Minimal same-shape ping-pongs written directly against the libraries, as baselines
for hopbench's own numbers (benchmarks/bench_core.py, bench_transports.py).

Each is the smallest honest program: request of N bytes, reply of R bytes, blocking
receive looped until whole, TCP_NODELAY. Run as a server:  python benchmarks/minimal.py
tcp-server N R  (prints its port, serves one client). The client side is a function."""

from __future__ import annotations

import socket
import sys
import time

import numpy as np


def tcp_server(n: int, r: int) -> None:
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    print(ls.getsockname()[1], flush=True)
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req, rep = bytearray(n), bytearray(r)
    while True:
        got = c.recv_into(req, n, socket.MSG_WAITALL)
        if got == 0:
            return
        while got < n:
            got += c.recv_into(memoryview(req)[got:], n - got)
        c.sendall(rep)


def tcp_client(host: str, port: int, n: int, r: int, cycles: int, warmup: int) -> np.ndarray:
    c = socket.create_connection((host, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req, rep = bytearray(n), bytearray(r)
    out = np.zeros(cycles, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(warmup + cycles):
        t0 = clock()
        c.sendall(req)
        got = c.recv_into(rep, r, socket.MSG_WAITALL)
        while got < r:
            got += c.recv_into(memoryview(rep)[got:], r - got)
        t1 = clock()
        if i >= warmup:
            out[i - warmup] = t1 - t0
    c.close()
    return out


def zmq_server(n: int, r: int) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.setsockopt(zmq.LINGER, 0)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    req, rep = bytearray(n), bytearray(r)
    s.setsockopt(zmq.RCVTIMEO, 5000)
    try:
        while True:
            s.recv_into(req)
            s.send(rep, copy=False)
    except zmq.Again:
        return


def zmq_client(host: str, port: int, n: int, r: int, cycles: int, warmup: int) -> np.ndarray:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://{host}:{port}")
    req, rep = bytearray(n), bytearray(r)
    out = np.zeros(cycles, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(warmup + cycles):
        t0 = clock()
        s.send(req, copy=False)
        s.recv_into(rep)
        t1 = clock()
        if i >= warmup:
            out[i - warmup] = t1 - t0
    s.close()
    return out


if __name__ == "__main__":
    kind, n, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    {"tcp-server": tcp_server, "zmq-server": zmq_server}[kind](n, r)
