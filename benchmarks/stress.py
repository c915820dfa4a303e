"""Stress target (`make stress`): throw >= 1,000 bad connections at one `hopbench serve`
— garbage, truncated headers and bodies, slow senders, abrupt resets, wrong versions,
absurd lengths, over-cap plans — from 8 threads at once, then check the same server
still serves a normal client with verified replies and that its memory stayed bounded.

    python benchmarks/stress.py [--per-kind 150] [--slow 12]"""

from __future__ import annotations

import argparse
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hopbench.core import protocol as P  # noqa: E402
from hopbench.core.client import Session  # noqa: E402
from hopbench.orchestration.serverproc import ready_port  # noqa: E402

MEM_BOUND_KIB = 32 * 1024  # judgement call: what the server may grow by over the whole attack


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def hello() -> bytes:
    body = P.encode_body({"protocol": 1, "role": "client", "software": "stress", "env": {}})
    return P.pack_header(P.HELLO, len(body)) + body


def attack(kind: str, port: int, rng: random.Random) -> str:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        if kind == "garbage":
            s.sendall(rng.randbytes(rng.randint(1, 400)))
        elif kind == "truncated-header":
            s.sendall(P.pack_header(P.HELLO, 40)[: rng.randint(1, 15)])
        elif kind == "truncated-body":
            s.sendall(P.pack_header(P.HELLO, 200) + b'{"protocol": 1')
        elif kind == "absurd-length":
            s.sendall(struct.pack("<4sHHII", b"HOPB", P.VERSION, P.HELLO, 0xFFFFFFFF, 0))
        elif kind == "wrong-version":
            s.sendall(struct.pack("<4sHHII", b"HOPB", 2, P.HELLO, 0, 0))
        elif kind == "reset":
            s.sendall(hello()[: rng.randint(0, 30)])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif kind == "over-cap":
            s.sendall(hello())
            plan = P.Plan("tcp", 10**12, 8, 2, 4, 10, 1).to_wire()
            body = P.encode_body(plan)
            s.sendall(P.pack_header(P.PLAN, len(body)) + body)
        elif kind == "slow":
            for b in hello():
                s.send(bytes([b]))
                time.sleep(0.2)  # a slowloris: this is the attack, not synchronisation
        s.shutdown(socket.SHUT_WR) if kind != "reset" else None
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        return "ok"
    except OSError as exc:
        return f"client-side {exc.__class__.__name__}"
    finally:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-kind", type=int, default=150)
    ap.add_argument("--slow", type=int, default=12)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--idle-timeout", "2",
                            "--handshake-timeout", "1", "--max-request-bytes", str(16 * 2**20)],
                           stdout=subprocess.PIPE, text=True, cwd=ROOT)
    port = ready_port(srv)
    log_lines: list[str] = []
    threading.Thread(target=lambda: log_lines.extend(srv.stdout), daemon=True).start()
    # one normal session first, so the baseline memory includes a served client
    s = Session("127.0.0.1", port)
    s.measure(P.Plan("tcp", 184320, 8, 2, 4, 200, 10))
    s.close()
    before = rss_kib(srv.pid)
    kinds = ["garbage", "truncated-header", "truncated-body", "absurd-length", "wrong-version", "reset", "over-cap"]
    jobs = [k for k in kinds for _ in range(a.per_kind)] + ["slow"] * a.slow
    rng = random.Random(42)
    rng.shuffle(jobs)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        outcomes = list(ex.map(lambda k: (k, attack(k, port, random.Random(rng.random()))), jobs))
    took = time.monotonic() - t0
    after = rss_kib(srv.pid)
    s = Session("127.0.0.1", port)
    verified = 0
    for n in (61440, 184320, 4 * 2**20):
        m = s.measure(P.Plan("tcp", n, 8, 2, 4, 300, 10, verify=True))
        verified += m.completed  # every one of these passed the per-cycle id check
    s.close()
    alive = srv.poll() is None
    srv.terminate()
    srv.wait(10)
    tried = Counter(k for k, _ in outcomes)
    print(f"stress: {len(jobs)} bad connections in {took:.1f} s from 8 threads against one server")
    for k in kinds + ["slow"]:
        print(f"  {k:<17} {tried[k]:>5}")
    print(f"server still serving: {alive}; normal client afterwards: {verified} replies verified")
    print(f"server sessions logged with an error: {sum('error' in ln for ln in log_lines)}")
    print(f"server RSS: {before} KiB before, {after} KiB after the attack ({after - before:+d} KiB; bound {MEM_BOUND_KIB} KiB)")
    ok = alive and verified == 3 * 311 and after - before < MEM_BOUND_KIB
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
