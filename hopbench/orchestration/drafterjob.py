"""`hopbench drafter`: what a drafter of this shape costs on this host's GPU, with no peer
(docs/DRAFTER.md): the forward against the rows, with and without CUDA graphs, beside the
weight-read floor (weight bytes / the measured copy bandwidth) and the implied GB/s. It
writes a folder that `verdict --t-draft-remote FOLDER` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench import results as R
from hopbench.analysis.drafter import DRAFTER_FILE
from hopbench.estimate import median_interval
from hopbench.records import DrafterInfo

COLUMNS = ["rows", "graphs", "n", "p50_ns", "ci_lo_ns", "ci_hi_ns", "ci_level", "min_ns", "floor_ns", "floor_ratio",
           "implied_gb_per_s"]


def measure(shape: str, weights: Path | None, rows: list[int], k: int, repeats: int, device: str | None,
            say: Callable[[str], None]) -> dict[str, Any]:
    """The drafter's document: its info and a row per (rows, graphs)."""
    from hopbench.models import drafter as DM

    model = DM.Model(DM.parse_shape(shape), weights=weights, device=device)
    info = model.info()
    say(DrafterInfo.from_dict(info).line())
    out = []
    for graphs in ([True, False] if model.device == "cuda" else [False]):
        for r in DM.sweep_rows(model, rows, k, repeats, graphs):
            ns = r["forward_ns"]
            lo, hi, level = median_interval(ns)
            p50 = float(np.median(ns))
            out.append({"rows": r["rows"], "graphs": r["graphs"], "n": int(ns.size), "p50_ns": p50, "ci_lo_ns": lo,
                        "ci_hi_ns": hi, "ci_level": level, "min_ns": int(ns.min()),
                        "floor_ns": info["weight_read_floor_ns"], "floor_ratio": p50 / info["weight_read_floor_ns"],
                        "implied_gb_per_s": info["weight_bytes"] / p50})
    return R.document("drafter", {"created_utc": R.utc_iso(), "drafter": info, "k": k, "rows": out})


def table(doc: dict[str, Any]) -> list[str]:
    lines = ["   rows  graphs      n   p50 ms   p50 CI ms          level   x floor   GB/s"]
    for r in doc["rows"]:
        lines.append(f"{r['rows']:7d}  {'yes' if r['graphs'] else 'no':>6}  {r['n']:5d}  {r['p50_ns'] / 1e6:7.3f}  "
                     f"{r['ci_lo_ns'] / 1e6:7.3f}-{r['ci_hi_ns'] / 1e6:<7.3f}  {r['ci_level']:6.1%}  "
                     f"{r['floor_ratio']:7.2f}  {r['implied_gb_per_s']:6.0f}")
    graphed = {r["rows"]: r for r in doc["rows"] if r["graphs"]}
    eager = {r["rows"]: r for r in doc["rows"] if not r["graphs"]}
    both = sorted(set(graphed) & set(eager))
    if both:
        lines.append("CUDA graphs / eager (p50): " + ", ".join(
            f"{n} rows {graphed[n]['p50_ns'] / eager[n]['p50_ns']:.3f}" for n in both))
    return lines


def drafter_command(shape: str, weights: Path | None, rows: list[int], k: int, repeats: int, device: str | None,
                    results_dir: Path, name: str, out: Path | None, say: Callable[[str], None]) -> Path:
    doc = measure(shape, weights, rows, k, repeats, device, say)
    for line in table(doc):
        say(line)
    folder = R.new_folder(results_dir, name, out)
    R.atomic_write(folder / "drafter.csv", R.csv_text(COLUMNS, doc["rows"]))
    R.atomic_write(folder / DRAFTER_FILE, json.dumps(doc, indent=1) + "\n")
    say(f"results: {folder}  (hopbench verdict RESULTS --t-draft-remote {folder})")
    return folder


__all__ = ["drafter_command", "measure", "table"]
