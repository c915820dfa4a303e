"""Reading result folders back for analysis: one Group per (rung, transport, payload,
gap) with its per-repeat medians and its pooled timed samples. Works on a sweep folder
(cells/...) and on a single `hopbench run` folder (one repeat, rung "run")."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hopbench.errors import HopbenchError
from hopbench.stats import median_ci


@dataclass
class Group:
    rung: str
    transport: str
    payload: str
    tokens: int | None
    request_bytes: int
    reply_bytes: int
    gap_ms: float
    rate_mbit: float | None
    repeat_p50_ns: list[float] = field(default_factory=list)
    samples: list[np.ndarray] = field(default_factory=list)

    @property
    def pooled(self) -> np.ndarray:
        return np.concatenate(self.samples) if self.samples else np.zeros(0, dtype=np.int64)

    @property
    def by_repeats(self) -> bool:
        return len(self.repeat_p50_ns) >= 5

    @property
    def p50_ns(self) -> float:
        """Median of per-repeat medians with >= 5 repeats, else the pooled samples' median
        (so the estimate and its CI below always come from the same data)."""
        if self.by_repeats or not self.samples:
            return float(np.median(self.repeat_p50_ns))
        return float(np.median(self.pooled))

    def p50_ci_ns(self) -> tuple[float, float]:
        """95% CI of the median: across repeats when there are >= 5 (order statistics over
        repeat medians; the repeat-to-repeat spread is the real uncertainty), else from the
        pooled samples' order statistics."""
        if self.by_repeats or not self.samples:
            return median_ci(np.sort(np.array(self.repeat_p50_ns)))
        return median_ci(np.sort(self.pooled))


def _timed_samples(samples_csv: Path) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    with open(samples_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["warmup"] == "0":
                out.setdefault(row["payload"], []).append(int(row["rtt_ns"]))
    return {k: np.array(v, dtype=np.int64) for k, v in out.items()}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise HopbenchError(f"{path} not found: not a hopbench result folder") from None
    except json.JSONDecodeError as exc:
        raise HopbenchError(f"{path}: not valid JSON ({exc})") from None


def load_groups(folder: str | Path) -> tuple[list[Group], dict]:
    """Groups of a sweep or run folder, plus its top-level report (sweep.json/report.json)."""
    folder = Path(folder)
    if (folder / "sweep.json").exists():
        top = _read_json(folder / "sweep.json")
        rates = {k: v.get("rate_mbit") for k, v in top.get("rungs", {}).items()}
        reports = sorted((folder / "cells").glob("*/*/*/*/report.json"))
    elif (folder / "report.json").exists():
        top = _read_json(folder / "report.json")
        rates = {}
        reports = [folder / "report.json"]
    else:
        raise HopbenchError(f"{folder}: neither a sweep (sweep.json) nor a run (report.json) folder")
    groups: dict[tuple, Group] = {}
    for rp in reports:
        run = _read_json(rp)
        rung = run.get("rung", "run")
        samples = _timed_samples(rp.parent / "samples.csv") if (rp.parent / "samples.csv").exists() else {}
        for p in run.get("payloads", []):
            s = p["summary"]
            if not s.get("complete") or not s.get("n"):
                continue
            plan = p["plan"]
            key = (rung, plan["transport"], p["payload"], float(plan.get("gap_ms", 0.0)))
            g = groups.get(key)
            if g is None:
                g = groups[key] = Group(rung, plan["transport"], p["payload"], p.get("tokens"), plan["request_bytes"],
                                        plan["reply_bytes"], float(plan.get("gap_ms", 0.0)), rates.get(rung))
            g.repeat_p50_ns.append(float(s["p50_ns"]))
            if p["payload"] in samples:
                g.samples.append(samples[p["payload"]])
    if not groups:
        raise HopbenchError(f"{folder}: no complete measurements found")
    return sorted(groups.values(), key=lambda g: (g.rung, g.transport, g.request_bytes, g.gap_ms)), top
