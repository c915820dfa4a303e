"""The remote drafter's own time, read from a measurement (docs/DRAFTER.md): a `hopbench
drafter` folder (drafter.json: the forward against the rows on that GPU), or a run folder
whose payloads ran the server's drafter model (`run --remote-drafter`: each cycle's
draft_ns). The verdict uses it in place of the assumed 0 ms."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


def _drafter_doc(folder: Path) -> dict:
    try:
        doc = json.loads((folder / DRAFTER_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: not a hopbench drafter folder ({exc})") from None
    if doc.get("schema") != DRAFTER_SCHEMA:
        raise ConfigError(f"{folder}/{DRAFTER_FILE}: schema {doc.get('schema')!r}, expected {DRAFTER_SCHEMA!r}")
    return doc


def _forwards(folder: Path, doc: dict, rows: int, targets: int | None) -> list[dict]:
    """The folder's CUDA-graphed forwards (eager where graphs were off) at the row count nearest
    `rows`, of `targets` targets (None: every count measured), fewest targets first."""
    graphed = [r for r in doc["rows"] if r.get("graphs")] or doc["rows"]
    counts = sorted({int(r.get("targets", 1)) for r in graphed})
    if targets is not None and targets not in counts:
        raise ConfigError(f"{folder}/{DRAFTER_FILE}: no forward of {targets} targets was measured (measured: "
                          f"{', '.join(map(str, counts))}; hopbench drafter --targets {targets} measures it)")
    out = []
    for m in counts if targets is None else [targets]:
        mine = [r for r in graphed if int(r.get("targets", 1)) == m]
        out.append(min(mine, key=lambda r: (abs(int(r["rows"]) - rows), int(r["rows"]))))
    return out


def from_drafter_folder(folder: Path, rows: int, targets: int = 1) -> RemoteTime:
    """A `hopbench drafter` folder: the CUDA-graphed forward (eager where graphs were off) of
    `targets` targets (each target's cycle waits for the batch's forward: --drafter-targets)
    at the row count nearest `rows`, its p50 and the half-width of its order-statistic interval."""
    doc = _drafter_doc(folder)
    (best,) = _forwards(folder, doc, rows, targets)
    half = max(best["p50_ns"] - best["ci_lo_ns"], best["ci_hi_ns"] - best["p50_ns"]) / 1e6
    info = DrafterInfo.from_dict(doc["drafter"]) if doc.get("drafter") else None
    ctx = f", a {info.context:,}-token context" if info is not None and info.context else ""
    batch = f", a batch of {targets} targets" if targets > 1 else ""
    return RemoteTime(best["p50_ns"] / 1e6, half, f"measured: hopbench drafter, {_where(info)}, "
                                                  f"{best['rows']} rows{batch}{ctx}, p50 of {best['n']} forwards, its "
                                                  f"interval at {best['ci_level']:.1%}")


def batch_model(folder: Path, rows: int) -> tuple[float, float, str]:
    """`spec --draft-remote batch:FOLDER`: A and B (ms) of "a batch of b drafts takes A + b*B"
    fitted (least squares) to a `hopbench drafter` folder's forwards of 1..M targets at the row
    count nearest `rows` (its context in each), and where they came from."""
    doc = _drafter_doc(folder)
    pts = _forwards(folder, doc, rows, None)
    if len(pts) < 2:
        raise ConfigError(f"{folder}: batch:FOLDER needs forwards of at least two target counts "
                          "(hopbench drafter --targets 1,2,4,8)")
    xs = [float(r.get("targets", 1)) for r in pts]
    ys = [r["p50_ns"] / 1e6 for r in pts]
    b, a = (float(v) for v in np.polyfit(xs, ys, 1))
    info = DrafterInfo.from_dict(doc["drafter"]) if doc.get("drafter") else None
    ctx = f", a {info.context:,}-token context" if info is not None and info.context else ""
    fit = ", ".join(f"{int(x)}: {y:.3f}" for x, y in zip(xs, ys))
    return max(a, 0.0), max(b, 0.0), (f"fitted to hopbench drafter's forwards in {folder} ({_where(info)}, "
                                      f"{pts[0]['rows']} rows{ctx}; ms by targets {fit})")


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


#: a drafter payload's hop as its parts, in order (docs/DRAFTER.md "The ledger")
LEDGER_PARTS = ("echo", "queue", "stage", "forward", "back", "rest", "left")


def ledger(r: dict, plain: dict) -> dict[str, float]:
    """A drafter payload's summary row `r` as its parts (p50s, ms) beside `plain`, the same
    payload's echo hop: the echo (the wire and the plain server path), the drafter's queue,
    staging, forward and ids back, the rest of the server's time from the request received to
    the reply sent, and what is left (the hop minus them all); and the hop."""
    ms = {k: r[f"{k}_p50_ns"] / 1e6 for k in ("queue", "stage", "draft", "back", "server")}
    echo, hop = plain["p50_ns"] / 1e6, r["p50_ns"] / 1e6
    return {"echo": echo, "queue": ms["queue"], "stage": ms["stage"], "forward": ms["draft"], "back": ms["back"],
            "rest": ms["server"] - ms["queue"] - ms["stage"] - ms["draft"] - ms["back"],
            "left": hop - echo - ms["server"], "hop": hop}


def remote_time(path: Path, tokens: int, targets: int = 1) -> RemoteTime:
    """--t-draft-remote FOLDER: a drafter folder (its forward of `targets` targets) or a run
    folder with drafter payloads."""
    if (path / DRAFTER_FILE).exists():
        return from_drafter_folder(path, tokens, targets)
    if targets != 1:
        raise ConfigError(f"--drafter-targets {targets}: a batched forward is read from a hopbench drafter folder "
                          f"(hopbench drafter --targets 1,{targets}), not from {path}")
    got = from_run_folder(path, tokens)
    if got is None:
        raise ConfigError(f"--t-draft-remote {path}: neither a hopbench drafter folder nor a run whose payloads ran "
                          "the server's drafter model (run --remote-drafter)")
    return got


__all__ = ["DRAFTER_FILE", "DRAFTER_SCHEMA", "LEDGER_PARTS", "RemoteTime", "batch_model", "from_drafter_folder",
           "from_run_folder", "ledger", "remote_time"]
