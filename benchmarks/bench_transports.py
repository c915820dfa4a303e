"""Benchmark (not a test): hopbench's p50 per transport beside a minimal same-shape
ping-pong written directly against the same library (stdlib socket, pyzmq, ucxx, Mooncake's
Transfer Engine), at
61,440 B and 184,320 B, on loopback and across two network namespaces, interleaved in a
random order, several repeats, in one run.

    python benchmarks/bench_transports.py [--repeats 5] [--cycles 1000] [--poll block|busy]
                                          [--places loopback,netns] [--transports LIST]

Prints per place x transport x size the median of per-repeat p50s ([min-max] across
repeats) for both and the ratio hopbench / minimal (issue target: <= 1.10)."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import minimal  # noqa: E402  (benchmarks/, on the path above)

SIZES = (61_440, 184_320)


def client_main(spec: dict) -> None:
    from hopbench.core import protocol as P
    from hopbench.core.client import Session

    def busy(tr: str) -> bool:  # the minimal ping-pong runs in the mode hopbench resolves to
        return spec["poll"] == "busy" or (spec["poll"] == "auto" and tr == "ucx")

    session = Session(spec["host"], spec["hop_port"], poll=spec["poll"], transport_settings={"ucx": {"UCX_TLS": "tcp"}})
    clients = {(tr, n): minimal.CLIENTS[tr](spec["host"], port, n, 8, busy(tr))
               for (tr, n), port in ((tuple(k.split(":")[0:1]) + (int(k.split(":")[1]),), v)
                                     for k, v in spec["minimal_ports"].items())}
    rng = random.Random(spec["seed"])
    res: dict[str, list[float]] = {}
    for _ in range(spec["repeats"]):
        order = [(impl, tr, n) for impl in ("hopbench", "minimal") for tr in spec["transports"] for n in SIZES]
        rng.shuffle(order)
        for impl, tr, n in order:
            if impl == "hopbench":
                m = session.measure(P.Plan(tr, n, 8, 2, 4, spec["cycles"], spec["warmup"]))
                p50 = float(np.median(m.timed))
            else:
                p50 = float(np.median(clients[(tr, n)].measure(spec["cycles"], spec["warmup"])))
            res.setdefault(f"{impl}:{tr}:{n}", []).append(p50)
    session.close()
    for c in clients.values():
        c.close()
    sys.stdout = sys.__stdout__
    print("RESULT " + json.dumps(res), flush=True)


def start(cmd: list[str], procs: list) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    procs.append(proc)  # registered before anything can fail, so it is always killed
    while True:  # UCX may print warnings to stdout before the port line
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"{' '.join(cmd)} exited without printing its port")
        last = line.strip().rsplit(":", 1)[-1]
        if last.isdigit():
            return proc, int(last)


def run_place(place: str, a) -> dict:
    from hopbench.orchestration import netem

    link = netem.Link.create() if place == "netns" else None
    server_cpu, client_cpu = {"same": ("0", "0"), "split": ("1", "0"), "none": (None, None)}[a.cpu]
    ps = (link.exec_prefix("server") if link else []) + (["taskset", "-c", server_cpu] if server_cpu else [])
    pc = (link.exec_prefix("client") if link else []) + (["taskset", "-c", client_cpu] if client_cpu else [])
    host = link.server_addr if link else "127.0.0.1"
    procs = []
    try:
        hop, hop_port = start(ps + [sys.executable, "-m", "hopbench", "serve", "--bind", f"{host}:0", "--opt", "UCX_TLS=tcp",
                                    "--poll", a.poll], procs)
        ports = {}
        for tr in a.transports:
            for n in SIZES:
                p, port = start(ps + [sys.executable, "benchmarks/minimal.py", tr, host, str(n), "8"]
                                + (["busy"] if a.poll == "busy" or (a.poll == "auto" and tr == "ucx") else []), procs)
                ports[f"{tr}:{n}"] = port
        spec = {"host": host, "hop_port": hop_port, "minimal_ports": ports, "poll": a.poll, "repeats": a.repeats,
                "cycles": a.cycles, "warmup": a.warmup, "transports": a.transports, "seed": a.seed}
        out = subprocess.run(pc + [sys.executable, __file__, "--client", json.dumps(spec)], capture_output=True,
                             text=True, cwd=ROOT, timeout=1800)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"client failed in {place}:\n{out.stderr[-3000:]}")
        return json.loads(line[7:])
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if link:
            link.destroy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--poll", choices=["auto", "block", "busy"], default="auto")
    ap.add_argument("--places", default="loopback,netns")
    ap.add_argument("--transports", default=",".join(minimal.CLIENTS),
                    help="default: every transport benchmarks/minimal.py has a ping-pong for")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu", choices=["same", "split", "none"], default="split",
                    help="servers and client on one CPU, on two, or left to the scheduler")
    a = ap.parse_args()
    if a.client:
        client_main(json.loads(a.client))
        return
    a.transports = a.transports.split(",")
    a.seed = a.seed or random.SystemRandom().randrange(1, 2**31)
    print(f"hopbench vs minimal same-shape ping-pong (request N B, reply 8 B), poll={a.poll}, placement={a.cpu}, "
          f"{a.repeats} interleaved repeats x {a.cycles} cycles, seed {a.seed}")
    print("p50 in us: median of per-repeat p50s [min-max across repeats]")
    print(f"{'place':<9} {'transport':<9} {'N':>7} {'hopbench':>24} {'minimal':>24} {'ratio':>6}")
    for place in a.places.split(","):
        if place == "netns" and os.geteuid() != 0:
            print(f"{place:<9} skipped: needs root for network namespaces")
            continue
        res = run_place(place, a)
        for tr in a.transports:
            for n in SIZES:
                h = np.array(res[f"hopbench:{tr}:{n}"]) / 1e3
                m = np.array(res[f"minimal:{tr}:{n}"]) / 1e3
                print(f"{place:<9} {tr:<9} {n:>7} {np.median(h):9.1f} [{h.min():6.1f}-{h.max():6.1f}] "
                      f"{np.median(m):9.1f} [{m.min():6.1f}-{m.max():6.1f}] {np.median(h) / np.median(m):6.3f}", flush=True)


if __name__ == "__main__":
    main()
