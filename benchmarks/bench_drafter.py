"""The remote drafter measured (issue 50, docs/DRAFTER.md), side by side in one run:

1. `hopbench drafter --shape SHAPE`: the forward against the rows, CUDA-graphed and eager, beside
   the weight-read floor (targets: within 1.5x of the floor; graphed no slower than eager);
2. `serve --drafter SHAPE` + `run --tokens T --remote-drafter` on loopback: each cycle's
   draft_ns, and the hop with the drafter against the hop without it + draft_ns (target: 10%);
3. `--clients M` for each M: the mean batch, the forward against the rows (fit A + B x rows:
   what `spec --draft-remote batch:A+B` takes), each target's added wait, the aggregate
   cycles/s against one target's (target at M = 4: >= 3x);
4. streamed with `--stream layers,early=off|fc|all` (loopback, `--stream layers,forward=MS`): the exposed hop with the
   drafter's compute in it, beside the compute left after the accept count.

Every figure is printed as measured; nothing is compared with a number typed here but the
targets the issue sets. Usage:
  python benchmarks/bench_drafter.py [--shape dspark-glm5] [--clients 1,2,4,8] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np


def hb(*args: str) -> list[str]:
    return [sys.executable, "-m", "hopbench", *args]


def sh(cmd: list[str], timeout: float = 600) -> str:
    print("$", " ".join(cmd[2:]), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = out.stdout + out.stderr
    if out.returncode:
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    return text


class Server:
    """`hopbench serve --drafter` in a child process; ready once it has printed its listening
    and drafter lines (read line by line from its output, a blocking read)."""

    def __init__(self, port: int, shape: str, window_us: float, max_batch: int, context: int | None = None,
                 poll: str = "auto") -> None:
        ctx = ["--context", str(context)] if context is not None else []
        self.p = subprocess.Popen(hb("serve", "--bind", f"127.0.0.1:{port}", "--drafter", shape, "--max-sessions", "16",
                                     "--batch-window-us", str(window_us), "--max-batch", str(max_batch), "--poll", poll, *ctx),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = []
        assert self.p.stdout is not None
        for line in self.p.stdout:
            seen.append(line.rstrip())
            print(line.rstrip(), flush=True)
            if line.startswith("drafter "):
                self.gpu = "(bfloat16" in line  # the drafter runs on a GPU (BF16 there, float32 on a CPU)
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise SystemExit("the server ended before it was ready:\n" + "\n".join(seen[-20:]))

    def _drain(self) -> None:
        assert self.p.stdout is not None
        for _ in self.p.stdout:
            pass

    def stop(self) -> None:
        import time

        t0 = time.monotonic()
        self.p.terminate()
        try:
            self.p.wait(30)
            print(f"CHECK the server stopped on SIGTERM in {time.monotonic() - t0:.2f} s -> "
                  f"{'PASS' if time.monotonic() - t0 <= 5 else 'FAIL'}", flush=True)
        except subprocess.TimeoutExpired:  # a forward still holding it: end it
            print("CHECK the server stopped on SIGTERM: not within 30 s, killed -> FAIL", flush=True)
            self.p.kill()
            self.p.wait(30)


def latest(root: Path) -> Path:
    return sorted(p for p in root.iterdir() if p.is_dir())[-1]


def summary(folder: Path) -> list[dict]:
    with open(folder / "summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def samples(folder: Path) -> list[dict]:
    with open(folder / "samples.csv", newline="") as f:
        return list(csv.DictReader(f))


def ms(v: str | float | None) -> float:
    return float(v) / 1e6 if v not in (None, "") else float("nan")


def step_drafter(shape: str, rows: str, root: Path, doc: dict) -> None:
    text = sh(hb("drafter", "--shape", shape, "--rows", rows, "--repeats", "50", "--results-dir", str(root / "drafter")))
    print(text, flush=True)
    folder = latest(root / "drafter")
    d = json.loads((folder / "drafter.json").read_text())
    doc["drafter"] = d
    graphed = [r for r in d["rows"] if r["graphs"]]
    eager = {r["rows"]: r for r in d["rows"] if not r["graphs"]}
    if graphed:
        worst = max(r["floor_ratio"] for r in graphed)
        ratio = [r["p50_ns"] / eager[r["rows"]]["p50_ns"] for r in graphed if r["rows"] in eager]
        print(f"CHECK forward within 1.5x of the weight-read floor at every row count: worst {worst:.2f}x "
              f"-> {'PASS' if worst <= 1.5 else 'FAIL'}")
        print(f"CHECK CUDA-graphed no slower than eager: graphed/eager {min(ratio):.3f}..{max(ratio):.3f} "
              f"-> {'PASS' if max(ratio) <= 1.0 else 'FAIL'}")


def step_hop(port: int, tokens: str, root: Path, doc: dict, shape_file: str | None, poll: str = "auto") -> None:
    extra = ["--shape", shape_file] if shape_file else []
    text = sh(hb("run", "--peer", f"127.0.0.1:{port}", "--tokens", tokens, "--remote-drafter", "--cycles", "300",
                 "--warmup", "30", "--no-floor", "--poll", poll, "--results-dir", str(root / f"hop-{poll}"), *extra))
    print(text, flush=True)
    rows = {r["payload"]: r for r in summary(latest(root / f"hop-{poll}"))}
    doc["hop" if poll == "auto" else f"hop-{poll}"] = rows
    for name, r in rows.items():
        if "!draft" not in name:
            continue
        plain = rows[name.split("!draft")[0]]
        want = ms(plain["p50_ns"]) + ms(r["draft_p50_ns"])
        got = ms(r["p50_ns"])
        print(f"CHECK {name} (client --poll {poll}): hop with the drafter {got:.3f} ms vs hop without it + draft_ns "
              f"{ms(plain['p50_ns']):.3f} + {ms(r['draft_p50_ns']):.3f} = {want:.3f} ms: {got / want:.3f} "
              f"-> {'PASS' if got / want <= 1.05 else 'FAIL'} (target <= 1.05)")
    for name, left in re.findall(r"(T\d+!draft): the forward p50.*?\n.*?left ([+-][\d.]+) \(", text):
        share = float(left) / ms(rows[name]["p50_ns"])
        print(f"CHECK {name} (client --poll {poll}): the ledger's residual {float(left):+.3f} ms = {share:+.1%} of the "
              f"hop -> {'PASS' if abs(share) <= 0.02 else 'FAIL'} (target within 2%)")


def step_clients(port: int, clients: list[int], root: Path, doc: dict, shape_file: str | None) -> None:
    extra = ["--shape", shape_file] if shape_file else []
    per: dict[int, dict] = {}
    rows_ns: list[tuple[float, float]] = []
    for m in clients:
        args = ["run", "--peer", f"127.0.0.1:{port}", "--tokens", "3", "--remote-drafter", "--cycles", "200",
                "--warmup", "20", "--no-floor", "--results-dir", str(root / f"clients{m}"), *extra]
        if m > 1:
            args += ["--clients", str(m)]
        print(sh(hb(*args)), flush=True)
        folder = latest(root / f"clients{m}")
        sm = [r for r in samples(folder) if "!draft" in r["payload"] and r["phase"] == "timed"
              and (m == 1 or r.get("target"))]
        batch = np.array([float(r["batch_rows"]) for r in sm])
        draft = np.array([float(r["draft_ns"]) for r in sm])
        queue = np.array([float(r["queue_ns"]) for r in sm])
        rtt = np.array([float(r["rtt_ns"]) for r in sm])
        rows_ns += list(zip(batch, draft))
        agg = next((r for r in summary(folder) if "!draft" in r["payload"] and r.get("target") == "all"), None)
        cps = float(agg["cycles_per_s"]) if agg and agg.get("cycles_per_s") else len(sm) / (rtt.sum() / 1e9)
        # each target's cycles/s (its cycles over its summed hops) and Jain's fairness index of them
        by_t: dict[str, list[float]] = {}
        for r in sm:
            by_t.setdefault(r.get("target") or "1", []).append(float(r["rtt_ns"]))
        from hopbench.orchestration.stats import jain as jain_index

        each = np.array([len(v) / (sum(v) / 1e9) for v in by_t.values()])
        jain = jain_index(each.tolist()) or 0.0
        p99 = {t: float(np.percentile(v, 99)) / 1e6 for t, v in by_t.items()}
        # what the batched forward allows: M targets a forward of M targets' rows (its measured p50), back to back
        allows = m / (float(np.median(draft)) / 1e9)
        per[m] = {"mean_batch_rows": float(batch.mean()), "draft_p50_ms": float(np.median(draft)) / 1e6,
                  "queue_p50_ms": float(np.median(queue)) / 1e6, "hop_p50_ms": float(np.median(rtt)) / 1e6,
                  "cycles_per_s": cps, "forward_allows_cycles_per_s": allows, "jain": jain,
                  "per_target_cycles_per_s": each.tolist(), "hop_p99_ms_worst": max(p99.values())}
        print(f"M = {m} (n = {len(sm)} timed cycles, p50s; no interval: one run): "
              f"mean batch {batch.mean():.1f} rows, forward p50 {np.median(draft) / 1e6:.3f} ms, queue p50 "
              f"{np.median(queue) / 1e6:.3f} ms, hop p50 {np.median(rtt) / 1e6:.3f} ms (worst target's p99 "
              f"{max(p99.values()):.3f}), aggregate {cps:.0f} cycles/s = {cps / allows:.2f} of the {allows:.0f} the "
              f"batched forward allows, Jain {jain:.3f}", flush=True)
    x, y = np.array([r for r, _ in rows_ns]), np.array([d for _, d in rows_ns]) / 1e6
    b, a = np.polyfit(x, y, 1) if len(set(x)) > 1 else (0.0, float(np.median(y)))
    print(f"forward against the rows: {a:.3f} + {b * 1000:.3f} x rows/1000 ms  (spec --draft-remote batch:{a:.3f}+{b:.5f})")
    doc["clients"] = {"per_m": per, "fit_ms": {"a": a, "b_per_row": b}}
    if 1 in per and 4 in per:
        r = per[4]["cycles_per_s"] / per[1]["cycles_per_s"]
        print(f"CHECK aggregate cycles/s at M = 4 / one target: {r:.2f}x -> {'PASS' if r >= 3 else 'FAIL'}")
    if 8 in per:
        r, j = per[8]["cycles_per_s"] / per[8]["forward_allows_cycles_per_s"], per[8]["jain"]
        print(f"CHECK at M = 8 the aggregate within 15% of what the batched forward allows: {r:.2f} -> "
              f"{'PASS' if r >= 0.85 else 'FAIL'}; Jain {j:.3f} -> {'PASS' if j >= 0.95 else 'FAIL'}")


def step_stream(port: int, root: Path, doc: dict, forward_ms: float, shape_file: str | None, gpu: bool) -> None:
    extra = ["--shape", shape_file] if shape_file else []
    out = {}
    for early in ("off", "fc", "all"):
        print(sh(hb("run", "--peer", f"127.0.0.1:{port}", "--stream", f"layers,forward={forward_ms:g},early={early}",
                    "--remote-drafter", "--cycles", "100", "--no-floor",
                    "--results-dir", str(root / f"stream-{early}"), *extra)), flush=True)
        rows = {r["payload"]: r for r in summary(latest(root / f"stream-{early}"))}
        r = next(v for k, v in rows.items() if "~layers!draft" in k)
        plain = next(v for k, v in rows.items() if k.endswith("~layers") and k.startswith("T"))
        out[early] = {"exposed_p50_ms": ms(r["p50_ns"]), "after_accept_p50_ms": ms(r["draft_p50_ns"]),
                      "early_p50_ms": ms(r.get("early_p50_ns")), "exposed_without_drafter_ms": ms(plain["p50_ns"]),
                      "tail_p50_ms": ms(r.get("server_hold_p50_ns"))}
        o = out[early]
        # the model: the hop without the drafter, the early work the forward's tail (the last
        # tap's arrival to the accept count's) did not hide, and the compute after the accept
        # count. On a GPU the early work is asynchronous: the wait after the accept count
        # (draft_ns) already holds its unhidden part; on a CPU it holds up the serving thread
        # (the tail as `off` measured it: early work on a CPU delays the end message's stamp)
        o["tail_p50_ms"] = out["off"]["tail_p50_ms"]
        unhidden = max(0.0, o["early_p50_ms"] - o["tail_p50_ms"])
        o["model_ms"] = o["exposed_without_drafter_ms"] + o["after_accept_p50_ms"] + (0.0 if gpu else unhidden)
        print(f"early {early}: exposed hop {o['exposed_p50_ms']:.3f} ms; model {o['model_ms']:.3f} ms = without the "
              f"drafter {o['exposed_without_drafter_ms']:.3f} + compute after the accept count "
              f"{o['after_accept_p50_ms']:.3f} + early work {o['early_p50_ms']:.3f} beyond the forward's tail "
              f"{o['tail_p50_ms']:.3f} ({unhidden:.3f}); measured / model {o['exposed_p50_ms'] / o['model_ms']:.2f}",
              flush=True)
    doc["stream"] = out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="dspark-glm5")
    ap.add_argument("--shape-file", default=None, help="the shape config of the drafter (tiny: configs/shape-tiny.toml)")
    ap.add_argument("--rows", default="1,3,6,12,24,48,96,192")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--forward-ms", type=float, default=20.0)
    ap.add_argument("--window-us", type=float, default=300.0)
    ap.add_argument("--port", type=int, default=5290)
    ap.add_argument("--steps", default="drafter,hop,clients,stream")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--poll", default="auto", help="the hop step's client --poll, a list (e.g. auto,block): one run "
                    "each, on the same server (auto busy-polls a drafter plan where the client has 4 CPUs)")
    ap.add_argument("--server-poll", default="auto", help="the served drafter's --poll (busy: its receive spins too)")
    ap.add_argument("--context", default=None, help="the served drafter's --context, a list (e.g. 4096,0): the hop "
                    "and clients steps run once per value")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-drafter-"))
    doc: dict = {"shape": a.shape, "host_cpus": os.cpu_count()}
    steps = a.steps.split(",")
    try:
        if "drafter" in steps:
            step_drafter(a.shape, a.rows, root, doc)
        for context in [int(c) for c in a.context.split(",")] if a.context else [None]:
            if context is not None:
                print(f"== the served drafter with --context {context}", flush=True)
            here = doc if context is None else doc.setdefault("context", {}).setdefault(str(context), {})
            server = Server(a.port, a.shape, a.window_us, 16, context, a.server_poll)
            try:
                for poll in a.poll.split(",") if "hop" in steps else ():
                    step_hop(a.port, "1,3", root / f"c{context}", here, a.shape_file, poll)
                if "clients" in steps:
                    step_clients(a.port, [int(x) for x in a.clients.split(",")], root / f"c{context}", here, a.shape_file)
                if "stream" in steps:
                    step_stream(a.port, root / f"c{context}", here, a.forward_ms, a.shape_file, server.gpu)
            finally:
                server.stop()
    finally:
        if a.out:
            if a.out.exists():
                raise SystemExit(f"{a.out} exists; not overwriting it")
            a.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
