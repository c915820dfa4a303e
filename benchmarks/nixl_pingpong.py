"""The minimal NIXL ping-pong: hopbench-nixl's reference, as benchmarks/minimal.py is for the
other transports. NIXL's agent API used directly (nixl-cu12's bindings, no hopbench): each
end registers its two buffers once, the agents' metadata and the buffers' addresses are
exchanged once over a TCP connection, then a cycle is the client's WRITE of N bytes into
the server's buffer with a notification carrying the sequence number, and the server's
WRITE of R bytes back with its own; both busy-poll (NIXL's calls progress UCX). No
credits, no verification, no result files.

    python benchmarks/nixl_pingpong.py server HOST N R [PORT]     # prints its port, serves one client
    python benchmarks/nixl_pingpong.py client HOST PORT N R CYCLES WARMUP   # prints "p50_us X"

UCX settings come from the environment as for any UCX program (e.g. UCX_TLS=tcp)."""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

import numpy as np


def _agent(role: str):
    import nixl_cu12._bindings as nb

    cfg = nb.nixlAgentConfig()
    cfg.useProgThread, cfg.useListenThread, cfg.pthrDelay, cfg.lthrDelay = False, False, 0, 100000
    cfg.syncMode = nb.NIXL_THREAD_SYNC_STRICT if os.environ.get("PP_STRICT") else nb.NIXL_THREAD_SYNC_NONE
    cfg.captureTelemetry = False
    agent = nb.nixlAgent(f"pingpong-{role}-{os.getpid()}", cfg)
    agent.createBackend("UCX", {})
    return nb, agent


def _block(sock: socket.socket, body: bytes) -> bytes:
    sock.sendall(struct.pack("!I", len(body)) + body)
    n = struct.unpack("!I", _exact(sock, 4))[0]
    return _exact(sock, n)


def _exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise SystemExit("peer closed the setup connection")
        out += got
    return bytes(out)


def _setup(sock: socket.socket, role: str, recv_n: int, send_n: int, extra: bytes = b""):
    """Register both buffers, swap metadata and the receive buffer's address; returns the
    WRITE of the send buffer into the peer's receive buffer, ready to post."""
    nb, agent = _agent(role)
    recv, send = np.zeros(recv_n, dtype=np.uint8), np.ones(send_n, dtype=np.uint8)
    for buf in (recv, send):
        agent.registerMem(nb.nixlRegDList(nb.DRAM_SEG, [(buf.ctypes.data, buf.nbytes, 0, "")]), [])
    mine = struct.pack("!QQ", recv.ctypes.data, recv.nbytes) + extra + agent.getLocalMD()
    theirs = _block(sock, mine)
    addr, length = struct.unpack_from("!QQ", theirs)
    body = theirs[16 + len(extra):]
    peer = agent.loadRemoteMD(body)
    local = agent.prepXferDlist(nb.NIXL_INIT_AGENT, nb.nixlXferDList(nb.DRAM_SEG, [(send.ctypes.data, send_n, 0)]), [])
    remote = agent.prepXferDlist(peer, nb.nixlXferDList(nb.DRAM_SEG, [(addr, length, 0)]), [])
    handle = agent.makeXferReq(nb.NIXL_WRITE, local, [0], remote, [0], b"", [], False)
    return nb, agent, handle, theirs[16:16 + len(extra)], (recv, send)


def _write(nb, agent, handle, seq: int) -> None:
    status = agent.postXferReq(handle, struct.pack("!Q", seq))
    while status == nb.NIXL_IN_PROG:
        status = agent.getXferStatus(handle)
    if status != nb.NIXL_SUCCESS:
        raise SystemExit(f"WRITE failed: {status}")


def _notif(agent) -> None:
    get = agent.getNotifs
    while not get({}, []):
        pass


def server(host: str, n: int, r: int, port: int = 0) -> None:
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    print(ls.getsockname()[1], flush=True)
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nb, agent, handle, extra, keep = _setup(c, "server", n, r, struct.pack("!Q", 0))
    total = struct.unpack("!Q", extra)[0]
    for seq in range(total):
        _notif(agent)
        _write(nb, agent, handle, seq)
    c.recv(1)  # the client's goodbye: it has its last reply


def client(host: str, port: int, n: int, r: int, cycles: int, warmup: int) -> np.ndarray:
    c = socket.create_connection((host, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nb, agent, handle, _, keep = _setup(c, "client", r, n, struct.pack("!Q", cycles + warmup))
    out = np.zeros(cycles, dtype=np.int64)
    clock = time.perf_counter_ns
    for i in range(warmup + cycles):
        t0 = clock()
        _write(nb, agent, handle, i)
        _notif(agent)
        t1 = clock()
        if i >= warmup:
            out[i - warmup] = t1 - t0
    c.sendall(b"x")
    c.close()
    return out


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        x = client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
        print(f"p50_us {np.median(x) / 1e3:.2f} p99_us {np.percentile(x, 99) / 1e3:.2f} over_1ms {int((x > 1e6).sum())}")
