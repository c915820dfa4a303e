"""The streamed hop's real producer on the GPU (issue 65, docs/STREAM.md "A real producer"):
the extraction cost of tapping the study's five aux layers [8, 23, 39, 55, 70] of 78 at
T = K + 1 = 3 rows, under each way of graphing the forward (piecewise around the taps, one
full graph with the copies and flag words inside, eager), each as the forward with taps -
the same forward without (one full graph of every layer), ABBA blocks, the median paired
difference with its distribution-free interval; and the taps' times within the forward.

Then, unless --no-hop: the exposed hop from the GPU producer beside the clock-driven one
with its measured times, over loopback (`hopbench serve` and `hopbench run --stream layers
,target=gpu:MODE`), one run per mode.

Usage (on the GPU host):
  python benchmarks/bench_producer.py --modes piecewise,full,eager --blocks 10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TAPS = (8, 23, 39, 55, 70)


def extraction(modes: list[str], forward_ms: float, hidden: int, rows: int, blocks: int) -> list[dict]:
    from hopbench.models.target import TargetForward, TargetShape

    shape = TargetShape(78, TAPS, hidden, rows)
    out, width = [], None
    for mode in modes:
        graphs = "off" if mode == "eager" else mode
        t = TargetForward(shape, forward_ms, "cuda", graphs, width=width)
        width = t.width  # every mode on the same weights' width: one sizing
        x = t.extraction_cost(blocks=blocks)
        rec = {**t.record(), "mode": mode, "extraction": x, **t.tap_times(10)}
        out.append(rec)
        print(f"{mode:9s} width {t.width:,} ({rec['weight_bytes_per_layer'] / 1e6:,.0f} MB a layer), forward "
              f"{x['without_taps_ms']:.3f} ms without taps (asked {forward_ms:g}), {x['with_taps_ms']:.3f} with: "
              f"extraction cost {x['cost_ms'] * 1e3:+.1f} us [{x['cost_lo_ms'] * 1e3:+.1f}, {x['cost_hi_ms'] * 1e3:+.1f}]"
              f" ({x['level']:.0%}, {x['blocks']} ABBA blocks)", flush=True)
        if rec.get("sizing"):
            print("          sized in " + ", ".join(f"{r['width']:,} -> {r['forward_ms']:.2f} ms" for r in rec["sizing"]),
                  flush=True)
        if rec.get("tap_copy_ms"):
            ready = ", ".join(f"{v:.2f}" for v in rec["tap_ready_ms"])
            print(f"          medians of 10 tapped forwards: taps ready at {ready} ms; each copy "
                  f"{', '.join(f'{v * 1e3:.1f}' for v in rec['tap_copy_ms'])} us after its tap", flush=True)
        del t
        import torch

        torch.cuda.empty_cache()
    return out


def hop(mode: str, forward_ms: float, cycles: int, root: Path) -> str:
    hb = [sys.executable, "-m", "hopbench"]
    srv = subprocess.Popen([*hb, "serve", "--bind", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        from hopbench.orchestration.serverproc import ready_port

        port = ready_port(srv)
        target = "gpu" if mode == "piecewise" else f"gpu:{mode}"
        r = subprocess.run([*hb, "run", "--peer", f"127.0.0.1:{port}", "--stream",
                            f"layers,forward={forward_ms:g},target={target}", "--cycles", str(cycles), "--warmup", "5",
                            "--no-floor", "--out", str(root / mode)], capture_output=True, text=True, timeout=900)
    finally:
        srv.terminate()
        srv.wait(20)
    return r.stdout + r.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="piecewise,full,eager")
    ap.add_argument("--forward-ms", type=float, default=73.46)
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--rows", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--no-hop", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench_producer: needs a CUDA GPU (the target's forward runs on it)")
    modes = a.modes.split(",")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs; 78 layers, taps "
          f"{list(TAPS)}, {a.rows} x {a.hidden} BF16 rows", flush=True)
    doc: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": extraction(
        modes, a.forward_ms, a.hidden, a.rows, a.blocks)}
    if not a.no_hop:
        root = Path(tempfile.mkdtemp(prefix="bench-producer-"))
        doc["hops"] = {}
        for mode in modes:
            text = hop(mode, a.forward_ms, a.cycles, root)
            doc["hops"][mode] = text
            print(f"== run --stream layers,target=gpu:{mode}\n{text}", flush=True)
    if a.json:
        if a.json.exists():
            raise SystemExit(f"{a.json} exists; not overwriting it")
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
