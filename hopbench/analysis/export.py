"""Export result summaries as `runs[]` records into the case-study data file
(data/case-studies.json): upsert by stable id, keep everything else, write atomically."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any, Callable

from hopbench.analysis.data import Group
from hopbench.errors import ConfigError, HopbenchError
from hopbench.results import ResultFolder, atomic_write, spec_folders

#: Version of the records written into runs[] (docs/case-studies.schema.json): 2 = records
#: with schema_version, result_id and intervals; records without schema_version are v1.
RECORD_SCHEMA_VERSION = 2

RECORD_FIELDS = ["id", "schema_version", "study", "result_id", "source", "created_utc", "rung", "transport", "payload",
                 "tokens", "request_bytes",
                 "reply_bytes", "gap_ms", "rate_mbit", "repeats", "n", "p50_ms", "p50_ci_lo_ms", "p50_ci_hi_ms",
                 "p50_ci_level", "p50_ci_scope", "alpha_us", "alpha_ci_lo_us", "alpha_ci_hi_us", "beta_mbit_s",
                 "beta_ci_lo_mbit_s", "beta_ci_hi_mbit_s", "fit_ci_level", "fit_ci_scope", "segment_lo_bytes",
                 "segment_hi_bytes", "segment_intercept_us", "breakpoint_bytes", "regime", "software", "result_status"]


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, nd)


def fit_fields(f) -> dict:
    """alpha and beta with their CIs and the segment they belong to. alpha is a latency only
    when it is >= 0; a negative intercept (an upper segment's) is written as
    segment_intercept_us with alpha_us null, never as a latency."""
    if f is None:
        return {k: None for k in RECORD_FIELDS if k.startswith(("alpha", "beta", "fit_", "segment", "breakpoint"))}
    mbit = 8 / 1e6
    return {
        "alpha_us": _r(f.alpha_s * 1e6, 3) if f.alpha_s >= 0 else None,
        "alpha_ci_lo_us": _r(f.alpha_ci[0] * 1e6, 3) if f.alpha_s >= 0 else None,
        "alpha_ci_hi_us": _r(f.alpha_ci[1] * 1e6, 3) if f.alpha_s >= 0 else None,
        "beta_mbit_s": _r(f.beta_Bps * mbit, 3), "beta_ci_lo_mbit_s": _r(f.beta_ci[0] * mbit, 3),
        "beta_ci_hi_mbit_s": _r(f.beta_ci[1] * mbit, 3), "fit_ci_level": f.ci_level, "fit_ci_scope": f.ci_scope,
        "segment_lo_bytes": f.segment_lo_bytes, "segment_hi_bytes": f.segment_hi_bytes,
        "segment_intercept_us": _r(f.alpha_s * 1e6, 3), "breakpoint_bytes": f.breakpoint_bytes,
    }


def record_id(study: str, rid: str, g: Group) -> str:
    """Stable across moves and renames of the folder: built from the result's own id."""
    key = json.dumps([study, rid, g.rung, g.transport, g.payload, g.gap_ms])
    return "hb-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def records(groups: list[Group], top: dict, source: str, study: str, fits=(), *, rid: str) -> list[dict]:
    """rid: the result's id (hopbench.analysis.data.result_id), which the record ids are built
    from; source: the folder's name, for people only."""
    fit_by = {(f.place, f.series): f for f in fits}
    out = []
    for g in groups:
        e = g.estimate()
        f = fit_by.get((g.place, g.series))  # the fit of this cell's own place (its gap too) and series
        out.append({
            "id": record_id(study, rid, g), "schema_version": RECORD_SCHEMA_VERSION, "study": study, "result_id": rid,
            "source": source,
            "created_utc": top.get("created_utc"), "rung": g.rung, "transport": g.transport, "payload": g.payload,
            "tokens": g.tokens, "request_bytes": g.request_bytes, "reply_bytes": g.reply_bytes, "gap_ms": g.gap_ms,
            "rate_mbit": g.rate_mbit, "repeats": e.n_repeats, "n": e.n_samples,
            "p50_ms": round(e.value / 1e6, 6),
            "p50_ci_lo_ms": None if e.lo is None else round(e.lo / 1e6, 6),
            "p50_ci_hi_ms": None if e.hi is None else round(e.hi / 1e6, 6),
            "p50_ci_level": None if e.level is None else round(e.level, 6), "p50_ci_scope": e.scope,
            **fit_fields(f),
            "regime": f.regime if f else None,
            "software": g.software or top.get("software") or "unknown",
            "result_status": top.get("status") or "unknown",
        })
    return out


def why_keep(old: dict, new: dict) -> str | None:
    """Why `new` must not replace `old` (same id), or None. A record from a complete result
    is never replaced by one from an incomplete result (a copy taken mid-run), nor by one
    with fewer cycles or repeats, nor by one that lost its fit."""
    if old.get("result_status", "complete") == "complete" and new.get("result_status", "complete") != "complete":
        return f"the file's is from a complete result, this one's is {new.get('result_status')}"
    for key, what in (("n", "cycles"), ("repeats", "repeats")):
        if isinstance(old.get(key), int) and isinstance(new.get(key), int) and new[key] < old[key]:
            return f"fewer {what} ({new[key]} < {old[key]})"
    if old.get("beta_mbit_s") is not None and new.get("beta_mbit_s") is None and "beta_mbit_s" in new:
        return "it has no fit, the file's has"
    return None


def upsert(path: Path, new: list[dict]) -> tuple[int, int, list[str]]:
    """Insert or replace records by id in path's runs[]; returns (added, updated, what was kept
    and why: a record is never replaced by a worse one, why_keep)."""
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
    kept: list[str] = []
    for rec in new:
        if rec["id"] in index:
            old = runs[index[rec["id"]]]
            why = why_keep(old, rec)
            if why:
                kept.append(f"{rec.get('rung')}/{rec.get('transport')}/{rec.get('payload') or rec.get('mode')}: {why}")
                continue
            runs[index[rec["id"]]] = rec
            updated += 1
        else:
            index[rec["id"]] = len(runs)
            runs.append(rec)
            added += 1
    atomic_write(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return added, updated, kept


def to_csv(recs: list[dict]) -> str:
    return to_csv_fields(recs, RECORD_FIELDS)


SPEC_FIELDS = ["id", "schema_version", "study", "kind", "result_id", "source", "created_utc", "rung", "rate_mbit",
               "transport", "mode", "repeats",
               "tok_s", "tok_s_ci_lo", "tok_s_ci_hi", "tok_s_ci_level", "tokens_per_cycle", "hit_rate", "checked_against",
               "reference_tok_s", "diff_rel", "k", "accept", "verify", "draft_local", "draft_remote", "fanout",
               "time_scale", "cycles", "software"]


def spec_records(folder: Path, study: str) -> list[dict]:
    """Measured end-to-end records: one per spec folder x mode (tok/s with its interval
    over repeats, the arithmetic or projection it was checked against, the inputs)."""
    from hopbench.analysis import spec as A
    from hopbench.analysis.data import result_id

    out = []
    for f in spec_folders(folder):
        report, results = A.analyse(f)
        cfg = report["config"]
        rid = result_id(f)
        for r in results:
            e = r.tok_s
            key = json.dumps([study, rid, cfg.get("rung"), r.mode])
            out.append({
                "id": "hbs-" + hashlib.sha256(key.encode()).hexdigest()[:16], "schema_version": RECORD_SCHEMA_VERSION,
                "study": study, "kind": "spec (measured end to end)", "result_id": rid, "source": f.name,
                "created_utc": report.get("created_utc"),
                "rung": cfg.get("rung") or "run", "rate_mbit": cfg.get("rate_mbit"), "transport": cfg.get("transport"),
                "mode": r.mode, "repeats": e.n_repeats, "tok_s": _r(e.value, 4), "tok_s_ci_lo": _r(e.lo, 4),
                "tok_s_ci_hi": _r(e.hi, 4), "tok_s_ci_level": None if e.level is None else round(e.level, 6),
                "tokens_per_cycle": _r(r.tokens_per_cycle, 4), "hit_rate": _r(r.hit_rate, 4),
                "checked_against": r.reference,
                "reference_tok_s": _r(r.reference_tok_s.value, 4) if r.reference_tok_s else None,
                "diff_rel": _r(r.diff_rel.value, 6) if r.diff_rel else None, "k": cfg.get("k"),
                "accept": cfg.get("accept"), "verify": cfg.get("verify"), "draft_local": cfg.get("draft_local"),
                "draft_remote": cfg.get("draft_remote"), "fanout": cfg.get("fanout"),
                "time_scale": cfg.get("time_scale"), "cycles": cfg.get("cycles"),
                "software": report.get("software") or "unknown"})
    return out


def to_csv_fields(recs: list[dict], fields: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in recs:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in fields})
    return buf.getvalue()


def export_folder(results: Path, into: Path | None, study: str, csv_out: Path | None, scfg: Any,
                  say: Callable[[str], None] = print) -> Path:
    """`hopbench export`: upsert a result folder's records into a case-study file (default
    RESULTS/analysis/case-studies.json), and optionally write them as CSV (a new file).
    `study` is part of every record id, not the folder's name: ids survive a move or rename."""
    from hopbench.analysis import fit as F
    from hopbench.analysis.data import load_groups, recorded_shape, result_id

    into = into or ResultFolder(results).derived("case-studies.json")
    if csv_out is not None and csv_out.exists():
        raise ConfigError(f"{csv_out} exists; refusing to overwrite it")
    spec_recs = spec_records(results, study) if spec_folders(results) else None
    if spec_recs is not None:  # a `hopbench spec` result: measured end-to-end records
        recs, what, csv_text = spec_recs, "spec records", to_csv_fields(spec_recs, SPEC_FIELDS)
    else:
        groups, top = load_groups(results)
        bpt, op = recorded_shape(results, scfg.shape.bytes_per_token, scfg.operating_tokens)
        recs = records(groups, top, Path(results).name, study, F.fit_groups(groups, bpt, op), rid=result_id(results))
        what, csv_text = "records", to_csv(recs)
    added, updated, kept = upsert(into, recs)
    say(f"{into}: {added} {what} added, {updated} updated, {len(kept)} kept (study {study!r})")
    for line in kept:
        say(f"  kept the file's record {line}")
    if csv_out is not None:
        atomic_write(csv_out, csv_text)
        say(f"CSV: {csv_out}")
    return into
