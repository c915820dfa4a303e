"""The native floor on a many-core host (issue 43): hopbench beside each transport's own tool at
the mission's payloads, in one table, repeatable on any Linux host with a GPU or without.

    python3 benchmarks/native_floor.py [--wheels DIR] [--repeats 5] [--nixl-runs 3]
                                       [--sizes 64,4096,61440,184320] [--nixl-cpus 3,5] [--out FILE.md]

What it runs, each with its spread:
- `benchmarks/bench_native.py --placement split --places loopback` (servers on CPU 1, clients on
  CPU 0; the tools and hopbench interleaved in a random order, `--repeats` times): per repeat,
  hopbench-tcp over the best of sockperf, qperf and NPtcp (the lowest median over the repeats,
  the same tool in every repeat), hopbench-ucx over
  ucx_perftest (the libucx wheel's, with hopbench's UCX environment); the median of those
  ratios with its distribution-free interval, its level and n;
- `benchmarks/nixl_paired.py` `--nixl-runs` times (hopbench-nixl and the minimal NIXL ping-pong in
  the same two processes, ABBA blocks; server and client CPUs from `--nixl-cpus`): the median
  of paired blocks per run, and the median over the runs with its interval.

Then one table, each ratio against issue 43's target (hopbench <= 1.05x the native tool at
61,440 and 184,320 B, <= 1.10x at 64 B and 4 KiB), printed and, with --out, written to a new
file (never over an existing one) with the host's description and both benches' raw output.

`--wheels DIR` installs first, where no package index is reachable: a virtual environment in
/tmp with hopbench from DIR's wheels (`pip install --no-index --find-links DIR
'hopbench[zmq,ucx]'`; nixl-cu12 with --no-deps when DIR holds it). The native tools are the
host's (Debian: apt-get install sockperf qperf netpipe-tcp ucx-utils); a missing one is named
and its columns left out by bench_native.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = {64: 1.10, 4096: 1.10}  # other sizes: 1.05
#: bench_native's tools here (NIXL is measured paired, by nixl_paired)
NATIVE_TOOLS = "sockperf,qperf,NPtcp,ucx_perftest,hopbench-tcp,hopbench-ucx"


def install(wheels: Path) -> str:
    """A fresh venv with hopbench (and nixl-cu12, when there) from a wheelhouse; its python."""
    venv = Path(tempfile.mkdtemp(prefix="hopbench-floor-")) / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run(pip + ["hopbench[zmq,ucx]"], check=True)
    if any(p.name.startswith("nixl_cu12") for p in wheels.iterdir()):
        subprocess.run(pip + ["--no-deps", "nixl-cu12"], check=True)
    return py


def host() -> dict[str, object]:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    return {"cpus": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "gpu": os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus"),
            "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def run(cmd: list[str], log: list[str], cwd: str) -> None:
    """Run a bench, its output shown as it comes and kept for the file; `cwd` outside the
    checkout, whose hopbench/ would shadow a hopbench installed from a wheel."""
    print("$ " + " ".join(cmd), flush=True)
    log.append("$ " + " ".join(cmd))
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd) as p:
        assert p.stdout is not None
        for line in p.stdout:
            print(line, end="", flush=True)
            log.append(line.rstrip("\n"))
    if p.returncode:
        raise SystemExit(f"{cmd[1]} failed (exit {p.returncode})")


def cell(values: list[float], target: float) -> str:
    """The median of the per-repeat (or per-run) ratios with its interval over them, its level
    and n, and the target's call."""
    from hopbench.estimate import median_text  # after --wheels, this runs in the venv that has hopbench

    if not values:
        return "n/a"
    return f"{median_text(values)} {'meets' if statistics.median(values) <= target else 'ABOVE'}"


def table(native: dict, nixl: list[dict], sizes: list[int]) -> list[str]:
    """One row per size: each transport's ratio, its spread, and whether it meets the target."""
    rows = ["| bytes | hopbench-tcp / best TCP tool | hopbench-tcp / sockperf (both p50s) | hopbench-ucx / ucx_perftest "
            "| hopbench-nixl / minimal NIXL | target |", "|---|---|---|---|---|---|"]
    loop = native["places"].get("loopback", {})
    for n in sizes:
        target = TARGET.get(n, 1.05)
        size = loop.get(str(n), {})
        ratios = size.get("ratios", {})
        cells = [cell(ratios.get(key, {}).get("per_repeat", []), target)
                 for key in ("tcp/best", "tcp/sockperf", "ucx/perftest")]
        if size.get("best_tcp"):
            cells[0] += f" (vs {size['best_tcp']})"
        runs = [x["sizes"][str(n)] for x in nixl if str(n) in x["sizes"]]
        loops = sorted({r.get("loop", "?") for r in runs})
        cells.append(cell([r["ratio"] for r in runs], target) + (f" ({', '.join(loops)} loop)" if runs else ""))
        rows.append(f"| {n:,} | " + " | ".join(cells) + f" | ≤ {target:.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheels", type=Path, help="install hopbench from this wheelhouse into a fresh venv first")
    ap.add_argument("--repeats", type=int, default=5, help="bench_native's interleaved repeats")
    ap.add_argument("--nixl-runs", type=int, default=3, help="nixl_paired runs (each its own process pair)")
    ap.add_argument("--sizes", default="64,4096,61440,184320")
    ap.add_argument("--nixl-cpus", default="3,5", help="nixl_paired's server,client CPUs")
    ap.add_argument("--blocks", type=int, default=30, help="nixl_paired's block pairs per size")
    ap.add_argument("--block", type=int, default=500, help="nixl_paired's cycles per block")
    ap.add_argument("--out", type=Path, help="write the table, the host and the raw output to this new file")
    a = ap.parse_args()
    if a.out and a.out.exists():
        raise SystemExit(f"--out {a.out} exists: choose a new file")
    if a.wheels:  # install, then go on in the new venv's interpreter (this one may lack hopbench)
        py = install(a.wheels)
        args = sys.argv[1:]
        argv = [x for i, x in enumerate(args) if x != "--wheels" and not x.startswith("--wheels=")
                and (i == 0 or args[i - 1] != "--wheels")]
        os.execv(py, [py, str(Path(__file__).resolve()), *argv])
    py = sys.executable
    server_cpu, client_cpu = a.nixl_cpus.split(",")
    if max(int(server_cpu), int(client_cpu), 1) >= (os.cpu_count() or 1):
        raise SystemExit(f"--nixl-cpus {a.nixl_cpus}: this host has {os.cpu_count()} CPUs (give two below it)")
    sizes = [int(x) for x in a.sizes.split(",")]
    where, log = host(), []
    with tempfile.TemporaryDirectory(prefix="native-floor-") as tmp:
        run([py, str(HERE / "bench_native.py"), "--placement", "split", "--places", "loopback", "--repeats",
             str(a.repeats), "--sizes", a.sizes, "--tools", NATIVE_TOOLS, "--json", f"{tmp}/native.json"], log, tmp)
        native = json.loads(Path(f"{tmp}/native.json").read_text())
        nixl = []
        if subprocess.run([py, "-c", "import nixl_cu12"], capture_output=True).returncode == 0:
            for k in range(a.nixl_runs):
                run([py, str(HERE / "nixl_paired.py"), "--sizes", a.sizes, "--blocks", str(a.blocks), "--block",
                     str(a.block), "--server-cpu", server_cpu, "--client-cpu", client_cpu, "--json",
                     f"{tmp}/nixl{k}.json"], log, tmp)
                nixl.append(json.loads(Path(f"{tmp}/nixl{k}.json").read_text()))
        else:
            log.append("nixl-cu12 is not installed: the nixl column is n/a")
    head = (f"{where['cpus']} CPUs ({where['cpu']}), kernel {where['kernel']}, "
            f"{'a GPU' if where['gpu'] else 'no GPU'}, {where['when']}; loopback; bench_native: servers on CPU 1, "
            f"clients on CPU 0, {a.repeats} interleaved repeats (median of the per-repeat ratios, each over the best "
            f"TCP tool at that size, the same in every repeat [distribution-free interval, its level, n]); "
            f"nixl_paired: server CPU {server_cpu}, client CPU {client_cpu}, {a.nixl_runs} runs of {a.blocks} ABBA "
            f"block pairs x {a.block} cycles (per run the median of paired blocks; their median over the runs "
            "[interval, level, n])")
    rows = table(native, nixl, sizes)
    print("\n" + head + "\n\n" + "\n".join(rows))
    if a.out:
        with open(a.out, "x") as f:
            f.write(f"# The native floor (benchmarks/native_floor.py)\n\n{head}\n\n" + "\n".join(rows)
                    + "\n\n## Raw output\n\n```\n" + "\n".join(log) + "\n```\n")
        print(f"written: {a.out}")


if __name__ == "__main__":
    main()
