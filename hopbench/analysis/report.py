"""`hopbench report`: one self-contained HTML page for a run or a sweep folder.

The page leads with the question and the verdict, then the fit (CIs, regimes), the
figures (inline SVG: no network fetch, no script needed to read it), the cells, the
warnings, both ends' environments and the commands that reproduce it. The same numbers
are one JSON document (`build(...)[0]`, `hopbench report --json`, and embedded in the page
as <script type="application/json" id="hopbench-data">); every number the page shows
carries `data-k` (its path in that document) and `data-x` (the factor it was shown in), so
a test can check the page against the JSON (tests/test_report_browser.py)."""

from __future__ import annotations

import html
import json
import math
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from hopbench.analysis import fit as F
from hopbench.analysis import hops as HP
from hopbench.analysis import verdict as V
from hopbench.analysis.data import Reading, first_header, load_groups, reading, recorded_shape, result_id
from hopbench.errors import HopbenchError
from hopbench.estimate import pct
from hopbench.records import MIN_GAIN, Place, Series
from hopbench.results import SPEC_TARGETS_SCHEMA, ResultFolder

REPORT_SCHEMA = "hopbench.report"
REPORT_SCHEMA_VERSION = 1


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


def _warnings(folder: Path | Reading, top: dict, groups, verdicts: list[V.Verdict], floors: dict[str, float]) -> list[dict]:
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
    for _, rep in _cell_reports(folder):
        for pl in rep.get("payloads") or []:
            s = pl.get("summary") or {}
            n_runs += 1
            if s.get("drift"):
                cell = (rep.get("sweep") or {}).get("key") or pl.get("payload")
                drifts.append((abs(s.get("drift_rel") or 0), f"{cell}: {s.get('drift_rel', 0):+.1%}"))
    if drifts:
        drifts.sort(reverse=True)
        out.append({"kind": "drift", "text": f"{len(drifts)} of {n_runs} measured payload runs drifted within the run "
                                             f"(Mann-Whitney, last third vs first, p < 0.01 and > 3%); largest "
                                             f"{drifts[0][1]}. Their medians stand; the machine was not steady while "
                                             "they ran", "items": [d[1] for d in drifts]})
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
            out.append({"kind": "not a network hop", "text": f"{v.rung}, {v.transport}: UCX moved the hop by "
                        f"{', '.join(v.not_network)} (memory between two ends on one host, not the link): no call is "
                        "made from it; rerun with --opt UCX_TLS=tcp (ucx) or NIXL_UCX_TLS=tcp (nixl)"})
    for v in verdicts:
        fl = floors.get(v.transport)
        if fl and v.hop_ms < 3 * fl:
            out.append({"kind": "floor", "text": f"{v.rung} {v.transport}: the hop ({v.hop_ms:.3f} ms) is within 3x the "
                                                 f"instrument's floor ({fl:.3f} ms): it measures the host as much as the link"})
    return out


def _run_command(head: dict) -> list[str]:
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
    serve = ["hopbench", "serve", "--bind", f"{host}:PORT"]
    caps = head.get("server_caps") or {}
    if caps.get("max_request_bytes"):
        serve += ["--max-request-bytes", str(caps["max_request_bytes"])]
    return [{"where": "server host", "command": shlex.join(serve)},
            {"where": "client host", "command": shlex.join(_run_command(head))},
            {"where": "this page", "command": shlex.join(rep)}]


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
    from hopbench.analysis import spec as S

    out = []
    for sf in spec_folders:
        targets = _spec_targets(sf)
        if targets is not None:  # spec --targets: how many targets one drafter serves, measured
            out.append(targets)
            continue
        report, modes = S.analyse(sf)
        by = {m.mode: m for m in modes}
        remote = max((by[m] for m in ("sync", "overlap") if m in by), key=lambda m: m.tok_s.value, default=None)
        if "local" not in by or remote is None:
            raise HopbenchError(f"{sf}: a spec result needs the local mode and sync or overlap to answer (has {sorted(by)})")
        local = by["local"]
        gain = remote.tok_s.value / local.tok_s.value - 1
        call = V.call_for_gain(gain, inputs.min_gain)
        every = [{"mode": m, "tok_s": by[m].tok_s.value, "gain": by[m].tok_s.value / local.tok_s.value - 1,
                  "repeats": by[m].tok_s.n_repeats} for m in ("sync", "overlap") if m in by]
        out.append({"folder": str(sf), "rung": (report.get("config") or {}).get("rung") or "run",
                    "transport": (report.get("config") or {}).get("transport"), "mode": remote.mode,
                    "tok_s": remote.tok_s.value, "local_tok_s": local.tok_s.value, "gain": gain,
                    "level": remote.tok_s.level, "repeats": remote.tok_s.n_repeats, "call": call,
                    "modes": every, "status": report.get("status"),
                    "repeats_asked": (report.get("config") or {}).get("repeats")})
    return out


def _spec_targets(folder: Path) -> dict | None:
    """A `hopbench spec --targets` folder's capacity per remote mode (None: not such a folder)."""
    import json

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


def analyse(folder: Path | Reading, scfg, min_gain: float = MIN_GAIN, spec: list[Path] | None = None) -> Analysed:
    folder = reading(folder)
    groups, top = load_groups(folder)
    bpt, op = recorded_shape(folder, scfg.shape.bytes_per_token, scfg.operating_tokens)
    inputs = V.Inputs(scfg.t_draft_ms, scfg.cycle_ms, scfg.tok_s, min_gain=min_gain)
    problems: list[dict] = []
    try:
        verdicts = HP.verdicts(folder, op, inputs, groups)
    except HopbenchError as exc:  # e.g. a run without the operating payload: the rest still reports
        verdicts = []
        problems.append({"kind": "no verdict", "text": str(exc)})
    return Analysed(folder, groups, top, bpt, op, inputs, F.fit_groups(groups, bpt, op), verdicts, problems,
                    spec_measured(spec or [], inputs))


def build_document(a: Analysed) -> dict:
    """The report's numbers: verdicts, fits, cells, warnings, environments, commands."""
    folder, groups, top, bpt, op = a.folder, a.groups, a.top, a.bytes_per_token, a.operating_tokens
    inputs, fits, verdicts = a.inputs, a.fits, a.verdicts
    floors = HP.instrument_floors(folder, (groups, top))
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
        "wire_check": F.wire_check(groups, bpt, op), "cells": cells,
        "warnings": a.problems + _warnings(folder, top, groups, verdicts, floors),
        "environments": {"client": head.get("client_env") or {}, "server": head.get("server_env") or {}},
        "rungs": top.get("rungs") or {(head.get("config") or {}).get("rung") or "run": {
            "rate_mbit": (head.get("config") or {}).get("rate_mbit"), "peer": head.get("peer")}},
        "commands": commands(folder, top, head),
    }
    return _clean(doc)


# ---------------------------------------------------------------- the page

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1360px;
padding:1em 2em;color:#1d2330}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;border-bottom:1px solid #d0d5de;padding-bottom:.2em;margin-top:1.6em}
.q{font-size:1.1em;background:#f3f6fb;border-left:4px solid #3a6ea5;padding:.6em 1em}
table{border-collapse:collapse;margin:.5em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d5de;padding:.25em .5em;text-align:right;vertical-align:top}td{white-space:nowrap}
td.t.call,td.wrap{white-space:normal}.answer li{margin:.15em 0}
th{background:#eef1f6}td.t,th.t{text-align:left}
.call{font-weight:600}.pays{color:#1a7f37}.costs{color:#b42318}.even{color:#8a6d00}
.note{color:#555;font-size:.92em}figure{margin:1em 0}figure svg{max-width:100%;height:auto}
figcaption{color:#444;font-size:.92em}ul.w li{margin:.2em 0}.w .k{font-weight:600}
pre{background:#f6f8fa;padding:.6em 1em;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}
.diff{background:#fff4d6}.wide{overflow-x:auto}th{white-space:normal}#fit td,#cells td{white-space:normal}
#environment table{table-layout:fixed;width:100%}#environment td{white-space:normal;overflow-wrap:anywhere;text-align:left}
@media (max-width:1000px){body{padding:.5em .8em;font-size:12.5px}th,td{padding:.15em .3em}td{white-space:normal}
#fit table{font-size:10.5px}}
@media (max-width:600px){.wide{overflow-x:visible}table,#environment table{display:block;width:100%}
table tbody{display:block}tr:has(>th){display:none}tr{display:block;border:1px solid #d0d5de;margin:.4em 0}
td,#environment td{display:block;border:0;border-bottom:1px solid #eef1f6;white-space:normal;
overflow-wrap:anywhere;text-align:right}td::before{content:attr(data-h);float:left;font-weight:600;text-align:left;
color:#444;max-width:45%;margin-right:.8em}#fit table{font-size:inherit}}
"""


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def num(doc: dict, path: str, nd: int = 1, x: float = 1.0, sign: bool = False) -> str:
    """A number as shown, tied to its path in the JSON document (data-k) and the factor it is shown in (data-x)."""
    v = _get(doc, path)
    if v is None:
        return "-"
    shown = format(v * x, f"{'+' if sign else ''},.{nd}f").replace("-", "&minus;")
    return f'<span class="n" data-k="{path}" data-x="{x:g}">{shown}</span>'


def _get(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if doc is None:
            return None
        doc = doc[int(part)] if isinstance(doc, list) else doc.get(part)
    return doc


def _level(level: float | None, scope: str | None) -> str:
    """An interval's achieved level, marked when it is within one run only."""
    return "-" if level is None else pct(level) + (" (one run)" if scope == "within-run" else "")


def _call_class(call: str) -> str:
    return ("costs" if call.startswith(V.NOT_NETWORK) else "pays" if call.startswith("move") or "pays" in call else
            "even" if "dead" in call or "undecided" in call or call.startswith("not worth") else "costs")


def _verdict_section(doc: dict) -> str:
    inp = doc["inputs"]
    rows = []
    for i, v in enumerate(doc["verdicts"]):
        p = f"verdicts.{i}"
        ci = (f"{num(doc, p + '.hop_ci_ms.0', 3)}&ndash;{num(doc, p + '.hop_ci_ms.1', 3)}" if v["hop_ci_ms"] else "-")
        lvl = _level(v["hop_ci_level"], v["hop_ci_scope"])
        tci = (f"{num(doc, p + '.projected_tok_s_ci.0', 2)}&ndash;{num(doc, p + '.projected_tok_s_ci.1', 2)}"
               if v["projected_tok_s_ci"] else "-")
        fl = num(doc, f"floors_ms.{v['transport']}", 3) if v["transport"] in doc["floors_ms"] else "-"
        rows.append(f'<tr><td class="t">{_esc(v["rung"])}</td><td class="t">{_esc(v["transport"])}</td>'
                    f'<td>{num(doc, p + ".hop_ms", 3)}</td><td>{ci}</td><td>{_esc(lvl)}</td>'
                    f'<td>{v["n_repeats"] or "-"} r / {v["n_cycles"] or 0} c</td><td>{fl}</td>'
                    f'<td>{num(doc, p + ".hop_vs_break_even", 1, 100, sign=True)}%</td>'
                    f'<td>{num(doc, p + ".projected_tok_s", 2)}</td>'
                    f'<td>{tci}</td><td>{num(doc, p + ".gain", 1, 100, sign=True)}%</td>'
                    f'<td class="t call {_call_class(v["call"])}">{_esc(v["call"])}</td></tr>')
    if not rows:
        body = '<p class="note">No verdict: see the warnings.</p>'
    else:
        body = ("<table><tr><th class=t>rung</th><th class=t>transport</th><th>hop ms</th><th>hop CI</th><th>level</th>"
                "<th>n</th><th>floor ms</th><th>vs break-even</th><th>tok/s</th><th>tok/s 95% CI</th><th>gain</th>"
                "<th class=t>call</th></tr>" + "".join(rows) + "</table>")
    return (f'<section id="verdict"><h2>Verdict at T = {doc["operating_tokens"]} '
            f'({doc["operating_bytes"]:,} B per hop)</h2>'
            f'<p>Break-even hop = the drafter\'s time per cycle, t_draft = {num(doc, "inputs.t_draft_ms", 2)} ms; '
            f'co-located cycle {num(doc, "inputs.cycle_ms", 2)} ms at {num(doc, "inputs.tok_s", 2)} tok/s. '
            f'Moving the drafter: projected cycle = cycle &minus; t_draft + hop.</p>{body}'
            '<p class="note">hop = median of repeat medians, its interval at the level shown (order statistics '
            'over repeats; "one run" = within a single run, the run-to-run spread is not in it). tok/s and gain '
            'intervals: 95%, every input\'s interval propagated. "dead heat" = hop within '
            f'{doc["inputs"]["tolerance"]:.0%} of break-even; floor = the instrument\'s own 64 B round trip of that '
            'transport on loopback.</p></section>') if inp else ""


def _codec_answers(doc: dict) -> list[str]:
    """Per rung with codec cells: the best codec, and whether it pays against the raw hop of
    the same transport (its hop includes its encode and decode)."""
    best: dict[str, int] = {}
    codecs = doc.get("codecs") or []
    for i, c in enumerate(codecs):
        if c["rung"] not in best or c["hop_ms"] < codecs[best[c["rung"]]]["hop_ms"]:
            best[c["rung"]] = i
    items = []
    for rung, i in best.items():
        c = codecs[i]
        p = f"codecs.{i}"
        data = c.get("payload_source")
        said = (" <span class=\"note\">(on synthetic hidden states: not a claim about any model)</span>" if data == "synthetic"
                else f" <span class=\"note\">(hidden states from {_esc(data)})</span>" if data else "")
        if c["pays"]:
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: <span class="call pays">{_esc(c["codec"])} pays</span> '
                         f'&mdash; over {_esc(c["transport"])} it turns a {num(doc, f"{p}.raw_hop_ms", 3)} ms hop into '
                         f'{num(doc, f"{p}.hop_ms", 3)} ms ({num(doc, f"{p}.hop_ratio", 2)}x, encode and decode '
                         f'included): projected gain {num(doc, f"{p}.gain", 1, 100, sign=True)}% against '
                         f'{num(doc, f"{p}.raw_gain", 1, 100, sign=True)}% raw{said}. A lossy codec\'s effect on '
                         'acceptance is not measured (docs/CODECS.md)</li>')
        elif c.get("undecided"):
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: <span class="call even">undecided</span> &mdash; the best, '
                         f'{_esc(c["codec"])}, makes the {_esc(c["transport"])} hop {num(doc, f"{p}.hop_ms", 3)} ms '
                         f'against {num(doc, f"{p}.raw_hop_ms", 3)} ms raw, within the measured spread{said}</li>')
        else:
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: <span class="call costs">none pays</span> &mdash; the best, '
                         f'{_esc(c["codec"])}, makes the {_esc(c["transport"])} hop {num(doc, f"{p}.hop_ms", 3)} ms '
                         f'against {num(doc, f"{p}.raw_hop_ms", 3)} ms raw: on this link its CPU time costs more '
                         f'than the bytes it saves{said}</li>')
    return items


DESIGN_NAMES = {("taps", "off"): "synchronous taps", ("projected", "off"): "synchronous projected (fc on the target)",
                ("taps", "layers"): "streamed taps (during the verify forward)"}


def _design_of(v: dict) -> tuple[str, tuple[str, str]]:
    """A verdict's series without its design and stream (its transport, codec and M, as
    labelled), and its (design, stream)."""
    s = Series.from_dict(v["series"])
    return replace(s, design="taps", stream="off").label, (s.design, s.stream)


def _design_answers(doc: dict) -> list[str]:
    """Per rung and transport with more than one payload design measured (synchronous taps,
    synchronous projected, streamed taps: docs/STREAM.md): each design's hop and gain side by
    side, the best named (by the surely-largest gain, verdict.best_per_rung's rule), with the
    assumptions it carries."""
    vs = doc["verdicts"]
    by: dict[tuple[str, str], list[tuple[tuple[str, str], int]]] = {}
    for i, v in enumerate(vs):
        base, design = _design_of(v)
        by.setdefault((v["rung"], base), []).append((design, i))
    items = []
    for (rung, base), designs in by.items():
        if len(designs) < 2:
            continue
        best = designs[V.best_per_rung([vs[i] for _, i in designs])[rung]]
        each = "; ".join(f'{DESIGN_NAMES[d]} {num(doc, f"verdicts.{i}.hop_ms", 3)} ms '
                         f'({num(doc, f"verdicts.{i}.gain", 1, 100, sign=True)}%)' for d, i in designs)
        bi = best[1]
        items.append(f'<li><b>{_esc(rung)}</b>, {_esc(base)} by payload design: best <span class="call '
                     f'{_call_class(vs[bi]["call"])}">{_esc(DESIGN_NAMES[best[0]])}: {_esc(vs[bi]["call"])}</span> '
                     f'&mdash; {each}. The streamed hop is the exposed one (ids back &minus; the forward\'s end; the '
                     'forward a schedule, tap k sent when layer k ends, its extraction cost as recorded); the projected '
                     'one assumes the drafter\'s fc runs on the target (docs/STREAM.md)</li>')
    return items


def _targets_answers(doc: dict) -> list[str]:
    """Per rung and series measured with several targets: how many one drafter box serves."""
    items = []
    for i, t in enumerate(doc.get("targets") or []):
        measured = ", ".join(str(pt["targets"]) for pt in t["points"])
        if t["capacity"] is None:
            items.append(f'<li><b>{_esc(t["rung"])}</b>, {_esc(t["transport"])}, several targets: '
                         f'<span class="call costs">not even one</span> target beats co-located (M measured: '
                         f'{measured})</li>')
            continue
        j = next(k for k, pt in enumerate(t["points"]) if pt["targets"] == t["capacity"])
        more = " (the most measured: more may fit; measure a larger M)" if t["capacity_is_last"] else ""
        items.append(f'<li><b>{_esc(t["rung"])}</b>, {_esc(t["transport"])}: <span class="call pays">one drafter box '
                     f'serves up to {t["capacity"]} targets</span>{more} &mdash; each target\'s hop at M = '
                     f'{t["capacity"]} is {num(doc, f"targets.{i}.points.{j}.hop_ms", 3)} ms against a break-even of '
                     f'{num(doc, f"targets.{i}.break_even_ms", 2)} ms, projected gain '
                     f'{num(doc, f"targets.{i}.points.{j}.gain", 1, 100, sign=True)}% (M measured: {measured}; '
                     'closed-loop targets, docs/RESULTS.md "Several targets")</li>')
    return items


def _answer(doc: dict) -> str:
    """The verdict in a sentence per rung: its best transport's call."""
    alone = [i for i, v in enumerate(doc["verdicts"]) if v["series"]["clients"] == 1]  # M > 1: _targets_answers
    picked = V.best_per_rung([doc["verdicts"][i] for i in alone])
    best = {rung: {"i": alone[k]} for rung, k in picked.items()}
    items = []
    measured = {s["rung"]: (j, s) for j, s in enumerate(doc.get("spec_measured") or []) if s.get("kind") != "targets"}
    rungs = doc.get("rungs") or {}
    for rung, b in best.items():
        i = b["i"]
        v = doc["verdicts"][i]
        place = Place.from_dict(v["place"])
        info = rungs.get(place.rung_label) or rungs.get(place.rung) or {}
        kind = info.get("kind") if isinstance(info, dict) else None
        if kind == "loopback":  # both ends on this machine: the instrument's floor, not a link to move to
            items.append(f'<li><b>{_esc(rung)}</b>: the instrument\'s own floor (both ends on this machine over '
                         f'127.0.0.1), not a link the drafter could move over &mdash; best transport '
                         f'{_esc(v["transport"])}, hop {num(doc, f"verdicts.{i}.hop_ms", 3)} ms</li>')
            continue
        emulated = (" <span class=\"note\">(emulated on this one machine: two network namespaces joined by a veth "
                    "pair, shaped with tc tbf)</span>") if kind == "emulated" else ""
        if rung in measured:
            j, s = measured[rung]
            each = "; ".join(f'{_esc(mm["mode"])} {num(doc, f"spec_measured.{j}.modes.{k}.tok_s", 2)} tok/s '
                             f'({num(doc, f"spec_measured.{j}.modes.{k}.gain", 1, 100, sign=True)}%)'
                             for k, mm in enumerate(s.get("modes") or []))
            partial = (f' <span class="note">(the spec is {_esc(s["status"])}: {s["repeats"]} of '
                       f'{s["repeats_asked"]} repeats measured)</span>') if s.get("status") not in (None, "complete") else ""
            items.append(f'<li><b>{_esc(rung)}</b>: <span class="call {_call_class(s["call"])}">{_esc(s["call"])}</span> '
                         f'&mdash; measured end to end by hopbench spec over {_esc(s["transport"])} '
                         f'({_esc(s["folder"])}): {each} against {num(doc, f"spec_measured.{j}.local_tok_s", 2)} tok/s '
                         f'local; the call is the best mode, {_esc(s["mode"])}. The projections in the verdict table '
                         f'below are not this answer: they assume a remote drafter of '
                         f'{doc["inputs"]["t_draft_remote_ms"]:g} ms{partial}</li>')
            continue
        items.append(f'<li><b>{_esc(rung)}</b>: <span class="call {_call_class(v["call"])}">{_esc(v["call"])}</span> '
                     f'&mdash; best transport {_esc(v["transport"])}, hop {num(doc, f"verdicts.{i}.hop_ms", 3)} ms against '
                     f'a break-even of {num(doc, f"verdicts.{i}.break_even_ms", 2)} ms, projected '
                     f'{num(doc, f"verdicts.{i}.projected_tok_s", 2)} tok/s '
                     f'({num(doc, f"verdicts.{i}.gain", 1, 100, sign=True)}%){emulated}</li>')
    items += _codec_answers(doc)
    items += _design_answers(doc)
    items += _targets_answers(doc)
    for j, s in enumerate(doc.get("spec_measured") or []):
        if s.get("kind") != "targets":
            continue
        tried = ", ".join(map(str, s["measured"]))
        if s["capacity"] is None:
            items.append(f'<li><b>{_esc(s["rung"])}</b>, measured by hopbench spec --targets ({_esc(s["folder"])}): '
                         f'<span class="call costs">not even one target</span> beats co-located (M measured: {tried})</li>')
            continue
        ci = (f' [{num(doc, f"spec_measured.{j}.worst_tok_s_ci.0", 2)}&ndash;'
              f'{num(doc, f"spec_measured.{j}.worst_tok_s_ci.1", 2)}]' if (s.get("worst_tok_s_ci") or [None])[0]
              is not None else "")
        items.append(f'<li><b>{_esc(s["rung"])}</b>: <span class="call pays">one drafter box serves up to '
                     f'{s["capacity"]} targets</span> &mdash; measured by hopbench spec --targets ({_esc(s["folder"])}), '
                     f'{_esc(s["mode"])}: at M = {s["capacity"]} the slowest target makes '
                     f'{num(doc, f"spec_measured.{j}.worst_tok_s", 2)}{ci} tok/s against '
                     f'{num(doc, f"spec_measured.{j}.local_tok_s", 2)} co-located '
                     f'({num(doc, f"spec_measured.{j}.gain", 1, 100, sign=True)}%), every target\'s interval above '
                     f'co-located up to there (M measured: {tried})</li>')
    if not items:
        return ""
    inp = doc["inputs"]
    return (f'<section id="answer"><h2>Answer</h2><ul class="answer">{"".join(items)}</ul>'
            f'<p class="note">{_esc(doc.get("placement") or "")}. "move the drafter" needs a projected gain of at least '
            f'{num(doc, "inputs.min_gain", 0, 100)}% (the least worth a second box; <code>--min-gain</code>). '
            f'The projection assumes the whole t_draft ({num(doc, "inputs.t_draft_ms", 2)} ms) is freed and the '
            f'remote drafter\'s own time per cycle is {num(doc, "inputs.t_draft_remote_ms", 2)} ms'
            f'{"" if inp.get("t_draft_remote_ms") else " (zero)"}; a <code>hopbench spec</code> result given with '
            '<code>--spec</code> replaces it with the measured tok/s.</p></section>')


def _fit_section(doc: dict) -> str:
    rows = []
    for i, f in enumerate(doc["fits"]):
        p = f"fits.{i}"
        alpha = (f"{num(doc, p + '.alpha_s', 1, 1e6)}</td><td>{num(doc, p + '.alpha_ci.0', 1, 1e6)}&ndash;"
                 f"{num(doc, p + '.alpha_ci.1', 1, 1e6)}" if f["alpha_s"] >= 0 else
                 f"(intercept of {f['segment_lo_bytes']:,}&ndash;{f['segment_hi_bytes']:,} B)</td><td>-")
        lvl = _level(f["ci_level"], f["ci_scope"])
        rows.append(f'<tr><td class="t">{_esc(f["rung"])}</td><td class="t">{_esc(f["transport"])}</td>'
                    f'<td>{f["points"]}</td><td>{f["n_repeats"]}</td><td>{_esc(lvl)}</td><td>{alpha}</td>'
                    f'<td>{num(doc, p + ".beta_Bps", 1, 8e-6)}</td><td>{num(doc, p + ".beta_ci.0", 1, 8e-6)}&ndash;'
                    f'{num(doc, p + ".beta_ci.1", 1, 8e-6)}</td><td>{num(doc, p + ".n_half_bytes", 1, 1e-3)}</td>'
                    f'<td>{num(doc, p + ".wire_efficiency", 1, 100) + "%" if f["wire_efficiency"] else "-"}</td>'
                    f'<td>{f["breakpoint_bytes"] or "-"}</td><td>{num(doc, p + ".share_bandwidth", 0, 100)}%</td>'
                    f'<td class="t">{_esc(f["regime"])}</td></tr>')
    methods = sorted({f["ci_method"] for f in doc["fits"]})
    cross = "".join(f"<li>{_esc(s)}</li>" for s in doc["crossover"].values())
    if not rows:
        return ('<section id="fit"><h2>Fit: latency = &alpha; + bytes/&beta; per rung &times; transport</h2>'
                '<p class="note">No fit: no rung has the three or more payload sizes a line needs (measure more '
                'sizes, e.g. --bytes).</p></section>')
    return ('<section id="fit"><h2>Fit: latency = &alpha; + bytes/&beta; per rung &times; transport</h2>'
            "<table><tr><th class=t>rung</th><th class=t>transport</th><th>points</th><th>repeats</th><th>level</th>"
            "<th>&alpha; &micro;s</th><th>&alpha; CI</th><th>&beta; Mbit/s</th><th>&beta; CI</th><th>n&frac12; kB</th>"
            "<th>&beta; vs rate</th><th>break B</th><th>bandwidth share at T</th><th class=t>regime</th></tr>"
            + "".join(rows) + "</table>"
            f'<p class="note">CIs: {_esc("; ".join(methods))}. Bandwidth share = bytes/&beta; over the whole round '
            f'trip at the operating payload: above half, the hop is bandwidth-bound there.</p>'
            + (f"<ul>{cross}</ul>" if cross else "") + "</section>")


def _cells_section(doc: dict) -> str:
    rows = []
    for i, c in enumerate(doc["cells"]):
        p = f"cells.{i}"
        ci = (f"{num(doc, p + '.p50_ci_us.0', 1)}&ndash;{num(doc, p + '.p50_ci_us.1', 1)}" if c["p50_ci_us"] else "-")
        lvl = _level(c["p50_ci_level"], c["p50_ci_scope"])
        rows.append(f'<tr><td class="t">{_esc(c["rung"])}</td><td class="t">{_esc(c["transport"])}</td>'
                    f'<td class="t">{_esc(c["payload"])}</td><td>{c["request_bytes"]:,}</td><td>{c["reply_bytes"]:,}</td>'
                    f'<td>{c["gap_ms"]:g}</td><td>{c["repeats"]}</td><td>{c["n"]:,}</td>'
                    f'<td>{num(doc, p + ".p50_us", 1)}</td><td>{ci}</td><td>{_esc(lvl)}</td></tr>')
    return ('<section id="cells"><h2>Cells: round trip p50 per payload</h2>'
            "<details><summary>every measured cell</summary><table><tr><th class=t>rung</th><th class=t>transport</th>"
            "<th class=t>payload</th><th>request B</th><th>reply B</th><th>gap ms</th><th>repeats</th><th>cycles</th>"
            "<th>p50 &micro;s</th><th>CI</th><th>level</th></tr>" + "".join(rows) + "</table></details></section>")


def _warnings_section(doc: dict) -> str:
    items = "".join(f'<li><span class="k">{_esc(w["kind"])}</span>: {_esc(w["text"])}'
                    + (f'<details><summary>{len(w["items"])} listed</summary>{_esc(", ".join(w["items"]))}</details>'
                       if w.get("items") else "") + "</li>" for w in doc["warnings"])
    return ('<section id="warnings"><h2>Warnings</h2>'
            + (f'<ul class="w">{items}</ul>' if items else "<p>None: no drift, no doctor warning, no hop near the "
               "instrument's floor, no trend across repeats.</p>") + "</section>")


def _flat(v: Any) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else "" if v is None else str(v)


def _env_section(doc: dict) -> str:
    c, s = doc["environments"]["client"], doc["environments"]["server"]
    keys = list(dict.fromkeys(list(c) + list(s)))
    rows = []
    for k in keys:
        a, b = _flat(c.get(k)), _flat(s.get(k))
        cls = ' class="diff"' if k in c and k in s and a != b else ""
        rows.append(f'<tr{cls}><td class="t">{_esc(k)}</td><td class="t">{_esc(a)}</td><td class="t">{_esc(b)}</td></tr>')
    rungs = "".join(f'<tr><td class="t">{_esc(n)}</td><td class="t">{_esc(r.get("kind", ""))}</td>'
                    f'<td>{_esc(r.get("rate_mbit") or "-")}</td><td class="t">{_esc(r.get("server") or r.get("peer") or "")}</td>'
                    f'<td class="t">{_esc((r.get("placement") or {}).get("name", ""))}</td></tr>'
                    for n, r in doc["rungs"].items())
    return ('<section id="environment"><h2>Environments: both ends</h2>'
            "<table><tr><th class=t>rung</th><th class=t>kind</th><th>rate Mbit/s</th><th class=t>server</th>"
            f"<th class=t>placement</th></tr>{rungs}</table>"
            "<table><tr><th class=t>field</th><th class=t>client</th><th class=t>server</th></tr>" + "".join(rows)
            + '</table><p class="note">Highlighted: the two ends differ.</p></section>')


def _commands_section(doc: dict) -> str:
    body = "".join(f"<p>{_esc(c['where'])}:</p><pre>{_esc(c['command'])}</pre>" for c in doc["commands"])
    return f'<section id="reproduce"><h2>Reproduce</h2>{body}</section>'


def figures(a: Analysed) -> list[tuple[str, str, str]]:
    """(id, caption, inline svg) per figure: drawn as SVG directly (analysis.svgplot), from
    the same series `hopbench plot` draws with matplotlib."""
    from hopbench.analysis import plot as P

    groups, fits, verdicts, inputs = a.groups, a.fits, a.verdicts, a.inputs
    bpt, op = a.bytes_per_token, a.operating_tokens
    made: list[tuple[str, str, Callable[[str], str]]] = [
        ("fig-latency", "Round trip p50 against payload per rung, with the &alpha;&ndash;&beta; fit (dashed) and the "
                        "interval of each point.", lambda fid: P.latency_svg(groups, fits, bpt, fid))]
    if verdicts:
        made.append(("fig-hop", "Hop cost at the operating payload against the break-even hop (t_draft): below the "
                                "line, moving the drafter pays.",
                     lambda fid: P.hop_svg(verdicts, inputs.t_draft_ms, op, fid)))
    if verdicts and P.target_lines(verdicts):
        made.append(("fig-targets", "Per-target hop at the operating payload against the number of targets sharing "
                                    "one drafter, with the break-even hop: below the line each target still beats "
                                    "co-located.", lambda fid: P.targets_svg(verdicts, inputs.t_draft_ms, op, fid)))
    if P.cdf_tokens(groups):
        made.append(("fig-cdf", "Latency CDFs per rung (every timed cycle, all repeats pooled).",
                      lambda fid: P.cdf_svg(groups, fid)))
    return [(fid, cap, make(fid)) for fid, cap, make in made]


def render(a: Analysed, doc: dict) -> str:
    figs = "".join(f'<figure id="{fid}">{svg}<figcaption>{cap}</figcaption></figure>'
                   for fid, cap, svg in figures(a))
    tables = (_answer(doc) + _verdict_section(doc) + _fit_section(doc)).replace("<table>", '<div class="wide"><table>') \
        .replace("</table>", "</table></div>")
    data = json.dumps(doc, sort_keys=True).replace("</", "<\\/")
    title = f"hopbench report: {Path(doc['folder']).name}"
    return _label_cells(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>'
            f'<h1>{_esc(title)}</h1><p class="q">{_esc(doc["question"])}</p>'
            f'<p class="note">{_esc(doc["kind"])} {_esc(doc["folder"])}, {_esc(doc["created_utc"])}, '
            f'{_esc(doc["software"])}, status {_esc(doc["status"] or "-")}, result id {_esc(doc["result_id"])}</p>'
            + tables
            + f'<section id="figures"><h2>Figures</h2>{figs}</section>'
            + _cells_section(doc) + _warnings_section(doc) + _env_section(doc) + _commands_section(doc)
            + f'<script type="application/json" id="hopbench-data">{data}</script></body></html>\n')


_TABLE = re.compile(r"<table>(.*?)</table>", re.S)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)


def _label_cells(page: str) -> str:
    """Each table cell carries its column's header (data-h): on a narrow screen (CSS, max-width
    600px) a table's rows become cards of labelled lines, so the verdict's call needs no
    sideways scroll at 390 px (issue 42)."""
    def table(m: re.Match) -> str:
        rows = _ROW.findall(m.group(1))
        if not rows or "<th" not in rows[0]:
            return m.group(0)
        heads = [html.escape(html.unescape(re.sub(r"<[^>]+>", "", h)), quote=True)
                 for h in re.findall(r"<th[^>]*>(.*?)</th>", rows[0], re.S)]

        def row(r: re.Match) -> str:
            cells = iter(heads)
            return "<tr>" + re.sub(r"<td(?=[ >])", lambda _: f'<td data-h="{next(cells, "")}"', r.group(1)) + "</tr>"

        return "<table>" + _ROW.sub(row, m.group(1)) + "</table>"

    return _TABLE.sub(table, page)


def build(folder: Path, scfg, min_gain: float = MIN_GAIN, spec: list[Path] | None = None) -> tuple[dict, str]:
    a = analyse(folder, scfg, min_gain, spec)  # one Reading for the document, the figures and the warnings
    doc = build_document(a)
    return doc, render(a, doc)
