"""hopbench beside each transport's native tool, paired (issue 53): the tool and hopbench
alternated in short ABBA blocks, many of them, on the same pinned CPUs, in one run.

    python benchmarks/native_paired.py [--transports tcp,ucx] [--sizes 64,4096,61440,184320]
        [--block-s 1.0] [--max-pairs 40] [--max-s 60] [--halfwidth 0.03] [--first 8] [--every 8]
        [--server-cpu 2] [--client-cpu 4] [--json FILE]

Per transport and size: one `hopbench serve` pinned to the server CPU for the whole size
(its sessions' data channels are hopbench's own loops), and this process, pinned to the
client CPU, as hopbench's client (one session, one plan per block, the compiled loop); the
native tool's client pinned to the client CPU and its server to the server CPU. Blocks
alternate ABBA (hopbench, tool, tool, hopbench, ...); each adjacent pair gives one ratio,
hopbench's statistic over the tool's, and the result is the median of the pairs' ratios
with its distribution-free interval (hopbench.estimate.median_interval). Pairs are added
until a look decides the size (issue 66): a look after every `--every` pairs from the
`--first`, each at 1 - 0.05 / looks (hopbench.estimate.sequential_stop), and the size ends
once the interval lies at or below its target, above it, or within `--halfwidth` of the
median on both sides, or at `--max-pairs` / `--max-s`; then it says how many pairs the width
seen would need (the width of a median's interval falls as 1/sqrt(n)). The interval the
size ends with keeps its 95% whatever look stopped it (benchmarks/sequential_coverage.py
measures that coverage, and the naive rule's, on the pairs measured so far).

Like statistics only:
- TCP, up to 65,507 B: sockperf ping-pong (`--full-rtt`, its p50 of full round trips over
  a 1 s run, the shortest it takes; its start-up is outside what it reports) against
  hopbench's p50 of the block's full round trips; both block on the socket (`--poll block`).
- TCP, larger: sockperf cannot send it; qperf tcp_lat reports the **mean** one-way
  latency, so hopbench's block mean of round trips / 2 is compared with it, flagged "mean".
  NPtcp (the best trial's mean) is not used: its statistic is not hopbench's.
- UCX: ucx_perftest tag_lat (the libucx wheel's, with hopbench's UCX environment, as
  bench_native runs it): its "typical" half round trip, the p50 of its last 2,048 samples,
  against hopbench's p50 of the block's last 2,048 round trips / 2; both busy-poll.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_native, beside this file

SOCKPERF_MAX = 65_507
WINDOW = 2048  # ucx_perftest's "typical" latency: the median of its last 2,048 samples


def pinned(cpu: str, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *cmd]


class HopbenchArm:
    """hopbench's block: a plan of about `block_s` of round trips over one session to a
    `hopbench serve` pinned to the server CPU."""

    def __init__(self, transport: str, size: int, server_cpu: str, poll: str, settings: dict[str, str]) -> None:
        from hopbench.core.client import Session
        from hopbench.orchestration.serverproc import ready_port

        opts = [x for k, v in settings.items() for x in ("--opt", f"{k}={v}")]
        self.proc = subprocess.Popen(pinned(server_cpu, [sys.executable, "-m", "hopbench", "serve", "--bind",
                                                         "127.0.0.1:0", "--poll", poll, *opts]),
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = ready_port(self.proc)
        self.session = Session("127.0.0.1", port, poll=poll, transport_settings={transport: settings}, loop="native")
        self.transport, self.size, self.settings = transport, size, settings
        self.cycles = 200
        self.loop: tuple[str, str] | None = None

    def block(self, seconds: float) -> np.ndarray:
        """One block's timed round trips, ns; its length set from the last block's p50."""
        from hopbench.core import protocol as P

        plan = P.Plan(self.transport, self.size, self.size, 2, 4, self.cycles, max(20, self.cycles // 10),
                      transport_settings=self.settings)
        m = self.session.measure(plan)
        timed = m.timed
        self.cycles = int(min(200_000, max(200, seconds / max(1e-6, float(np.median(timed)) / 1e9))))
        self.loop = str(m.data_info.get("loop")), str(m.server_info.get("loop"))  # which loops ran, both ends
        return np.asarray(timed, dtype=np.int64)

    def close(self) -> None:
        try:
            self.session.bye()
            self.session.close()
        finally:
            self.proc.terminate()
            self.proc.wait(30)


class TcpTool:
    """sockperf's or qperf's server, up for the whole size (both serve one client after
    another), and one 1 s client run per block (the shortest either takes; its start-up is
    outside what it reports)."""

    def __init__(self, tool: str, size: int, cpus: tuple[str, str], port: int) -> None:
        self.tool, self.size, self.cpus, self.port = tool, size, cpus, port
        cmd = (["sockperf", "sr", "--tcp", "-i", "127.0.0.1", "-p", str(port)] if tool == "sockperf"
               else ["qperf", "-lp", str(port)])
        self.srv = subprocess.Popen(pinned(cpus[0], cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(port)

    def block(self) -> float:
        """sockperf: its p50 of full round trips; qperf: its mean one-way latency x 2 (a mean). us."""
        p, n = str(self.port), str(self.size)
        cmd = (["sockperf", "pp", "--tcp", "-i", "127.0.0.1", "-p", p, "-m", n, "-t", "1", "--full-rtt"]
               if self.tool == "sockperf" else ["qperf", "-lp", p, "127.0.0.1", "-m", n, "-t", "1", "tcp_lat"])
        out = subprocess.run(pinned(self.cpus[1], cmd), capture_output=True, text=True, timeout=60)
        text = out.stdout + out.stderr
        if self.tool == "sockperf":
            found = re.search(r"percentile 50\.000 =\s*([\d.]+)", text)
            if found is None:
                raise RuntimeError(f"sockperf {n} B: {text.strip()[-300:]}")
            return float(found.group(1))
        lat = re.search(r"latency\s*=\s*([\d.]+)\s*(\w+)", text)
        if lat is None:
            raise RuntimeError(f"qperf {n} B: {text.strip()[-300:]}")
        v, unit = lat.groups()
        return 2 * float(v) * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}[unit]

    def close(self) -> None:
        self.srv.kill()
        self.srv.wait()


def perftest_block(size: int, cpus: tuple[str, str], port: int, iters: int) -> float:
    """ucx_perftest tag_lat: its typical latency x 2 (the p50 of its last 2,048 samples), us."""
    exe, env, _ = _perftest()
    envargs = ["env", *[f"{k}={v}" for k, v in sorted(env.items())]]
    srv = subprocess.Popen(pinned(cpus[0], envargs + exe + ["-p", str(port)]), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port)
        out = subprocess.run(pinned(cpus[1], envargs + exe + ["127.0.0.1", "-p", str(port), "-t", "tag_lat", "-s",
                                                             str(size), "-n", str(iters)]),
                             capture_output=True, text=True, timeout=120)
        found = re.search(r"Final:\s+\d+\s+([\d.]+)", out.stdout + out.stderr)
        if found is None:
            raise RuntimeError(f"ucx_perftest {size} B: {(out.stdout + out.stderr).strip()[-300:]}")
        return 2 * float(found.group(1))
    finally:
        srv.kill()
        srv.wait()


def _wait_listening(port: int) -> None:
    import bench_native

    bench_native.wait_listening([], port)  # the kernel's socket table, read until it lists the port


_PERFTEST: list[Any] = []


def _perftest() -> tuple[list[str], dict[str, str], str]:
    """The wheel's ucx_perftest and hopbench's UCX environment, looked up once."""
    import bench_native

    if not _PERFTEST:
        _PERFTEST.append(bench_native.ucx_perftest())
    return _PERFTEST[0]


def arm_for(transport: str, size: int, cpus: tuple[str, str], port: int) -> tuple[str, str, Any,
                                                                                  Callable[[np.ndarray], float]]:
    """(the tool's name, its statistic, the tool (block(last rtt us) -> us, close()), hopbench's
    like statistic of a block's round trips in ns -> us)."""
    if transport == "tcp" and size <= SOCKPERF_MAX:
        return "sockperf", "p50", TcpTool("sockperf", size, cpus, port), lambda ns: float(np.median(ns)) / 1e3
    if transport == "tcp":
        return "qperf", "mean", TcpTool("qperf", size, cpus, port), lambda ns: float(np.mean(ns)) / 1e3
    return "ucx_perftest", "p50 of the last 2,048", Perftest(size, cpus, port), \
        lambda ns: float(np.median(ns[-WINDOW:])) / 1e3


class Perftest:
    """ucx_perftest: its server serves one test, so a pair of processes per block."""

    def __init__(self, size: int, cpus: tuple[str, str], port: int) -> None:
        self.size, self.cpus, self.port, self.n = size, cpus, port, 0

    def block(self, rtt_us: float) -> float:
        self.n += 1
        iters = int(min(200_000, max(2 * WINDOW, 0.5e6 / rtt_us)))
        return perftest_block(self.size, self.cpus, self.port + self.n % 200, iters)

    def close(self) -> None:
        pass


def measure(transport: str, size: int, a: argparse.Namespace, port_base: int, target: float) -> dict[str, Any]:
    from hopbench.estimate import looked_level, median_interval, sequential_stop

    cpus = (a.server_cpu, a.client_cpu)
    tool, stat, native, hb_stat = arm_for(transport, size, cpus, port_base)
    poll = "block" if transport == "tcp" else "busy"
    settings = {"UCX_TLS": "tcp"} if transport == "ucx" else {}
    hb = HopbenchArm(transport, size, a.server_cpu, poll, settings)
    pairs: list[tuple[float, float]] = []
    looks = len(range(a.first, a.max_pairs + 1, a.every))
    stopped = None
    t0 = time.monotonic()
    try:
        hb.block(0.2)  # warm-up block, and the block length from its p50
        last = 50.0
        while len(pairs) < a.max_pairs and time.monotonic() - t0 < a.max_s:
            order = ("hb", "tool") if len(pairs) % 2 == 0 else ("tool", "hb")  # ABBA
            got: dict[str, float] = {}
            for arm in order:
                if arm == "hb":
                    got["hb"] = hb_stat(hb.block(a.block_s))
                    last = got["hb"]
                else:
                    got["tool"] = native.block(last) if isinstance(native, Perftest) else native.block()
            pairs.append((got["hb"], got["tool"]))
            if len(pairs) >= a.first and (len(pairs) - a.first) % a.every == 0:  # a look
                stopped, _ = sequential_stop([h / t for h, t in pairs], target, a.halfwidth, looks)
                if stopped is not None:
                    break
    finally:
        hb.close()
        native.close()
    ratios = [h / t for h, t in pairs]
    med = float(np.median(ratios))
    lo, hi, level = median_interval(ratios, looked_level(looks))  # the level that keeps its coverage
    half = max(med - lo, hi - med) / med
    need = int(np.ceil(len(ratios) * (half / a.halfwidth) ** 2)) if half > a.halfwidth else len(ratios)
    return {"transport": transport, "bytes": size, "tool": tool, "statistic": stat, "pairs": len(ratios),
            "hopbench_us": float(np.median([h for h, _ in pairs])), "tool_us": float(np.median([t for _, t in pairs])),
            "ratio": med, "lo": lo, "hi": hi, "level": level, "halfwidth": half, "pairs_needed": need,
            "stopped": stopped or "limit", "looks": looks,
            "seconds": time.monotonic() - t0, "loops": hb.loop, "ratios": ratios}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transports", default="tcp,ucx")
    ap.add_argument("--sizes", default="64,4096,61440,184320")
    ap.add_argument("--block-s", type=float, default=1.0, help="seconds of round trips in a hopbench block")
    ap.add_argument("--max-pairs", type=int, default=40)
    ap.add_argument("--max-s", type=float, default=60.0, help="seconds per transport and size at most")
    ap.add_argument("--halfwidth", type=float, default=0.03, help="stop once the interval is within this of the ratio")
    ap.add_argument("--first", type=int, default=8, help="pairs before the first look")
    ap.add_argument("--every", type=int, default=8, help="pairs between looks (each look at 1 - 0.05 / looks)")
    ap.add_argument("--server-cpu", default="2")
    ap.add_argument("--client-cpu", default="4")
    ap.add_argument("--json", metavar="FILE", help="also write the table here (a new file)")
    a = ap.parse_args()
    if a.json and Path(a.json).exists():
        raise SystemExit(f"--json {a.json} exists: choose a new file")
    os.sched_setaffinity(0, {int(a.client_cpu)})
    targets = {64: 1.10, 4096: 1.10}
    print(f"server CPU {a.server_cpu}, client CPU {a.client_cpu}; ABBA blocks of {a.block_s:g} s; the interval: "
          f"distribution-free, of the median of the paired ratios, a look every {a.every} pairs from the {a.first}th "
          f"at {1 - 0.05 / len(range(a.first, a.max_pairs + 1, a.every)):.1%}; a size ends once decided at its "
          f"target or within +-{a.halfwidth:.0%}")
    print(f"{'transport':>9} {'bytes':>7} {'tool':>12} {'statistic':>20} {'hopbench us':>11} {'tool us':>9} "
          f"{'ratio':>6} {'interval':>13} {'level':>6} {'+-':>6} {'pairs':>5}  verdict")
    rows = []
    try:
        for ti, transport in enumerate(a.transports.split(",")):
            for si, size in enumerate(int(x) for x in a.sizes.split(",")):
                target = targets.get(size, 1.05)
                r = measure(transport, size, a, 21000 + 2000 * ti + 400 * si + 1, target)
                rows.append(r)
                width = "within" if r["halfwidth"] <= a.halfwidth else f"needs ~{r['pairs_needed']} pairs for"
                verdict = (f"{'meets' if r['hi'] <= target else 'misses' if r['lo'] > target else 'undecided at'} "
                           f"<= {target:.2f}; {width} +-{a.halfwidth:.0%}")
                print(f"{transport:>9} {size:>7} {r['tool']:>12} {r['statistic']:>20} {r['hopbench_us']:>11.1f} "
                      f"{r['tool_us']:>9.1f} {r['ratio']:>6.3f} {r['lo']:>6.3f}-{r['hi']:<6.3f} {r['level']:>6.1%} "
                      f"{r['halfwidth']:>6.1%} {r['pairs']:>5}  {verdict}", flush=True)
    finally:
        if a.json:
            with open(a.json, "x") as f:
                json.dump({"server_cpu": a.server_cpu, "client_cpu": a.client_cpu, "block_s": a.block_s,
                           "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
