"""Benchmark (not a test; `make bench-hostile`): an honest client served under attack (issue 30).

A `hopbench serve --max-sessions 16` child process; the honest client (this process) holds
its session from the start and measures its p50 at T = 1 and T = 3, interleaved between
unloaded periods and periods during which a separate attack process (another CPU where there
is one) keeps `--concurrent` hostile connections open at a time, of five kinds: half-open
(connect, say nothing), slow senders (a HELLO header a byte every 0.3 s), garbage bytes,
oversized plans (a valid HELLO, then a PLAN of 2^40 bytes), HELLO floods (HELLO, read the
answer, close). Every hostile connection must be answered (ERROR/REFUSE/HELLO) or closed
within the server's stated timeout (the handshake deadline, `--handshake-timeout`, + 1 s).

Prints per payload the honest p50 unloaded and under attack (median of the repeats, paired
ratio; target <= 1.10), the server's peak RSS against its start, the hostile connections by
kind with the slowest close, the violations, and the CPU steal. Exit 1 on a violation.

    python benchmarks/bench_hostile.py [--repeats 3] [--cycles 1500] [--concurrent 200] [--seconds 6]
                                       [--layout isolated|spread|one]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hopbench.core import protocol as P  # noqa: E402
from hopbench.testing.hostile import KINDS, one  # noqa: E402


def attack(port: int, concurrent: int, limit_s: float, cpu: int | None, started, stop, out) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    rng = random.Random(1)
    results: list[tuple[str, bool, float]] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        r = random.Random(i)
        while not stop.is_set():
            try:
                res = one(KINDS[r.randrange(len(KINDS))], port, limit_s, r)
            except OSError:  # connect refused by a full backlog: counted, not a violation
                res = ("connect_failed", True, 0.0)
                time.sleep(0.05)  # the attacker backs off (its pace, not synchronisation)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=worker, args=(rng.randrange(1 << 30),), daemon=True) for _ in range(concurrent)]
    for t in threads:
        t.start()
    started.set()
    stop.wait()
    for t in threads:
        t.join(limit_s + 10)
    out.put(results)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def main() -> None:
    import numpy as np

    from hopbench.core.client import Session
    from hopbench.orchestration.serverproc import parse_ready

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=1500)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=6.0, help="least length of each attack period")
    ap.add_argument("--handshake-timeout", type=float, default=3.0)
    ap.add_argument("--layout", choices=("isolated", "spread", "one"), default="isolated",
                    help="isolated: the server's control plane (accepting, handshakes) on one CPU and each plan "
                         "on a CPU of its own (serve --session-cpus); spread: the whole server on all but two "
                         "CPUs; one: the whole server on CPU 0")
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    # 4 or more CPUs: the honest client and the attack on one each (the last two), the server on
    # the rest as --layout says. 2 CPUs: the honest client on CPU 0, the attack on CPU 1; the
    # server on CPU 0, or (isolated) its control plane beside the attack and its plans on CPU 0.
    client_cpu, attack_cpu = (ncpu - 2, ncpu - 1) if ncpu >= 4 else (0, 1 if ncpu > 1 else None)
    rest = ncpu - 2 if ncpu >= 4 else 1
    if a.layout == "isolated" and ncpu >= 2:
        server_args = (["--cpu", "0", "--session-cpus", f"1-{rest - 1}"] if ncpu >= 4 else
                       ["--cpu", "1", "--session-cpus", "0"])
    elif a.layout == "spread":
        server_args = ["--cpu", f"0-{rest - 1}"]
    else:
        server_args = ["--cpu", "0"]
    server_cpu = " ".join(server_args)
    srv = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--max-sessions", "16",
                            *server_args, "--handshake-timeout", str(a.handshake_timeout)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = srv.stdout.readline()
        port = parse_ready(line)[1]
        threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()  # drain its log
        os.sched_setaffinity(0, {client_cpu})
        rss0 = rss_kb(srv.pid)
        honest = Session("127.0.0.1", port, timeout_s=30.0)
        ctx = mp.get_context("spawn")
        p50 = {("idle", t): [] for t in (1, 3)} | {("attack", t): [] for t in (1, 3)}
        hostile: list = []
        peak = rss0
        steal0 = open("/proc/stat").readline().split()[1:9]
        for _rep in range(a.repeats):
            for phase in ("idle", "attack"):
                proc = None
                if phase == "attack":
                    started, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
                    proc = ctx.Process(target=attack, args=(port, a.concurrent, a.handshake_timeout, attack_cpu,
                                                            started, stop, out))
                    proc.start()
                    started.wait(60)
                t_end = time.monotonic() + (a.seconds if phase == "attack" else 0)
                for tokens in (1, 3):
                    m = honest.measure(P.Plan("tcp", 8 + tokens * 61440, 8, 2, 4, a.cycles, 100, verify=True))
                    assert m.completed == m.plan.total, "the honest client's results are incomplete"
                    p50[(phase, tokens)].append(float(np.median(m.timed)) / 1e3)
                peak = max(peak, rss_kb(srv.pid))
                if proc is not None:
                    while time.monotonic() < t_end:  # keep the attack up its least length
                        peak = max(peak, rss_kb(srv.pid))
                        time.sleep(0.5)  # sampling the server's memory, not synchronisation
                    stop.set()
                    hostile += out.get(timeout=a.handshake_timeout + 60)
                    proc.join(30)
        honest.bye()
        honest.close()
        steal1 = open("/proc/stat").readline().split()[1:9]
    finally:
        srv.terminate()
        srv.wait(10)
    d = [int(b) - int(x) for x, b in zip(steal0, steal1)]
    print(f"{ncpu} CPUs: server {server_cpu} ({a.layout}), honest client on CPU {client_cpu}, attack on CPU {attack_cpu}; "
          f"{a.repeats} repeats x (idle, attack), {a.cycles} cycles per payload, {a.concurrent} hostile connections "
          f"at a time, handshake deadline {a.handshake_timeout:g} s; CPU steal {d[7] / max(1, sum(d)):.1%}")
    fails = []
    for tokens in (1, 3):
        idle, hit = p50[("idle", tokens)], p50[("attack", tokens)]
        ratios = [b / x for x, b in zip(idle, hit)]
        r = float(np.median(ratios))
        fails += [] if r <= 1.10 else [f"T{tokens} under attack {r:.2f}x"]
        print(f"  T{tokens}: honest p50 idle {np.median(idle):.1f} us, under attack {np.median(hit):.1f} us: "
              f"{r:.3f}x (paired, per repeat {', '.join(f'{x:.2f}' for x in ratios)}) "
              f"{'ok' if r <= 1.10 else 'above 1.10'}")
    print(f"  server RSS: {rss0 / 1024:.1f} MiB at start, peak {peak / 1024:.1f} MiB")
    for kind in KINDS + ("connect_failed",):
        got = [h for h in hostile if h[0] == kind]
        if got:
            late = [h for h in got if not h[1]]
            fails += [f"{len(late)} {kind} not closed in time"] if late else []
            print(f"  {kind:14s} {len(got):6d} connections, slowest answer/close {max(h[2] for h in got):.2f} s, "
                  f"late {len(late)}")
    print("all targets met" if not fails else f"targets missed: {'; '.join(fails)}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
