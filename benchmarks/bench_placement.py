"""Benchmark (not a test): how much of the hop is the host? p50 at 64 B and 184,320 B for
each placement (client and server on the same CPU, on different CPUs, unpinned) x
receive mode (block, busy-poll), on loopback and across two network namespaces, TCP,
interleaved repeats, in one run.

    python benchmarks/bench_placement.py [--repeats 3] [--cycles 1000] [--transport tcp]"""

from __future__ import annotations

import argparse
import csv
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hopbench.orchestration.serverproc import ready_port  # noqa: E402

PLACEMENTS = {"same CPU": ("0", "0"), "split CPUs": ("1", "0"), "unpinned": (None, None)}
SIZES = (64, 184_320)


def one(place, link, placement, poll, a) -> dict[int, float]:
    server_cpu, client_cpu = PLACEMENTS[placement]
    ps = link.exec_prefix("server") if link else []
    pc = link.exec_prefix("client") if link else []
    host = link.server_addr if link else "127.0.0.1"
    srv = subprocess.Popen(ps + [sys.executable, "-m", "hopbench", "serve", "--bind", f"{host}:0", "--poll", poll,
                                 "--opt", "UCX_TLS=tcp"] + (["--cpu", server_cpu] if server_cpu else []),
                           stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        port = ready_port(srv)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r"
            r = subprocess.run(pc + [sys.executable, "-m", "hopbench", "run", "--peer", f"{host}:{port}", "--bytes",
                                     ",".join(map(str, SIZES)), "--cycles", str(a.cycles), "--warmup", "100", "--poll", poll,
                                     "--transport", a.transport, "--opt", "UCX_TLS=tcp", "--out", str(out)]
                               + (["--cpu", client_cpu] if client_cpu else []), capture_output=True, text=True, cwd=ROOT)
            if r.returncode:
                raise SystemExit(r.stderr)
            return {int(row["request_bytes"]): float(row["p50_ns"]) for row in csv.DictReader(open(out / "summary.csv"))}
    finally:
        srv.terminate()
        srv.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--places", default="loopback,netns")
    a = ap.parse_args()
    from hopbench.orchestration import netem

    if os.cpu_count() < 2:
        raise SystemExit("needs at least 2 CPUs")
    print(f"{a.transport}: p50 us (median of {a.repeats} interleaved repeats x {a.cycles} cycles), request N B / reply 8 B")
    print(f"{'place':<9} {'placement':<11} {'poll':<5} " + " ".join(f"{n:>14}" for n in SIZES))
    for place in a.places.split(","):
        link = netem.Link.create() if place == "netns" else None
        try:
            combos = [(p, q) for p in PLACEMENTS for q in ("block", "busy")]
            res: dict = {}
            rng = random.Random(9)
            for _ in range(a.repeats):
                rng.shuffle(combos)
                for p, q in combos:
                    for n, v in one(place, link, p, q, a).items():
                        res.setdefault((p, q, n), []).append(v)
            for p in PLACEMENTS:
                for q in ("block", "busy"):
                    print(f"{place:<9} {p:<11} {q:<5} " + " ".join(f"{np.median(res[(p, q, n)]) / 1e3:14.1f}" for n in SIZES),
                          flush=True)
        finally:
            if link:
                link.destroy()


if __name__ == "__main__":
    main()
