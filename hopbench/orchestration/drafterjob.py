"""`hopbench drafter`: what a drafter of this shape costs on this host's GPU, with no peer
(docs/DRAFTER.md): the forward against the rows, with and without CUDA graphs, beside the
weight-read floor (weight bytes / the measured copy bandwidth) and the implied GB/s. It
writes a folder that `verdict --t-draft-remote FOLDER` reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench import results as R
from hopbench.analysis.drafter import DRAFTER_FILE
from hopbench.errors import ConfigError
from hopbench.estimate import median_interval
from hopbench.records import DrafterInfo

COLUMNS = ["targets", "rows", "graphs", "n", "p50_ns", "ci_lo_ns", "ci_hi_ns", "ci_level", "min_ns", "floor_ns",
           "floor_ratio", "implied_gb_per_s"]
#: the longest a `hopbench drafter` may take by its floor alone before it is refused (a CPU
#: asked for a GPU-sized drafter: issue 62)
WAIT_LIMIT_S = 600.0


@dataclass(frozen=True)
class DrafterJob:
    """`hopbench drafter`'s request: the shape (and weights), the forwards to time (each
    `targets` x `rows`, K ids a pass, over a `context`-token KV cache a target) and where the
    folder goes."""

    shape: str = "dspark-glm5"
    weights: Path | None = None
    rows: tuple[int, ...] = (1, 3)
    targets: tuple[int, ...] = (1,)
    k: int = 2
    context: int = 0
    repeats: int = 50
    device: str | None = None
    results_dir: Path = Path("results")
    name: str = "drafter"
    out: Path | None = None


def measure(job: DrafterJob, say: Callable[[str], None]) -> dict[str, Any]:
    """The drafter's document: its info and a row per (targets, rows, graphs): a forward of
    `targets` targets' rows at once, each attending over a context of its own."""
    from hopbench.models import drafter as DM

    targets, rows, k, context, repeats, device = job.targets, job.rows, job.k, job.context, job.repeats, job.device
    sh = DM.parse_shape(job.shape)
    where = device or "a GPU if torch sees one, else the CPU"
    say(f"building the {sh.name} drafter on {where}: {sh.weight_bytes() / 1e9:.2f} GB of BF16 weights (x2 as float32 "
        f"on a CPU), {'no context' if not context else f'a {context:,}-token context KV cache for {max(targets)} targets'}")
    model = DM.Model(sh, weights=job.weights, device=device, context=context, sessions=max(targets))
    if (wrong := model.refusal(k)) is not None:
        raise ConfigError(wrong)
    info = model.info()
    described = DrafterInfo.from_dict(info)
    say(described.line())
    if (note := described.cpu_note()) is not None:
        say(note)
    cells = [(m, n, g) for g in ([True, False] if model.device == "cuda" else [False]) for m in targets for n in rows]
    floor_s = {(m, n): model.read_bytes(m, n) / info["read_bytes_per_s"] for m in targets for n in rows}
    least = sum(floor_s[m, n] for m, n, _ in cells) * (repeats + 3)
    if least > WAIT_LIMIT_S:
        raise ConfigError(f"the {sh.name} drafter on {model.device} reads {model.read_bytes(1, 1) / 1e9:.1f} GB a "
                          f"forward: its {len(cells) * (repeats + 3)} forwards take at least {least / 60:.0f} min at "
                          f"this device's {info['read_bytes_per_s'] / 1e9:.0f} GB/s; run it on its GPU (--device cuda "
                          "there), or try --shape tiny here")
    out = []
    for i, (m, n, graphs) in enumerate(cells):
        r = DM.sweep_rows(model, [n], k, repeats, graphs, targets=m)[0]
        ns = r["forward_ns"]
        lo, hi, level = median_interval(ns)
        p50 = float(np.median(ns))
        floor = floor_s[m, n] * 1e9
        out.append({"targets": m, "rows": n, "graphs": r["graphs"], "n": int(ns.size), "p50_ns": p50, "ci_lo_ns": lo,
                    "ci_hi_ns": hi, "ci_level": level, "min_ns": int(ns.min()), "floor_ns": floor,
                    "floor_ratio": p50 / floor, "implied_gb_per_s": model.read_bytes(m, n) / p50})
        say(f"  [{i + 1}/{len(cells)}] {m} target{'s' if m > 1 else ''} x {n} rows{', graphed' if graphs else ''}: "
            f"p50 {p50 / 1e6:.3f} ms ({p50 / floor:.2f} x floor)"
            + (f", attention {r['attention'].lower()} (the fastest measured)" if r["attention"] else ""))
    return R.document("drafter", {"created_utc": R.utc_iso(), "drafter": info, "k": k, "rows": out})


def table(doc: dict[str, Any]) -> list[str]:
    lines = ["targets   rows  graphs      n   p50 ms   p50 CI ms          level   x floor   GB/s"]
    for r in doc["rows"]:
        lines.append(f"{r.get('targets', 1):7d}{r['rows']:7d}  {'yes' if r['graphs'] else 'no':>6}  {r['n']:5d}  "
                     f"{r['p50_ns'] / 1e6:7.3f}  "
                     f"{r['ci_lo_ns'] / 1e6:7.3f}-{r['ci_hi_ns'] / 1e6:<7.3f}  {r['ci_level']:6.1%}  "
                     f"{r['floor_ratio']:7.2f}  {r['implied_gb_per_s']:6.0f}")
    graphed = {(r.get("targets", 1), r["rows"]): r for r in doc["rows"] if r["graphs"]}
    eager = {(r.get("targets", 1), r["rows"]): r for r in doc["rows"] if not r["graphs"]}
    both = sorted(set(graphed) & set(eager))
    if both:
        lines.append("CUDA graphs / eager (p50): " + ", ".join(
            f"{m}x{n} rows {graphed[m, n]['p50_ns'] / eager[m, n]['p50_ns']:.3f}" for m, n in both))
    one = {r["rows"]: r for r in doc["rows"] if r.get("targets", 1) == 1 and r["graphs"] == doc["rows"][0]["graphs"]}
    scaled = [r for r in doc["rows"] if r.get("targets", 1) > 1 and r["rows"] in one and r["graphs"] == doc["rows"][0]["graphs"]]
    if scaled:
        lines.append("M targets / one (p50): " + ", ".join(
            f"{r['targets']}x{r['rows']} rows {r['p50_ns'] / one[r['rows']]['p50_ns']:.2f}" for r in scaled))
    return lines


def drafter_command(job: DrafterJob, say: Callable[[str], None]) -> Path:
    doc = measure(job, say)
    for line in table(doc):
        say(line)
    folder = R.new_folder(job.results_dir, job.name, job.out)
    R.atomic_write(folder / "drafter.csv", R.csv_text(COLUMNS, doc["rows"]))
    R.atomic_write(folder / DRAFTER_FILE, json.dumps(doc, indent=1) + "\n")
    say(f"results: {folder}  (hopbench verdict RESULTS --t-draft-remote {folder})")
    return folder


__all__ = ["DrafterJob", "drafter_command", "measure", "table"]
