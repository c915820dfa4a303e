"""Benchmark (not a test): hopbench beside the native tools, same link, same sizes, one run.

    make bench-native        # installs sockperf, qperf, netpipe-tcp, ucx-utils first
    python benchmarks/bench_native.py [--repeats 3] [--places loopback,emu-unshaped,emu-1g]

Symmetric round trips (hopbench `--reply-bytes same`: the request is echoed back at full
size, because the native tools only echo), at 64 B, 4 KiB, 61,440 B, 184,320 B and 1 MiB,
servers and clients pinned alike for every tool (`--placement same`: both on CPU 0, no
cross-CPU wake-up; `split`: servers on CPU 1, clients on CPU 0), interleaved in a
random order per repeat. Every figure is converted to a full round trip in µs:

- sockperf `pp --full-rtt`: its p50 of full round trips; cannot send more than 65,507 B.
- qperf `tcp_lat`: reports only a **mean one-way** latency; ×2.
- NPtcp: a **best-trial mean** one-way time; ×2.
- ucx_perftest `tag_lat`: its p50 of **half** round trips over the **last 2,048 samples
  only**; ×2. The one shipped in the libucx wheel hopbench's ucx transport loads (the same
  UCX build and libraries; Debian's system one only when the wheel has none, and then
  said), run with **the UCX environment hopbench's UCX context has** (what ucxx's import
  sets, e.g. UCX_RNDV_THRESH=8192 and UCX_MAX_RNDV_RAILS=1, plus hopbench's own
  defaults), so both pick the same protocols. It busy-polls; hopbench-ucx busy-polls too
  (`--poll busy` on both ends). Not run with `--placement same`: it busy-polls without
  yielding, so a server and a client on one CPU starve each other (a run hung past 300 s).
- nixl_pingpong (benchmarks/nixl_pingpong.py): the minimal NIXL ping-pong, NIXL's agent
  API used directly: a WRITE with a notification each way, both ends busy-polling, its p50
  of full round trips. It and hopbench-nixl both run with UCX_TLS=tcp (for hopbench:
  `--opt NIXL_UCX_TLS=tcp`): across namespaces of one host UCX would otherwise move large
  messages through cross-memory attach, past the veth.
- hopbench: p50 of all timed full round trips. `hopbench-tcp`/`hopbench-ucx`/`hopbench-nixl`
  run the compiled loop on both ends (`--loop native`), `-py` the Python loop (`--loop
  python`); ucx and nixl busy-polling both ends.

hopbench's TCP ratio is to the best of sockperf, qperf and NPtcp at that size: the one with the
lowest median over the repeats, the same tool in every repeat.

`--before PYTHON` adds `before-tcp` and `before-ucx`: the same compiled-loop runs with
another installation's interpreter (e.g. a venv holding the wheel of an earlier commit,
run from outside the checkout), interleaved with the rest, and prints now/before ratios:
how a change to the loops or the transports' C is shown to cost nothing beyond noise.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from hopbench.estimate import median_text

ROOT = Path(__file__).resolve().parent.parent  # hopbench itself comes from the installation, never from here
SIZES = (64, 4096, 61_440, 184_320, 1 << 20)
PLACEMENTS = {"split": ("1", "0"), "same": ("0", "0")}  # (server CPU, client CPU), every tool alike
SERVER_CPU, CLIENT_CPU = PLACEMENTS["split"]
TOOLS = ("sockperf", "qperf", "NPtcp", "ucx_perftest", "hopbench-tcp", "hopbench-tcp-py", "hopbench-ucx",
         "hopbench-ucx-py", "nixl_pingpong", "hopbench-nixl", "hopbench-nixl-py")
SOCKPERF_MAX = 65_507
BEFORE: str | None = None  # --before: another installation's python


def ucx_perftest() -> tuple[list[str], dict[str, str], str]:
    """(command, environment, which build): the wheel's ucx_perftest with hopbench's UCX
    environment, or the system one (said)."""
    code = ("import os, json; before = set(os.environ); import hopbench.transports.ucx as U; "
            "env = {k: v for k, v in os.environ.items() if k.startswith('UCX_') and k not in before and 'LOG' not in k}; "
            "env.update({'UCX_' + k: v for k, v in U._config_dict({'UCX_TLS': 'tcp'}).items()}); "
            "import libucx, os.path as p; root = p.dirname(libucx.__file__); print(json.dumps([env, root]))")
    import json

    env, root = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                          cwd=tempfile.gettempdir()).stdout)  # not the checkout (below)
    exe = Path(root) / "bin" / "ucx_perftest"
    if exe.exists():
        env["LD_LIBRARY_PATH"] = str(Path(root) / "lib")
        version = (Path(root) / "VERSION.txt").read_text().strip() if (Path(root) / "VERSION.txt").exists() else "?"
        return [str(exe)], env, f"the libucx wheel's ucx_perftest (UCX {version}, the build hopbench loads)"
    return ["ucx_perftest"], env, "Debian's system ucx_perftest (the wheel has none): another UCX build"


PERFTEST: tuple[list[str], dict[str, str], str] | None = None


def wait_listening(prefix: list[str], port: int, limit: int = 2000) -> None:
    """Until a TCP listener on `port` shows in the kernel's socket table, read in the server's
    namespace (no probe connection: NPtcp would take a probe for its client; no `ss`, which a
    bare host may lack). Each read is a process start, which paces the loop."""
    for _ in range(limit):
        out = subprocess.run(prefix + ["cat", "/proc/net/tcp", "/proc/net/tcp6"], capture_output=True, text=True).stdout
        if listening(out, port):
            return
    raise ServerNotUp(f"nothing listens on {port}")


def listening(table: str, port: int) -> bool:
    """Whether /proc/net/tcp{,6} text holds a socket in LISTEN (state 0A) on local `port`."""
    for line in table.splitlines():
        f = line.split()
        if len(f) > 3 and ":" in f[1] and f[3] == "0A" and f[1].rsplit(":", 1)[1] == f"{port:04X}":
            return True
    return False


def rtt_us(tool: str, n: int, place: dict, duration: float, tmp: Path) -> float | None:
    """One measurement; a server that never came up (a port taken meanwhile) is retried on another port."""
    for _ in range(3):
        try:
            return _rtt_us(tool, n, place, duration, tmp)
        except ServerNotUp as exc:
            print(f"retrying {tool} {n} B: {exc}", file=sys.stderr)
        except RuntimeError as exc:  # NIXL's first metadata load on a fresh namespace link (docs/TRANSPORTS.md)
            if "NIXL_ERR_BACKEND" not in str(exc):
                raise
            print(f"retrying {tool} {n} B: its NIXL setup failed (NIXL_ERR_BACKEND)", file=sys.stderr)
    raise RuntimeError(f"{tool} {n} B: its server never came up (3 ports tried)")


class ServerNotUp(RuntimeError):
    pass


def _rtt_us(tool: str, n: int, place: dict, duration: float, tmp: Path) -> float | None:
    ps = place["server_prefix"] + ["taskset", "-c", SERVER_CPU]
    pc = place["client_prefix"] + ["taskset", "-c", CLIENT_CPU]
    host = place["host"]
    port = random.randint(20000, 40000)
    if tool == "sockperf":
        if n > SOCKPERF_MAX:
            return None
        srv = subprocess.Popen(ps + ["sockperf", "sr", "--tcp", "-i", host, "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        cmd = pc + ["sockperf", "pp", "--tcp", "-i", host, "-p", str(port), "-m", str(n), "-t", str(int(max(1, duration))),
                    "--full-rtt"]
        parse = lambda out: float(re.search(r"percentile 50\.000 =\s*([\d.]+)", out).group(1))  # noqa: E731
    elif tool == "qperf":
        srv = subprocess.Popen(ps + ["qperf", "-lp", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cmd = pc + ["qperf", "-lp", str(port), host, "-m", str(n), "-t", str(int(max(1, duration))), "tcp_lat"]

        def parse(out):
            v, unit = re.search(r"latency\s*=\s*([\d.]+)\s*(\w+)", out).groups()
            return 2 * float(v) * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}[unit]
    elif tool == "NPtcp":
        port = 5002  # NetPIPE's fixed port
        args = ["-l", str(n), "-u", str(n), "-p", "0"]
        srv = subprocess.Popen(ps + ["NPtcp", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        outfile = tmp / f"np-{n}.out"
        cmd = pc + ["NPtcp", "-h", host, *args, "-o", str(outfile)]

        def parse(out):
            return 2 * float(outfile.read_text().split()[2]) * 1e6
    elif tool == "ucx_perftest":
        if SERVER_CPU == CLIENT_CPU:
            return None  # it busy-polls without yielding: two on one CPU starve each other (hung > 300 s here)
        exe, env, _ = PERFTEST or ucx_perftest()
        envargs = ["env"] + [f"{k}={v}" for k, v in sorted(env.items())]
        srv = subprocess.Popen(ps + envargs + exe + ["-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        iters = max(50, min(20000, int(duration / max(20e-6, n * 8 / place["rate_bps"] * 2))))
        cmd = pc + envargs + exe + [host, "-p", str(port), "-t", "tag_lat", "-s", str(n), "-n", str(iters)]

        def parse(out):
            return 2 * float(re.search(r"Final:\s+\d+\s+([\d.]+)", out).group(1))
    elif tool == "nixl_pingpong":
        if SERVER_CPU == CLIENT_CPU:
            return None  # it busy-polls without yielding, as ucx_perftest
        script = str(ROOT / "benchmarks" / "nixl_pingpong.py")
        env = ["env", "UCX_TLS=tcp"]
        srv = subprocess.Popen(ps + env + [sys.executable, script, "server", host, str(n), str(n), str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cycles = max(20, min(5000, int(duration / max(20e-6, n * 8 / place["rate_bps"] * 2))))
        cmd = pc + env + [sys.executable, script, "client", host, str(port), str(n), str(n), str(cycles),
                          str(max(5, cycles // 10))]

        def parse(out):
            return float(re.search(r"p50_us ([\d.]+)", out).group(1))
    else:
        tr = tool.split("-")[1]
        loop = "python" if tool.endswith("-py") else "native"
        if tr == "nixl" and SERVER_CPU == CLIENT_CPU:
            return None  # busy-polls both ends, as its reference
        # as the tools they sit beside: ucx_perftest and nixl_pingpong spin, the TCP tools block
        poll = "busy" if tr in ("ucx", "nixl") else "block"
        # run outside the checkout: its hopbench/ would shadow a hopbench installed from a wheel
        python = BEFORE if tool.startswith("before-") else sys.executable
        tls = ["--opt", "NIXL_UCX_TLS=tcp" if tr == "nixl" else "UCX_TLS=tcp"]
        srv = subprocess.Popen(ps + [python, "-m", "hopbench", "serve", "--bind", f"{host}:{port}", "--poll",
                                     poll, *tls, "--loop", loop], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=tmp)
        cycles = max(20, min(5000, int(duration / max(20e-6, n * 8 / place["rate_bps"] * 2))))
        out = tmp / f"hb-{tool}-{n}-{random.random()}"
        cmd = pc + [python, "-m", "hopbench", "run", "--peer", f"{host}:{port}", "--bytes", str(n),
                    "--reply-bytes", "same", "--cycles", str(cycles), "--warmup", str(max(5, cycles // 10)),
                    "--transport", tr, *tls, "--no-floor", "--out", str(out), "--poll", poll,
                    "--loop", loop]

        def parse(_):
            return float(next(csv.DictReader(open(out / "summary.csv")))["p50_ns"]) / 1e3
    try:
        wait_listening(place["server_prefix"], port)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
        if r.returncode != 0:
            raise RuntimeError(f"{tool} {n}: {r.stderr.strip()[-300:]}")
        return parse(r.stdout + r.stderr)
    finally:
        srv.kill()
        srv.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--places", default="loopback,emu-unshaped,emu-1g")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per measurement (about)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="message sizes, comma-separated")
    ap.add_argument("--tools", default=",".join(TOOLS), help="which tools, comma-separated (ratios need their pair)")
    ap.add_argument("--before", metavar="PYTHON", help="also run before-tcp/before-ucx with this interpreter")
    ap.add_argument("--placement", choices=sorted(PLACEMENTS), default="split",
                    help="split: servers on CPU 1, clients on CPU 0; same: both on CPU 0 (no cross-CPU wake-up)")
    ap.add_argument("--json", metavar="FILE", help="also write every measurement and ratio here (a new file)")
    a = ap.parse_args()
    if a.json and Path(a.json).exists():
        raise SystemExit(f"--json {a.json} exists: choose a new file")
    sizes = [int(x) for x in a.sizes.split(",") if x]
    tools = [t for t in a.tools.split(",") if t]
    global BEFORE
    if a.before:
        BEFORE = a.before
        tools += [f"before-{t.split('-')[1]}" for t in tools if t in ("hopbench-tcp", "hopbench-ucx")]
    unknown = set(tools) - set(TOOLS) - {"before-tcp", "before-ucx"}
    if unknown:
        raise SystemExit(f"unknown tools {sorted(unknown)} (known: {', '.join(TOOLS)})")
    global SERVER_CPU, CLIENT_CPU, PERFTEST
    SERVER_CPU, CLIENT_CPU = PLACEMENTS[a.placement]
    import importlib.util

    if importlib.util.find_spec("nixl_cu12") is None and any("nixl" in t for t in tools):
        tools = [t for t in tools if "nixl" not in t]
        print("nixl_pingpong and hopbench-nixl left out: nixl-cu12 is not installed "
              "(pip install --no-deps 'nixl-cu12>=1.5'; make bench-native does)")
    PERFTEST = ucx_perftest() if any("ucx" in t for t in tools) else None
    need = [t for t in ("sockperf", "qperf", "NPtcp") if t in tools] + ["taskset"]
    if "ucx_perftest" in tools:  # the libucx wheel's when it ships one, else the system's
        need.append(PERFTEST[0][0] if PERFTEST else "ucx_perftest")
    missing = [t for t in need if not shutil.which(t)]
    if missing:
        raise SystemExit(f"missing: {missing}; apt-get install sockperf qperf netpipe-tcp ucx-utils (make bench-native does)")
    from hopbench.core import native
    from hopbench.orchestration import netem

    print(__doc__.split("\n\n")[2].strip().replace("\n", " "))
    print(f"p50 full round trip in µs, median of {a.repeats} interleaved repeats; servers on CPU {SERVER_CPU}, "
          f"clients on CPU {CLIENT_CPU}")
    if PERFTEST:
        print(f"ucx_perftest: {PERFTEST[2]}; UCX environment for both: "
              + " ".join(f"{k}={v}" for k, v in sorted(PERFTEST[1].items()) if k != "LD_LIBRARY_PATH"))
    print("hopbench's compiled loop here: " + ("native" if native.UNAVAILABLE is None else f"python ({native.UNAVAILABLE})"))
    rates = {"loopback": None, "emu-unshaped": None, "emu-1g": 1000, "emu-100m": 100}
    record: dict = {"placement": a.placement, "server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU,
                    "repeats": a.repeats, "statistic": "p50 full round trip, us", "places": {}}
    for name in a.places.split(","):
        link = netem.Link.create(rate_mbit=rates[name]) if name != "loopback" else None
        place = {"server_prefix": link.exec_prefix("server") if link else [],
                 "client_prefix": link.exec_prefix("client") if link else [],
                 "host": link.server_addr if link else "127.0.0.1",
                 "rate_bps": (rates[name] or 8000) * 1e6}
        res: dict = {}
        try:
            with tempfile.TemporaryDirectory() as tmpd:
                combos = [(t, n) for t in tools for n in sizes]
                rng = random.Random(17)
                for i in range(a.repeats):
                    rng.shuffle(combos)
                    for t, n in combos:
                        res.setdefault((t, n), []).append(rtt_us(t, n, place, a.duration, Path(tmpd)))
                    # each repeat's values as they come: a run cut short keeps what it measured
                    print(f"{name} repeat {i + 1}/{a.repeats}: " + "  ".join(
                        f"{t}@{n} " + (f"{res[(t, n)][-1]:.1f}" if res[(t, n)][-1] is not None else "n/a")
                        for t in tools for n in sizes), flush=True)
        finally:
            if link:
                link.destroy()
        print(f"\n{name}")
        print(f"{'bytes':>8} " + " ".join(f"{t:>15}" for t in tools)
              + "  ratios of medians (per repeat: the median of the ratios [interval, level, n])")
        record["places"][name] = {str(n): _size_record(res, tools, n) for n in sizes}
        for n in sizes:
            rec = record["places"][name][str(n)]
            med = rec["median"]
            cells = " ".join(f"{med[t]:15.1f}" if med[t] is not None else f"{'n/a':>15}" for t in tools)
            ratios = [f"{k} {r['median']:.2f} (per repeat {median_text(r['per_repeat'], '.2f')})"
                      for k, r in rec["ratios"].items()]
            print(f"{n:>8} {cells}  {'  '.join(ratios)}", flush=True)
    if a.json:
        with open(a.json, "x") as f:
            json.dump(record, f, indent=1)


#: the ratios printed: hopbench's figure over its reference (None: the best of the TCP tools)
RATIOS = (("hopbench-tcp", None, "tcp/best"), ("hopbench-tcp", "sockperf", "tcp/sockperf"),
          ("hopbench-tcp-py", None, "tcp-py/best"),
          ("hopbench-ucx", "ucx_perftest", "ucx/perftest"), ("hopbench-ucx-py", "ucx_perftest", "ucx-py/perftest"),
          ("hopbench-nixl", "nixl_pingpong", "nixl/pingpong"), ("hopbench-nixl-py", "nixl_pingpong", "nixl-py/pingpong"),
          ("hopbench-nixl", "hopbench-ucx", "nixl/hopbench-ucx"),
          ("hopbench-tcp", "before-tcp", "tcp now/before"), ("hopbench-ucx", "before-ucx", "ucx now/before"))
NATIVE_TCP = ("sockperf", "qperf", "NPtcp")


def _size_record(res: dict, tools: list[str], n: int) -> dict:
    """One size: each tool's values per repeat and median; each ratio of medians and per
    repeat. The best TCP tool is the one with the lowest median over the repeats, the same
    tool in every repeat: the lowest of three noisy values of one repeat would sit below
    each tool's typical value and bias every per-repeat ratio upward."""
    vals = {t: res[(t, n)] for t in tools}
    med = {t: float(np.median(v)) if all(x is not None for x in v) else None for t, v in vals.items()}
    natives = [t for t in NATIVE_TCP if med.get(t) is not None]
    best = min(natives, key=lambda t: med[t]) if natives else None  # type: ignore[arg-type,return-value]

    def ref_at(ref: str | None, i: int | None) -> float | None:
        ref = ref if ref is not None else best
        if ref is None or ref not in vals:
            return None
        return med.get(ref) if i is None else vals[ref][i]

    ratios = {}
    for t, ref, key in RATIOS:
        base = ref_at(ref, None)
        if med.get(t) is None or not base:
            continue
        per = [vals[t][i] / r for i in range(len(vals[t])) if (r := ref_at(ref, i)) and vals[t][i] is not None]
        ratios[key] = {"median": med[t] / base, "per_repeat": per}
    return {"values": vals, "median": med, "ratios": ratios, "best_tcp": best}


if __name__ == "__main__":
    main()
