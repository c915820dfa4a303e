"""Benchmark (not a test): the hop with GPU-resident payloads, host vs staged vs direct.

    python benchmarks/gpu_paths.py --out DIR [--repeats 5] [--cycles 400] [--warmup 40]
                                   [--server-cpu 2] [--client-cpu 4] [--tls tcp,cuda_copy]
                                   [--variants host-tcp,...] [--opt UCX_KEY=VALUE ...]

One `hopbench serve --gpu` (a child process, pinned) and this client (pinned), over
loopback, measure five variants of the same request/response cycle:

    host   tcp / ucx   payload in host memory on both ends (the baseline)
    staged tcp / ucx   payload in GPU memory on both ends; explicit pinned D2H before the
                       send, H2D after the receive, on each end (timed per stage)
    direct ucx         payload in GPU memory on both ends, handed to UCX as device buffers
                       (UCX_TLS=tcp,cuda_copy: UCX stages through host itself, as over a NIC
                       without GPUDirect RDMA; the lanes UCX selected are recorded)

at T = 1, 3, 8 tokens (61,440 B each, reply K = 2 ids) and a byte sweep (64 B - 4 MiB),
each repeat a fresh random order of all cells. Writes DIR/raw/repN/ (hopbench result
folders: report.json, samples.csv with per-cycle stages, summary.csv), DIR/summary.csv
(per variant x payload: median of all timed cycles pooled over the repeats with its 95%
order-statistic CI, the range of the repeats' own p50s, and the same per stage) and
DIR/gpu-paths.{png,svg}. Stage times are synchronised host timers (hopbench.core.gpu).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hopbench import results as R  # noqa: E402
from hopbench.core import gpu  # noqa: E402
from hopbench.core.client import Session  # noqa: E402
from hopbench.core.protocol import Plan  # noqa: E402
from hopbench.estimate import median_interval  # noqa: E402
from hopbench.orchestration.runner import RunWriter  # noqa: E402
from hopbench.orchestration.serverproc import ready_port  # noqa: E402
from hopbench.records import Payload  # noqa: E402

BYTES_PER_TOKEN = 61_440
K, ID_BYTES = 2, 4
VARIANTS = {  # name: (transport, client memory, server memory, path)
    "host-tcp": ("tcp", "host", "host", "staged"),
    "staged-tcp": ("tcp", "cuda", "cuda", "staged"),
    "host-ucx": ("ucx", "host", "host", "staged"),
    "staged-ucx": ("ucx", "cuda", "cuda", "staged"),
    "direct-ucx": ("ucx", "cuda", "cuda", "direct"),
}
PAYLOADS = [Payload(f"T{t}", t, t * BYTES_PER_TOKEN, K * ID_BYTES) for t in (1, 3, 8)] + \
           [Payload(f"B{b}", None, b, K * ID_BYTES) for b in (64, 4096, 65536, 262144, 1048576, 4194304)]
STAGES = ["d2h", "server_h2d", "wire", "server_d2h", "h2d", "transfer"]


def start_server(cpu: str, ucx: dict) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--gpu", "--cpu", cpu,
           *(f"--opt={k}={v}" for k, v in ucx.items())]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return srv, ready_port(srv)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--server-cpu", default="2")
    ap.add_argument("--client-cpu", default="4")
    ap.add_argument("--tls", default="tcp,cuda_copy")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--opt", action="append", default=[], help="extra UCX_*=VALUE for both ends (repeatable)")
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    a.out.mkdir(parents=True, exist_ok=False)
    dev = gpu.device_info()  # CUDA context before UCX's
    os.sched_setaffinity(0, {int(c) for c in a.client_cpu.split(",")})
    ucx = {"UCX_TLS": a.tls, **dict(o.split("=", 1) for o in a.opt)}
    srv, port = start_server(a.server_cpu, ucx)
    settings = {"ucx": ucx}
    rng = random.Random(a.seed)
    cells: dict[tuple[str, str], dict[str, list]] = {}
    header = {"schema": R.SCHEMA, "schema_version": R.SCHEMA_VERSION, "benchmark": "benchmarks/gpu_paths.py",
              "args": {k: str(v) for k, v in vars(a).items()}, "gpu": dev, "variants": VARIANTS}
    t_start = time.monotonic()
    try:
        session = Session("127.0.0.1", port, transport_settings=settings, timeout_s=30)
        for rep in range(a.repeats):
            order = [(v, p) for v in variants for p in PAYLOADS]
            rng.shuffle(order)
            folder = a.out / "raw" / f"rep{rep}"
            folder.mkdir(parents=True)
            writer = RunWriter(folder, {**header, "repeat": rep, "order": [f"{v}:{p.label}" for v, p in order]})
            for v, p in order:
                tr, cm, sm, path = VARIANTS[v]
                m = session.measure(Plan(tr, p.request_bytes, p.reply_bytes, K, ID_BYTES, a.cycles, a.warmup,
                                         transport_settings=settings.get(tr, {}), client_memory=cm,
                                         server_memory=sm, gpu_path=path))
                writer.add(m, p)
                writer.write("running")
                first = 1 + a.warmup
                c = cells.setdefault((v, p.label), {"total": [], **{s: [] for s in STAGES}, "lanes": set()})
                c["total"].append(m.timed.copy())
                for s in STAGES:
                    if f"{s}_ns" in m.stages:
                        c[s].append(m.stages[f"{s}_ns"][first:m.completed].copy())
                c["lanes"].update(m.data_info.get("selected") or [])
            writer.write("complete")
            print(f"repeat {rep + 1}/{a.repeats} done ({time.monotonic() - t_start:.0f} s)", flush=True)
        session.close()
    finally:
        srv.terminate()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()
            print("server ignored SIGTERM for 10 s: killed", file=sys.stderr)
    rows = summarise(cells, variants)
    (a.out / "summary.csv").write_text(R.csv_text(list(rows[0]), rows))
    (a.out / "meta.json").write_text(json.dumps(header, indent=1, default=str) + "\n")
    table(rows)
    plot(rows, a.out, dev)


def _p50s(arrays: list[np.ndarray]) -> tuple[float, float, float, float, float]:
    """median of all timed cycles pooled over the repeats, min and max of the repeats' own
    p50s (the run-to-run spread), and the pooled median's 95% order-statistic CI."""
    per = [float(np.median(x)) for x in arrays]
    pooled = np.sort(np.concatenate(arrays))
    lo, hi, _ = median_interval(pooled)
    return float(np.median(pooled)), min(per), max(per), lo, hi


def summarise(cells, variants) -> list[dict]:
    rows = []
    for p in PAYLOADS:
        for v in variants:
            c = cells.get((v, p.label))
            if not c:
                continue
            tr, cm, sm, path = VARIANTS[v]
            med, mn, mx, lo, hi = _p50s(c["total"])
            row = {"variant": v, "transport": tr, "client_memory": cm, "server_memory": sm,
                   "gpu_path": path if "cuda" in (cm, sm) else "", "payload": p.label, "tokens": p.tokens,
                   "request_bytes": p.request_bytes, "reply_bytes": p.reply_bytes, "repeats": len(c["total"]),
                   "n_per_repeat": len(c["total"][0]), "p50_us": med / 1e3, "p50_min_us": mn / 1e3,
                   "p50_max_us": mx / 1e3, "p50_ci_lo_us": lo / 1e3, "p50_ci_hi_us": hi / 1e3}
            for s in STAGES:
                if c[s]:
                    smed, _, _, slo, shi = _p50s(c[s])
                    row.update({f"{s}_p50_us": smed / 1e3, f"{s}_ci_lo_us": slo / 1e3, f"{s}_ci_hi_us": shi / 1e3})
                else:
                    row.update({f"{s}_p50_us": None, f"{s}_ci_lo_us": None, f"{s}_ci_hi_us": None})
            row["ucx_lanes"] = ";".join(sorted(c["lanes"]))
            rows.append(row)
    return rows


def table(rows: list[dict]) -> None:
    print(f"\n{'payload':>9} {'variant':>11} {'p50 us':>9} {'95% CI':>19} {'repeat range':>19}  stages (p50 us)")
    for r in rows:
        st = " ".join(f"{s} {r[f'{s}_p50_us']:.1f}" for s in STAGES[:5] if r.get(f"{s}_p50_us") is not None)
        print(f"{r['payload']:>9} {r['variant']:>11} {r['p50_us']:9.1f} {r['p50_ci_lo_us']:9.1f}-{r['p50_ci_hi_us']:<9.1f} "
              f"{r['p50_min_us']:9.1f}-{r['p50_max_us']:<9.1f}  {st}")


def plot(rows: list[dict], out: Path, dev: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for v in VARIANTS:
        pts = sorted((r["request_bytes"], r["p50_us"], r["p50_ci_lo_us"], r["p50_ci_hi_us"])
                     for r in rows if r["variant"] == v)
        if not pts:
            continue
        x, y, lo, hi = map(np.array, zip(*pts))
        ax1.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", ms=3, capsize=2, label=v,
                     ls="--" if v.startswith("host") else "-")
    ax1.set(xscale="log", yscale="log", xlabel="request bytes (reply 8 B)", ylabel="round trip p50 (us)",
            title=f"hop by payload placement ({dev.get('name')}, loopback)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=8)
    # stacked stages of the staged variants at T = 1, 3, 8, beside the host and direct totals
    colors = {"d2h": "C0", "server_h2d": "C1", "wire": "C2", "server_d2h": "C3", "h2d": "C4"}
    labels, xpos, labelled = [], 0, set()
    for t in ("T1", "T3", "T8"):
        for v in VARIANTS:
            r = next((r for r in rows if r["variant"] == v and r["payload"] == t), None)
            if r is None:
                continue
            if r.get("wire_p50_us") is not None:
                bottom = 0.0
                for s, col in colors.items():
                    val = r[f"{s}_p50_us"] or 0.0
                    ax2.bar(xpos, val, bottom=bottom, color=col, label=None if s in labelled else s)
                    labelled.add(s)
                    bottom += val
            else:
                ax2.bar(xpos, r["p50_us"], color="0.6" if v.startswith("host") else "0.3")
            ax2.errorbar(xpos, r["p50_us"], yerr=[[r["p50_us"] - r["p50_ci_lo_us"]], [r["p50_ci_hi_us"] - r["p50_us"]]],
                         color="k", capsize=2)
            labels.append((xpos, f"{t}\n{v}"))
            xpos += 1
        xpos += 1
    ax2.set_xticks([p for p, _ in labels], [lab for _, lab in labels], rotation=90, fontsize=7)
    ax2.set(ylabel="p50 (us); staged bars split by stage (stage p50s)", title="where the staged hop's time goes")
    handles, labs = ax2.get_legend_handles_labels()
    ax2.legend(handles, labs, fontsize=8)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"gpu-paths.{ext}", dpi=110)
    print(f"plots: {out}/gpu-paths.png, .svg")


if __name__ == "__main__":
    main()
