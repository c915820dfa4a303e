"""hopbench-nixl and the minimal NIXL ping-pong in the same two processes, blocks alternated
(issue 33's ratio measured paired; `make bench-native` runs them as separate processes).

On this 2-vCPU VM a p50 of a ~100 µs NIXL round trip moves by ±30% from one process pair
to the next and within minutes (the host, UCX's lanes, softirq placement), so two tools
measured one after the other differ by that much whatever their code. Here one server
process and one client process hold both: hopbench's nixl channel (transports/nixl/, driven
by hopbench's own loops, hopbench.core.timing.run_cycles and echo_cycles, as `hopbench run`
and `hopbench serve` drive it) and the minimal ping-pong's agent pair and WRITE handles
(benchmarks/nixl_pingpong.py's setup and loop, NIXL's API directly). They run in alternating
blocks of `--block` cycles (ABBA order, so neither always goes first), both busy-polling.
Each block's p50 is paired with its neighbour's: the ratio printed is the median over pairs
of p50(hopbench) / p50(minimal), with the two tools' pooled p50s beside it.

    python benchmarks/nixl_paired.py [--sizes 64,4096,61440,184320] [--blocks 20] [--block 400]
                                     [--place loopback|veth] [--server-cpu 1] [--client-cpu 0]

`--place veth` runs the pair across two network namespaces (hopbench.orchestration.netem,
root), UCX_TLS=tcp for both (NIXL_UCX_TLS=tcp for hopbench's), as make bench-native does.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent  # hopbench itself comes from the installation, never from here
sys.path.insert(0, str(ROOT / "benchmarks"))  # nixl_pingpong, beside this file


def _schedule(blocks: int) -> list[str]:
    """ABBA...: pairs (hb, ref), (ref, hb), ..."""
    out: list[str] = []
    for i in range(blocks):
        out += ["hb", "ref"] if i % 2 == 0 else ["ref", "hb"]
    return out


def _hopbench(role: str, host: str, port: int, n: int):
    from hopbench.core.transport import TransportOptions, get_transport

    nixl = get_transport("nixl")  # the registry's, as `hopbench run --transport nixl` gets it

    extra = dict(kv.split("=", 1) for kv in os.environ.get("PAIRED_OPTS", "").split() if kv)
    # as `hopbench run`/`serve` set it (hopbench.core.native.may_share_cpu): the ends pinned apart do not yield
    opts = TransportOptions(poll="busy", settings={"NIXL_UCX_TLS": "tcp", **extra},
                            share_cpu=os.environ.get("PAIRED_SHARE") == "1")
    if role == "server":
        listener = nixl.listen(host, port, opts)
        try:
            return listener.accept(60)
        finally:
            listener.close()
    from hopbench.errors import ConnectFailed

    for _ in range(200):  # the server process may not listen yet: refused connections retried, bounded
        try:
            return nixl.connect(host, port, opts)
        except ConnectFailed:
            time.sleep(0.05)  # the peer's start-up, not synchronisation of the measurement
    return nixl.connect(host, port, opts)


def server(host: str, port: int, n: int, blocks: int, block: int, loop: str) -> None:
    import nixl_pingpong as pp

    from hopbench.core.protocol import ReplyIds
    from hopbench.core.timing import echo_cycles

    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port + 1))
    ls.listen(1)
    chan = _hopbench("server", host, port, n)
    c, _ = ls.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nb, agent, handle, _, keep = pp._setup(c, "server", n, n, b"")
    codec = ReplyIds(2, 4)
    request, reply = np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)

    def bad(seq: int) -> None:
        raise SystemExit(f"hopbench block: request {seq} out of order")

    for which in _schedule(blocks):
        if which == "hb":
            echo_cycles(chan, request, reply, codec, block, on_bad_seq=bad, loop=loop)
        else:
            for seq in range(block):
                pp._notif(agent)
                pp._write(nb, agent, handle, seq)
    c.recv(1)
    chan.close()


def client(host: str, port: int, n: int, blocks: int, block: int, warm: int, loop: str) -> dict[str, Any]:
    import nixl_pingpong as pp

    from hopbench.core.protocol import SEQ, ReplyIds
    from hopbench.core.timing import LoopPolicy, run_cycles

    chan = _hopbench("client", host, port, n)
    c = socket.create_connection((host, port + 1), timeout=30)  # listening before the server accepted chan
    c.settimeout(None)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nb, agent, handle, _, keep = pp._setup(c, "client", n, n, b"")
    codec = ReplyIds(2, 4)
    request, reply = np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
    clock = time.perf_counter_ns
    out: dict[str, Any] = {"hb": [], "ref": []}
    for which in _schedule(blocks):
        samples = np.zeros(block, dtype=np.int64)
        if which == "hb":
            info: dict = {}
            run_cycles(chan, request, reply, codec, samples, loop=LoopPolicy(loop, info=info))
            out["loop"] = info.get("loop")
        else:
            for i in range(block):
                SEQ.pack_into(request, 0, i)
                t0 = clock()
                pp._write(nb, agent, handle, i)
                pp._notif(agent)
                samples[i] = clock() - t0
        out[which].append(samples[warm:])
    c.sendall(b"x")
    c.close()
    chan.close()
    return out


def _one(sp: list[str], cp: list[str], me: list[str], common: list[str], env: dict[str, str], host: str, port: int,
         n: int) -> tuple[str | None, str]:
    """One size: the server and the client processes; (the client's RESULT line, or None and why)."""
    srv = subprocess.Popen(sp + me + ["server", host, str(port), str(n)] + common, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        r = subprocess.run(cp + me + ["client", host, str(port), str(n)] + common, env=env,
                           capture_output=True, text=True, timeout=600)
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
        if line is not None:
            srv.wait(30)
            return line, ""
        srv.kill()
        return None, f"{(r.stderr or '').strip()[-300:]} (server: {(srv.communicate()[1] or '').strip()[-300:]})"
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", nargs="?", choices=("server", "client"))
    ap.add_argument("args", nargs="*")
    ap.add_argument("--sizes", default="64,4096,61440,184320")
    ap.add_argument("--blocks", type=int, default=20, help="block pairs per size")
    ap.add_argument("--block", type=int, default=400, help="cycles per block (the first tenth of each untimed)")
    ap.add_argument("--place", choices=("loopback", "veth"), default="loopback")
    ap.add_argument("--server-cpu", default="1")
    ap.add_argument("--client-cpu", default="0")
    ap.add_argument("--opt", action="append", default=[], help="a hopbench nixl setting KEY=VALUE for its channel")
    ap.add_argument("--json", metavar="FILE", help="also write each size's result here (a new file)")
    ap.add_argument("--loop", choices=("auto", "native", "python"), default="auto",
                    help="hopbench's loop: auto (as hopbench run picks: the compiled one where built), or one of them")
    a = ap.parse_args()
    if a.json and not a.role and Path(a.json).exists():
        raise SystemExit(f"--json {a.json} exists: choose a new file")
    if a.role == "server":
        host, port, n = a.args[0], int(a.args[1]), int(a.args[2])
        server(host, port, n, a.blocks, a.block, a.loop)
        return
    if a.role == "client":
        host, port, n = a.args[0], int(a.args[1]), int(a.args[2])
        res = client(host, port, n, a.blocks, a.block, a.block // 10, a.loop)
        pairs = [float(np.median(h)) / float(np.median(r)) for h, r in zip(res["hb"], res["ref"])]
        hb, ref = np.concatenate(res["hb"]), np.concatenate(res["ref"])
        print(f"RESULT {n} {np.median(hb) / 1e3:.1f} {np.median(ref) / 1e3:.1f} {np.median(pairs):.3f} "
              f"{np.percentile(pairs, 25):.3f} {np.percentile(pairs, 75):.3f} {res['loop'].split()[0]}", flush=True)
        return
    link = None
    if a.place == "veth":
        from hopbench.orchestration import netem

        link = netem.Link.create(rate_mbit=None)
    sp = (link.exec_prefix("server") if link else []) + ["taskset", "-c", a.server_cpu]
    cp = (link.exec_prefix("client") if link else []) + ["taskset", "-c", a.client_cpu]
    host = link.server_addr if link else "127.0.0.1"
    shared = set(a.server_cpu.split(",")) & set(a.client_cpu.split(","))  # CPUs both ends may use: they yield
    # on a GPU host NIXL refuses a UCX_TLS without a CUDA transport: cuda_copy added, as hopbench's
    # nixl transport adds it to its own (it moves no host memory)
    gpu = os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus")
    env = dict(os.environ, UCX_TLS="tcp,cuda_copy" if gpu else "tcp", PAIRED_OPTS=" ".join(a.opt),
               PAIRED_SHARE=os.environ.get("PAIRED_SHARE") or str(int(bool(shared))))
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--blocks", str(a.blocks), "--block", str(a.block), "--loop", a.loop]
    print(f"{a.place}: server CPU {a.server_cpu}, client CPU {a.client_cpu}; {a.blocks} ABBA block pairs of "
          f"{a.block} cycles per size (the first tenth of each block untimed), both busy-polling, UCX_TLS=tcp"
          + (f"; hopbench settings {' '.join(a.opt)}" if a.opt else ""))
    print(f"{'bytes':>8} {'hopbench p50':>13} {'minimal p50':>12}  hopbench/minimal (median of paired blocks, IQR)"
          "  hopbench's loop")
    record: dict = {"place": a.place, "server_cpu": a.server_cpu, "client_cpu": a.client_cpu, "blocks": a.blocks,
                    "block": a.block, "loop": a.loop, "sizes": {}}
    try:
        for n in [int(x) for x in a.sizes.split(",")]:
            for attempt in range(3):  # NIXL's metadata load fails now and then in a fresh namespace (NIXL_ERR_BACKEND)
                port = 20000 + (os.getpid() * 7 + n + 101 * attempt) % 20000
                line, why = _one(sp, cp, me, common, env, host, port, n)
                if line is not None or "NIXL_ERR_BACKEND" not in why:
                    break
                print(f"{n:>8} retried: NIXL's setup failed (NIXL_ERR_BACKEND)", flush=True)
            if line is None:
                print(f"{n:>8} failed: {why}")
                continue
            _, _, hb, ref, ratio, lo, hi, ran = line.split()
            print(f"{n:>8} {float(hb):>10.1f} us {float(ref):>9.1f} us  {ratio} ({lo}-{hi})  {ran}", flush=True)
            record["sizes"][str(n)] = {"hopbench_p50_us": float(hb), "minimal_p50_us": float(ref),
                                       "ratio": float(ratio), "iqr": [float(lo), float(hi)], "loop": ran}
    finally:
        if link:
            link.destroy()
        if a.json:
            with open(a.json, "x") as f:
                json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
