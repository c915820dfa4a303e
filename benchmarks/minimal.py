"""Minimal same-shape ping-pongs written directly against each library, the baselines
for hopbench's own numbers (benchmarks/bench_core.py, bench_transports.py).

Each is the smallest honest program: request of N bytes, reply of R bytes, a receive
that waits for the whole message, TCP_NODELAY where it applies. No verification, no
protocol, no result files. A server serves one client until it leaves:

    python benchmarks/minimal.py tcp|zmq|ucx|mooncake HOST N R [busy]     # prints its port

A client is an object: connect once, then measure(cycles, warmup) -> int64 ns array."""

from __future__ import annotations

import socket
import sys
import time

import numpy as np

ZMQ_COPY_THRESHOLD = 65536  # the same copy/zero-copy split hopbench uses


class TcpClient:
    def __init__(self, host, port, n, r, busy=False):
        self.c = socket.create_connection((host, port))
        self.c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.req, self.rep, self.r = bytearray(n), bytearray(r), r

    def measure(self, cycles, warmup):
        c, req, rep, r = self.c, self.req, self.rep, self.r
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
        return out

    def close(self):
        self.c.close()


def tcp_server(host, n, r, busy=False):
    ls = socket.socket()
    ls.bind((host, 0))
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


class ZmqClient:
    def __init__(self, host, port, n, r, busy=False):
        import zmq

        self.zmq = zmq
        self.s = zmq.Context.instance().socket(zmq.PAIR)
        self.s.setsockopt(zmq.LINGER, 1000)
        self.s.connect(f"tcp://{host}:{port}")
        self.req, self.rep = bytearray(n), bytearray(r)
        self.copy = n < ZMQ_COPY_THRESHOLD

    def measure(self, cycles, warmup):
        s, req, rep, copy = self.s, self.req, self.rep, self.copy
        out = np.zeros(cycles, dtype=np.int64)
        clock = time.perf_counter_ns
        for i in range(warmup + cycles):
            t0 = clock()
            s.send(req, copy=copy)
            s.recv_into(rep)
            t1 = clock()
            if i >= warmup:
                out[i - warmup] = t1 - t0
        return out

    def close(self):
        self.s.send(b"")
        self.s.close()


def zmq_server(host, n, r, busy=False):
    import zmq

    s = zmq.Context.instance().socket(zmq.PAIR)
    s.setsockopt(zmq.LINGER, 1000)
    print(s.bind_to_random_port(f"tcp://{host}"), flush=True)
    req, rep = bytearray(n), bytearray(r)
    copy = r < ZMQ_COPY_THRESHOLD
    while s.recv_into(req):  # 0 bytes = the client's goodbye
        s.send(rep, copy=copy)


def _ucx():
    import ucxx._lib.libucxx as ucx_api
    from ucxx._lib.arr import Array

    return ucx_api, Array


_UCX_CTX = None


def _ucx_ctx(ucx_api):
    global _UCX_CTX
    if _UCX_CTX is None:
        _UCX_CTX = ucx_api.UCXContext({"TLS": "tcp"}, feature_flags=(ucx_api.Feature.TAG, ucx_api.Feature.WAKEUP))
    return _UCX_CTX


def _ucx_wait(worker, req, busy):
    if busy:
        while not req.completed:
            worker.progress()
    else:
        while not req.completed:
            worker.progress_worker_event(-1)
    req.check_error()


class UcxClient:
    def __init__(self, host, port, n, r, busy=False):
        ucx_api, Array = _ucx()
        self.api = ucx_api
        self.worker = ucx_api.UCXWorker(_ucx_ctx(ucx_api))
        if not busy:
            self.worker.init_blocking_progress_mode()
        self.busy = busy
        self.ep = ucx_api.UCXEndpoint.create(self.worker, host, port, True)
        self.req, self.rep = Array(np.zeros(n, np.uint8)), Array(np.zeros(r, np.uint8))

    def measure(self, cycles, warmup):
        ep, w, busy, req, rep = self.ep, self.worker, self.busy, self.req, self.rep
        tag_s, tag_r = self.api.UCXXTag(1), self.api.UCXXTag(2)
        out = np.zeros(cycles, dtype=np.int64)
        clock = time.perf_counter_ns
        for i in range(warmup + cycles):
            t0 = clock()
            _ucx_wait(w, ep.tag_send(req, tag_s), busy)
            _ucx_wait(w, ep.tag_recv(rep, tag_r), busy)
            t1 = clock()
            if i >= warmup:
                out[i - warmup] = t1 - t0
        return out

    def close(self):
        self.ep.close_blocking(10_000_000, 100)


def ucx_server(host, n, r, busy=False):
    ucx_api, Array = _ucx()
    worker = ucx_api.UCXWorker(_ucx_ctx(ucx_api))
    if not busy:
        worker.init_blocking_progress_mode()
    eps = []
    listener = ucx_api.UCXListener.create(worker, 0, lambda cr: eps.append(listener.create_endpoint_from_conn_request(cr, True)))
    print(listener.port, flush=True)
    while not eps:
        worker.progress()
        time.sleep(0.001)  # waiting for the one client, not timed
    ep = eps[0]
    req, rep = Array(np.zeros(n, np.uint8)), Array(np.zeros(r, np.uint8))
    try:
        while True:
            _ucx_wait(worker, ep.tag_recv(req, ucx_api.UCXXTag(1)), busy)
            _ucx_wait(worker, ep.tag_send(rep, ucx_api.UCXXTag(2)), busy)
    except Exception:
        return


def _mooncake(host, sock, n):
    """An engine (P2PHANDSHAKE, TCP), a registered buffer of n bytes, and the peer's
    (segment, buffer address) swapped over the setup socket as two numbers."""
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    e.initialize(host, "P2PHANDSHAKE", "tcp", "")
    buf = np.zeros(max(n, 1), dtype=np.uint8)
    e.register_memory(buf.ctypes.data, buf.nbytes)
    sock.sendall(f"{e.get_rpc_port()} {buf.ctypes.data}\n".encode())
    port, addr = sock.makefile().readline().split()
    return e, buf, f"{sock.getpeername()[0]}:{port}", int(addr)


def _mooncake_wait(e, busy):
    while not e.get_notifies():
        if not busy:
            time.sleep(50e-6)  # hopbench's poll=block default (MOONCAKE_progress_delay_us)


class MooncakeClient:
    """A WRITE of N bytes into the server's registered buffer with a notification, then a
    wait for the server's WRITE of R bytes and its notification: the NIXL-shaped hop."""

    def __init__(self, host, port, n, r, busy=False):
        from mooncake.engine import TransferNotify, TransferOpcode

        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.e, self.buf, self.peer, self.addr = _mooncake(self.s.getsockname()[0], self.s, max(n, r))
        self.n, self.busy, self.op, self.note = n, busy, TransferOpcode.Write, TransferNotify("r", "")

    def measure(self, cycles, warmup):
        e, src, peer, dst, n, op, note, busy = self.e, self.buf.ctypes.data, self.peer, self.addr, self.n, self.op, \
            self.note, self.busy
        out = np.zeros(cycles, dtype=np.int64)
        clock = time.perf_counter_ns
        for i in range(warmup + cycles):
            t0 = clock()
            e.transfer_sync(peer, src, dst, n, op, note)
            _mooncake_wait(e, busy)
            t1 = clock()
            if i >= warmup:
                out[i - warmup] = t1 - t0
        return out

    def close(self):
        self.s.close()


def mooncake_server(host, n, r, busy=False):
    from mooncake.engine import TransferNotify, TransferOpcode

    ls = socket.socket()
    ls.bind((host, 0))
    ls.listen(1)
    print(ls.getsockname()[1], flush=True)
    c, _ = ls.accept()
    e, buf, peer, addr = _mooncake(host, c, max(n, r))
    c.setblocking(False)
    op, note = TransferOpcode.Write, TransferNotify("a", "")
    while True:
        while not e.get_notifies():
            try:
                if c.recv(1) == b"":
                    return
            except BlockingIOError:
                pass
            if not busy:
                time.sleep(50e-6)
        e.transfer_sync(peer, buf.ctypes.data, addr, r, op, note)


SERVERS = {"tcp": tcp_server, "zmq": zmq_server, "ucx": ucx_server, "mooncake": mooncake_server}
CLIENTS = {"tcp": TcpClient, "zmq": ZmqClient, "ucx": UcxClient, "mooncake": MooncakeClient}

if __name__ == "__main__":
    kind, host, n, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    SERVERS[kind](host, n, r, len(sys.argv) > 5 and sys.argv[5] == "busy")
