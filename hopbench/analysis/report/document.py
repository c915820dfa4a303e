"""The report's JSON document: the folder analysed once (Analysed), the verdicts, fits,
cells, warnings, environments and the commands that reproduce the result (run_argv: the
recorded config's own flags, RunConfig.to_argv)."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopbench.analysis import fit as F
from hopbench.analysis import hops as HP
from hopbench.analysis import verdict as V
from hopbench.analysis.data import Reading, cell_of, first_header, load_groups, reading, recorded_shape, result_id
from hopbench.errors import HopbenchError
from hopbench.records import MIN_GAIN, DrafterInfo
from hopbench.results import DOCUMENTS, SPEC_TARGETS_SCHEMA, ResultFolder

REPORT_SCHEMA, REPORT_SCHEMA_VERSION = DOCUMENTS["report"]


def _clean(x: Any) -> Any:
    """JSON-safe: tuples as lists, NaN/inf as null."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):  # numpy scalars
        return _clean(x.item())
    return str(x)


# ---------------------------------------------------------------- the document


def _cell_reports(folder: Path | Reading) -> list[tuple[Path, dict]]:
    from hopbench.analysis.data import read_folder

    return read_folder(folder).cells  # checked: a bad cell was left out (with a warning) there


def _doctor_and_drift(folder: Path | Reading, top: dict, sweep: bool) -> list[dict]:
    """The doctor's warnings as recorded (a sweep's pre-flight, a run's own), and the payload
    runs that drifted within themselves."""
    out: list[dict] = []
    doctor_docs = []
    if sweep:
        pre = top.get("preflight") or {}
        doctor_docs += [("local", pre.get("local") or {})] + list((pre.get("rungs") or {}).items())
    else:
        doctor_docs.append(("run", top.get("doctor") or {}))
    for where, rep in doctor_docs:
        for f in rep.get("findings") or []:
            if f.get("level") == "warn":
                out.append({"kind": "doctor", "text": f"{where}: {f.get('message')}"})
    drifts, n_runs = [], 0
    rungs: dict[str, list[int]] = {}  # rung -> [drifted, measured]: the Answer puts it beside the rung's row
    at = []
    for _, rep in _cell_reports(folder):
        for pl in rep.get("payloads") or []:
            s = pl.get("summary") or {}
            n_runs += 1
            try:
                key = cell_of(rep, pl)
            except (KeyError, TypeError, ValueError):
                key = None
            count = rungs.setdefault(key.place.label if key else "?", [0, 0])
            count[1] += 1
            if s.get("drift"):
                count[0] += 1
                cell = (rep.get("sweep") or {}).get("key") or pl.get("payload")
                drifts.append((abs(s.get("drift_rel") or 0), f"{cell}: {s.get('drift_rel', 0):+.1%}"))
                if key is not None:
                    at.append({"rung": key.place.label, "transport": key.transport, "tokens": key.tokens,
                               "drift_rel": s.get("drift_rel") or 0.0})
    if drifts:
        drifts.sort(reverse=True)
        out.append({"kind": "drift", "text": f"{len(drifts)} of {n_runs} measured payload runs drifted within the run "
                                             f"(Mann-Whitney, last third vs first, p < 0.01 and > 3%); largest "
                                             f"{drifts[0][1]}. Their medians stand; the machine was not steady while "
                                             "they ran", "items": [d[1] for d in drifts],
                    "rungs": {r: c for r, c in rungs.items() if c[0]}, "at": at})
    return out


def _warnings(folder: Path | Reading, top: dict, groups, verdicts: list[V.Verdict], floors: dict[str, float],
              wires: list[dict]) -> list[dict]:
    """Everything a reader should weigh before trusting the figures: kind, text."""
    out: list[dict] = []
    sweep = ResultFolder(folder).is_sweep
    status = top.get("status")
    if status and status != "complete":
        out.append({"kind": "status", "text": f"the {'sweep' if sweep else 'run'} is {status}: "
                                              "the figures cover only what was measured"})
    if top.get("fallback"):
        out.append({"kind": "fallback", "text": str(top["fallback"])})
    for fc in top.get("failed_cells") or []:
        out.append({"kind": "failed cell", "text": f"{fc.get('key', fc) if isinstance(fc, dict) else fc}: "
                                                   f"{fc.get('error', '') if isinstance(fc, dict) else ''}".strip()})
    out += _doctor_and_drift(folder, top, sweep)
    if top.get("kind") == "matrix":  # the pairs and nodes far from their peers, with a likely cause
        from hopbench.analysis import matrix as AM

        try:
            ph, _ = AM.hops(folder, groups=groups)
            for f in AM.outliers(ph, (top.get("matrix") or {}).get("nodes", {})):
                out.append({"kind": "matrix outlier", "text": f.describe()})
        except HopbenchError:
            pass
        for n, why in ((top.get("matrix") or {}).get("left") or {}).items():
            out.append({"kind": "node left", "text": f"node {n} left the cluster ({why}); its pairs are marked failed"})
    trend = HP.trend_warning(groups)
    if trend:
        out.append({"kind": "repeat trend", "text": trend.removeprefix("warning: ")})
    for v in verdicts:
        if v.not_network:
            out.append({"kind": "not a network hop", "rung": v.rung, "short": f"{v.transport}: not a network hop",
                        "text": f"{v.rung}, {v.transport}: UCX moved the hop by "
                        f"{', '.join(v.not_network)} (memory between two ends on one host, not the link): no call is "
                        "made from it; rerun with --opt UCX_TLS=tcp (ucx) or NIXL_UCX_TLS=tcp (nixl)"})
    for v in verdicts:
        fl = floors.get(v.transport)
        if fl and v.hop_ms < 3 * fl:
            out.append({"kind": "floor", "rung": v.rung, "short": f"{v.transport}: within 3x the floor",
                        "text": f"{v.rung} {v.transport}: the hop ({v.hop_ms:.3f} ms) is within 3x the "
                                f"instrument's floor ({fl:.3f} ms): it measures the host as much as the link"})
    for w in wires:
        if w["deviation"] > F.LOADED_OVER:
            out.append({"kind": "loaded host", "rung": w["rung"], "short": f"{w['transport']}: {w['deviation']:+.0%} "
                        "over its wire time", "text": f"{w['rung']} {w['transport']}: the hop is {w['deviation']:+.0%} "
                        f"over the wire time + the unshaped round trip, {F.LOADED_WARNING}"})
    return out


def run_argv(head: dict) -> list[str]:
    """The run's own reproduce line, from its recorded config (RunConfig.to_argv)."""
    from hopbench.records import RunConfig

    return RunConfig.from_dict(head.get("config") or {}).to_argv(head.get("peer") or "HOST:PORT")


def commands(folder: Path | Reading, top: dict, head: dict) -> list[dict]:
    """The commands that reproduce the result, then the one that rebuilds this page."""
    rep = ["hopbench", "report", str(folder)]
    if top.get("kind") == "matrix":
        return [{"where": "a node of the Ray cluster", "command": (top.get("config") or {}).get("command")
                 or "hopbench matrix --ray auto"}, {"where": "this page", "command": shlex.join(rep)}]
    if ResultFolder(folder).is_sweep:
        cfg = top.get("config") or {}
        args = ["hopbench", "sweep", cfg.get("path") or "configs/sweep.toml"]
        if cfg.get("profile") == "quick":
            args.append("--quick")
        return [{"where": "one machine (root for the emulated rungs)", "command": shlex.join(args)},
                {"where": "this page", "command": shlex.join(rep)}]
    host = (head.get("peer") or "HOST:PORT").rsplit(":", 1)[0]
    return [{"where": "server host", "command": shlex.join(serve_argv(host, head))},
            {"where": "client host", "command": shlex.join(run_argv(head))},
            {"where": "this page", "command": shlex.join(rep)}]


def serve_argv(host: str, head: dict) -> list[str]:
    """The server's line, from what its HELLO recorded: its request cap, the sessions it served
    at once (several targets need as many), and the drafter model it ran (--remote-drafter)."""
    serve = ["hopbench", "serve", "--bind", f"{host}:PORT"]
    caps = head.get("server_caps") or {}
    if caps.get("max_request_bytes"):
        serve += ["--max-request-bytes", str(caps["max_request_bytes"])]
    if (caps.get("max_sessions") or 1) > 1:
        serve += ["--max-sessions", str(caps["max_sessions"])]
    drafter = DrafterInfo.from_env(head.get("server_env"))
    if drafter is not None:
        source = str(drafter.shape.get("source") or "")
        serve += ["--drafter", source if source.endswith(".json") else drafter.name,
                  "--drafter-device", drafter.device.split(":")[0], "--context", str(drafter.context)]
        if drafter.weights != "random":
            serve += ["--drafter-weights", drafter.weights]
    return serve


@dataclass
class Analysed:
    """A result folder read and analysed once: what the document and the figures share."""

    folder: Reading
    groups: list
    top: dict
    bytes_per_token: int
    operating_tokens: int
    inputs: V.Inputs
    fits: list[F.Fit]
    verdicts: list[V.Verdict]
    problems: list[dict]
    spec: list[dict]  # hopbench spec results given with --spec: measured tok/s per rung


def spec_measured(spec_folders: list[Path], inputs: V.Inputs) -> list[dict]:
    """What `hopbench spec` measured end to end, per rung: the best remote mode's tok/s
    against the local mode's, the gain with its interval and the call at the same min gain."""
    from hopbench.analysis import spec as AS

    out = []
    for sf in spec_folders:
        targets = _spec_targets(sf)
        if targets is not None:  # spec --targets: how many targets one drafter serves, measured
            out.append(targets)
            continue
        report, modes = AS.analyse(sf)
        by = {m.mode: m for m in modes}
        remote = max((by[m] for m in ("sync", "overlap", "stream") if m in by), key=lambda m: m.tok_s.value, default=None)
        if "local" not in by or remote is None:
            raise HopbenchError(f"{sf}: a spec result needs the local mode and sync or overlap to answer (has {sorted(by)})")
        local = by["local"]
        gain = remote.tok_s.value / local.tok_s.value - 1
        decision, call = V.call_for_gain(gain, inputs.min_gain)
        every = [{"mode": m, "tok_s": by[m].tok_s.value, "gain": by[m].tok_s.value / local.tok_s.value - 1,
                  "repeats": by[m].tok_s.n_repeats} for m in ("sync", "overlap", "stream") if m in by]
        out.append({"folder": str(sf), "rung": (report.get("config") or {}).get("rung") or "run",
                    "transport": (report.get("config") or {}).get("transport"), "mode": remote.mode,
                    "tok_s": remote.tok_s.value, "local_tok_s": local.tok_s.value, "gain": gain,
                    "level": remote.tok_s.level, "repeats": remote.tok_s.n_repeats, "call": call, "decision": decision.value,
                    "modes": every, "status": report.get("status"),
                    "repeats_asked": (report.get("config") or {}).get("repeats")})
    return out


def _spec_targets(folder: Path) -> dict | None:
    """A `hopbench spec --targets` folder's capacity per remote mode (None: not such a folder)."""

    from hopbench.results import RUN_FILE, verify_files

    path = Path(folder) / RUN_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SPEC_TARGETS_SCHEMA:
        return None
    verify_files(path, doc)
    caps = doc.get("capacity") or {}
    if not caps or not isinstance(doc.get("rows"), list):
        raise HopbenchError(f"{folder}: a spec --targets result without its capacity (status {doc.get('status')})")
    mode = max(caps, key=lambda m: caps[m] or 0)
    cap = caps[mode]
    rows = [r for r in doc["rows"] if r.get("mode") == mode]
    at = next((r for r in rows if r.get("targets") == cap), None)
    return {"kind": "targets", "folder": str(folder), "rung": (doc.get("config") or {}).get("rung") or "run",
            "mode": mode, "capacity": cap, "measured": sorted(r["targets"] for r in rows),
            "local_tok_s": (doc.get("local_tok_s") or {}).get("value"),
            "worst_tok_s": at.get("worst_tok_s") if at else None,
            "worst_tok_s_ci": at.get("worst_tok_s_ci") if at else None, "gain": at.get("gain_worst") if at else None}


def analyse(folder: Path | Reading, scfg, min_gain: float = MIN_GAIN, spec: list[Path] | None = None,
            inputs: V.Inputs | None = None) -> Analysed:
    """`inputs`: the verdict's inputs as the user gave them (report --t-draft, --cycle, --tok-s,
    --t-draft-remote, the same as verdict's); default the shape's decode cycle and `min_gain`."""
    folder = reading(folder)
    groups, top = load_groups(folder)
    bpt, op = recorded_shape(folder, scfg.shape.bytes_per_token, scfg.operating_tokens)
    inputs = inputs or V.Inputs(scfg.t_draft_ms, scfg.cycle_ms, scfg.tok_s, min_gain=min_gain)
    problems: list[dict] = []
    try:
        verdicts, inputs = HP.verdicts_with_drafter(folder, op, inputs, groups)
    except HopbenchError as exc:  # e.g. a run without the operating payload: the rest still reports
        verdicts = []
        problems.append({"kind": "no verdict", "text": str(exc)})
    return Analysed(folder, groups, top, bpt, op, inputs, F.fit_groups(groups, bpt, op), verdicts, problems,
                    spec_measured(spec or [], inputs))


def _ledgers(folder: Path | Reading) -> list[dict]:
    """Each drafter payload's hop as its parts (analysis.drafter.ledger), beside the same
    payload's echo hop of its session: the report's stacked bar (docs/DRAFTER.md)."""
    from hopbench.analysis.drafter import ledger

    out = []
    for _, rep in _cell_reports(folder):
        by = {p.get("payload"): p.get("summary") or {} for p in rep.get("payloads") or []}
        for name, r in by.items():
            plain = by.get(str(name).split("!draft")[0]) if "!draft" in str(name) else None
            if plain and plain.get("p50_ns") and r.get("server_p50_ns") is not None and r.get("p50_ns"):
                where = (rep.get("sweep") or {}).get("key") or (rep.get("config") or {}).get("rung") or "run"
                out.append({"payload": name, "where": where, **ledger(r, plain)})
    return out


def _spec_rungs(a: Analysed) -> list[dict]:
    """A --spec result whose rung matches none here answers nothing on the page: said, not dropped."""
    here = {v.rung for v in a.verdicts} | {g.rung for g in a.groups}
    return [{"kind": "spec rung", "text": f"{s['folder']}: its rung {s['rung']!r} is none of this result's "
                                          f"({', '.join(sorted(here)) or 'none'}): it answers no row (run spec with "
                                          "--link NAME to match one)"}
            for s in a.spec if s["rung"] not in here]


def build_document(a: Analysed) -> dict:
    """The report's numbers: verdicts, fits, cells, warnings, environments, commands."""
    folder, groups, top, bpt, op = a.folder, a.groups, a.top, a.bytes_per_token, a.operating_tokens
    inputs, fits, verdicts = a.inputs, a.fits, a.verdicts
    floors = HP.instrument_floors(folder, (groups, top))
    wires = F.wire_check(groups, bpt, op)
    head = first_header(folder)
    sweep = ResultFolder(folder.path).is_sweep
    cells = []
    for g in groups:
        e = g.estimate()
        cells.append({"rung": g.rung, "transport": g.transport, "payload": g.payload, "tokens": g.tokens,
                      "request_bytes": g.request_bytes, "reply_bytes": g.reply_bytes, "gap_ms": g.gap_ms,
                      "p50_us": e.value / 1e3, "p50_ci_us": None if e.lo is None or e.hi is None else [e.lo / 1e3, e.hi / 1e3],
                      "p50_ci_level": e.level, "p50_ci_scope": e.scope, "repeats": e.n_repeats, "n": e.n_samples})
    doc = {
        "schema": REPORT_SCHEMA, "schema_version": REPORT_SCHEMA_VERSION,
        "kind": ("matrix" if top.get("kind") == "matrix" else "sweep") if sweep else "run",
        "folder": str(folder), "result_id": result_id(folder), "created_utc": top.get("created_utc"),
        "status": top.get("status"), "software": head.get("software"),
        "question": (f"What does one speculative-decoding hop cost on these links - T = {op} accepted tokens "
                     f"({op * bpt:,} B of aux hidden states) out, K draft ids back - and is moving the drafter "
                     f"to another box worth it?"),
        "operating_tokens": op, "operating_bytes": op * bpt, "bytes_per_token": bpt,
        "inputs": vars(inputs), "verdicts": [v.to_dict() for v in verdicts], "floors_ms": floors,
        "codecs": [{k: v for k, v in c.items() if k != "line"} for c in V.codec_calls(verdicts, V.codec_sources(groups))],
        "targets": [{k: v for k, v in t.items() if k != "line"} for t in V.targets_calls(verdicts)],
        "placement": HP.placement_note(top),
        "spec_measured": a.spec,
        "fits": [f.to_dict() for f in fits], "crossover": F.crossover(fits),
        "wire_check": wires, "cells": cells, "ledger": _ledgers(folder),
        "warnings": a.problems + _warnings(folder, top, groups, verdicts, floors, wires) + _spec_rungs(a),
        "environments": {"client": head.get("client_env") or {}, "server": head.get("server_env") or {}},
        "rungs": top.get("rungs") or {(head.get("config") or {}).get("rung") or "run": {
            "rate_mbit": (head.get("config") or {}).get("rate_mbit"), "peer": head.get("peer")}},
        "commands": commands(folder, top, head),
    }
    return _clean(doc)
