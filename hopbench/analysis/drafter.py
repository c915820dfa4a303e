"""The remote drafter's own time, read from a measurement (docs/DRAFTER.md): a `hopbench
drafter` folder (drafter.json: the forward against the rows on that GPU), or a run folder
whose payloads ran the server's drafter model (`run --remote-drafter`: each cycle's
draft_ns). The verdict uses it in place of the assumed 0 ms."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from hopbench import results as R
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import DrafterInfo

DRAFTER_FILE = "drafter.json"
DRAFTER_SCHEMA = R.DOCUMENTS["drafter"][0]


@dataclass(frozen=True)
class RemoteTime:
    """The remote drafter's time per cycle: ms, its 95%-ish half-width, and its source."""

    ms: float
    pm: float
    source: str


def _where(info: DrafterInfo | None) -> str:
    return info.where if info is not None else "the server's drafter"


def from_drafter_folder(folder: Path, rows: int) -> RemoteTime:
    """A `hopbench drafter` folder: the CUDA-graphed forward (eager where graphs were off) at
    the row count nearest `rows`, its p50 and the half-width of its order-statistic interval."""
    try:
        doc = json.loads((folder / DRAFTER_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: not a hopbench drafter folder ({exc})") from None
    if doc.get("schema") != DRAFTER_SCHEMA:
        raise ConfigError(f"{folder}/{DRAFTER_FILE}: schema {doc.get('schema')!r}, expected {DRAFTER_SCHEMA!r}")
    graphed = [r for r in doc["rows"] if r.get("graphs")] or doc["rows"]
    graphed = [r for r in graphed if r.get("targets", 1) == 1]  # one target's forward: the verdict's
    if not graphed:
        raise ConfigError(f"{folder}/{DRAFTER_FILE}: no forward of one target was measured")
    best = min(graphed, key=lambda r: (abs(int(r["rows"]) - rows), int(r["rows"])))
    half = max(best["p50_ns"] - best["ci_lo_ns"], best["ci_hi_ns"] - best["p50_ns"]) / 1e6
    info = DrafterInfo.from_dict(doc["drafter"]) if doc.get("drafter") else None
    ctx = f", a {info.context:,}-token context" if info is not None and info.context else ""
    return RemoteTime(best["p50_ns"] / 1e6, half, f"measured: hopbench drafter, {_where(info)}, "
                                                  f"{best['rows']} rows{ctx}, p50 of {best['n']} forwards, its "
                                                  f"interval at {best['ci_level']:.1%}")


def from_run_folder(folder: Path, tokens: int) -> RemoteTime | None:
    """A run folder's drafter payload at `tokens` (else the nearest): its draft_ns p50 and CI;
    None when no payload of the run ran the drafter."""
    rf = R.ResultFolder(folder)
    if rf.kind != "run":
        return None
    try:
        with open(rf.file(R.SUMMARY_FILE), newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("draft_p50_ns")]
        header = rf.read_header()
    except (OSError, ValueError, HopbenchError):
        return None
    rows = [r for r in rows if r.get("tokens") and "~" not in r["payload"]]  # the synchronous drafter payloads
    if not rows:
        return None
    best = min(rows, key=lambda r: (abs(int(r["tokens"]) - tokens), int(r["tokens"])))
    p50, lo, hi = (float(best[k]) for k in ("draft_p50_ns", "draft_p50_ci_lo_ns", "draft_p50_ci_hi_ns"))
    info = DrafterInfo.from_env(getattr(header, "server_env", None))
    level = float(best["p50_ci_level"]) if best.get("p50_ci_level") else None
    return RemoteTime(p50 / 1e6, max(p50 - lo, hi - p50) / 1e6,
                      f"measured: {best['payload']}'s draft_ns in this run, {_where(info)}, p50 of {best['n']} cycles"
                      + (f", its interval at {level:.1%} within the run" if level else ""))


def remote_time(path: Path, tokens: int) -> RemoteTime:
    """--t-draft-remote FOLDER: a drafter folder or a run folder with drafter payloads."""
    if (path / DRAFTER_FILE).exists():
        return from_drafter_folder(path, tokens)
    got = from_run_folder(path, tokens)
    if got is None:
        raise ConfigError(f"--t-draft-remote {path}: neither a hopbench drafter folder nor a run whose payloads ran "
                          "the server's drafter model (run --remote-drafter)")
    return got


__all__ = ["DRAFTER_FILE", "DRAFTER_SCHEMA", "RemoteTime", "from_drafter_folder", "from_run_folder", "remote_time"]
