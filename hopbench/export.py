"""Export result summaries as `runs[]` records into the case-study data file
(data/case-studies.json): upsert by stable id, keep everything else, write atomically."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

from hopbench import __version__
from hopbench.data import Group
from hopbench.errors import HopbenchError
from hopbench.results import atomic_write

RECORD_FIELDS = ["id", "study", "source", "created_utc", "rung", "transport", "payload", "tokens", "request_bytes",
                 "reply_bytes", "gap_ms", "rate_mbit", "repeats", "n", "p50_ms", "p50_ci_lo_ms", "p50_ci_hi_ms",
                 "alpha_us", "beta_mbit_s", "regime", "software"]


def record_id(study: str, source: str, g: Group) -> str:
    key = json.dumps([study, source, g.rung, g.transport, g.payload, g.gap_ms])
    return "hb-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def records(groups: list[Group], top: dict, source: str, study: str, fits=()) -> list[dict]:
    fit_by = {(f.rung, f.transport): f for f in fits}
    out = []
    for g in groups:
        lo, hi = g.p50_ci_ns()
        f = fit_by.get((g.rung, g.transport))
        out.append({
            "id": record_id(study, source, g), "study": study, "source": source,
            "created_utc": top.get("created_utc"), "rung": g.rung, "transport": g.transport, "payload": g.payload,
            "tokens": g.tokens, "request_bytes": g.request_bytes, "reply_bytes": g.reply_bytes, "gap_ms": g.gap_ms,
            "rate_mbit": g.rate_mbit, "repeats": len(g.repeat_p50_ns), "n": int(g.pooled.size),
            "p50_ms": round(g.p50_ns / 1e6, 6), "p50_ci_lo_ms": round(lo / 1e6, 6), "p50_ci_hi_ms": round(hi / 1e6, 6),
            "alpha_us": round(f.alpha_s * 1e6, 3) if f else None,
            "beta_mbit_s": round(f.beta_Bps * 8 / 1e6, 3) if f else None,
            "regime": f.regime if f else None, "software": f"hopbench {__version__}",
        })
    return out


def upsert(path: Path, new: list[dict]) -> tuple[int, int]:
    """Insert or replace records by id in path's runs[]; returns (added, updated)."""
    path = Path(path)
    if path.exists():
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise HopbenchError(f"{path}: cannot parse it ({exc}); refusing to touch it") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("runs", []), list):
            raise HopbenchError(f"{path}: expected a JSON object with a runs[] list; refusing to touch it")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {}
    runs = doc.setdefault("runs", [])
    index = {r.get("id"): i for i, r in enumerate(runs) if isinstance(r, dict)}
    added = updated = 0
    for rec in new:
        if rec["id"] in index:
            runs[index[rec["id"]]] = rec
            updated += 1
        else:
            index[rec["id"]] = len(runs)
            runs.append(rec)
            added += 1
    atomic_write(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return added, updated


def to_csv(recs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=RECORD_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in recs:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in RECORD_FIELDS})
    return buf.getvalue()
