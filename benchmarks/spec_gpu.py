"""The drafter's bandwidth cost on the target's GPU, measured (issue 21): `hopbench spec`'s
local mode with GPU work models on one device — a real verify read and a real draft read
(the drafter's weights) against the verify read alone, interleaved, repeated, in one run.

    python benchmarks/spec_gpu.py [--verify-bytes 40e9] [--draft-bytes 3.758e9] [--out DIR]

Prints per configuration the cycle time and tokens/s with its interval over repeats, the
draft's measured cost (cycle with draft - verify alone) and the bandwidth each read got."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hopbench.analysis import spec as A  # noqa: E402
from hopbench.estimate import cell_estimate, pct  # noqa: E402
from hopbench.orchestration.spec import SpecConfig, run_spec  # noqa: E402
from hopbench.shape import load_shape  # noqa: E402

_SH = load_shape().shape
SHAPE = {"bytes_per_token": _SH.bytes_per_token, "id_bytes": _SH.id_bytes}  # the configured shape


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify-bytes", type=float, default=40e9)  # ~9 ms at ~4.3 TB/s
    ap.add_argument("--draft-bytes", type=float, default=3.5 * 2**30)  # the study: 3.5 GiB per rank
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    root = a.out or Path(tempfile.mkdtemp())
    root.mkdir(parents=True, exist_ok=True)
    configs = {
        "verify + draft (one GPU)": f"gpu-read:{a.draft_bytes:.0f}",
        "verify alone": "sleep:0",
    }
    results = {}
    for rep in range(a.repeats):  # interleaved: each repeat runs both configurations
        for name, draft in (configs.items() if rep % 2 == 0 else reversed(list(configs.items()))):
            cfg = SpecConfig(**SHAPE, modes=("local",), verify=f"gpu-read:{a.verify_bytes:.0f}", draft_local=draft,
                             cycles=a.cycles, warmup=3, repeats=1, seed=100 + rep)
            folder = run_spec(None, None, cfg, folder=root / f"{'draft' if 'draft' in name else 'alone'}-r{rep}")
            _, cycles, summary = A.load(folder)
            timed = [c for c in cycles if c["phase"] == "2"]
            results.setdefault(name, []).append({
                "tok_s": float(summary[0]["tok_s"]),
                "cycle_ms": sum(int(c["cycle_ns"]) for c in timed) / len(timed) / 1e6,
                "verify_ms": sum(int(c["verify_ns"]) for c in timed) / len(timed) / 1e6,
                "draft_ms": sum(int(c["draft_ns"]) for c in timed) / len(timed) / 1e6})
    print(f"local mode on one GPU: verify reads {a.verify_bytes / 1e9:.1f} GB, the draft reads "
          f"{a.draft_bytes / 2**30:.2f} GiB; {a.repeats} interleaved repeats x {a.cycles} cycles; "
          f"[interval] over repeats")
    for name, rows in results.items():
        tok = cell_estimate([r["tok_s"] for r in rows])
        cyc = cell_estimate([r["cycle_ms"] for r in rows])
        ver = cell_estimate([r["verify_ms"] for r in rows])
        dr = cell_estimate([r["draft_ms"] for r in rows])
        print(f"  {name:<26} tok/s {tok.value:8.2f} [{tok.lo:.2f}..{tok.hi:.2f}]  cycle {cyc.value:7.3f} ms  "
              f"verify {ver.value:7.3f} ms ({a.verify_bytes / ver.value / 1e9:.2f} TB/s)  draft {dr.value:6.3f} ms"
              + (f" ({a.draft_bytes / dr.value / 1e9:.2f} TB/s)" if dr.value > 0.01 else "") + f"  ({pct(tok.level)})")
    both, alone = results["verify + draft (one GPU)"], results["verify alone"]
    cost = cell_estimate([b["cycle_ms"] - o["cycle_ms"] for b, o in zip(both, alone)])
    print(f"  the draft's measured cost on the target's device (paired by repeat): {cost.value:.3f} ms "
          f"[{cost.lo:.3f}..{cost.hi:.3f}] per cycle, {pct(cost.level)} over {cost.n_repeats} repeats")


if __name__ == "__main__":
    main()
