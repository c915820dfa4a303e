"""The HTML page: its sections, figures (inline SVG) and the labelled table cells of the
narrow layout."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Callable

from hopbench.analysis.drafter import LEDGER_PARTS
from hopbench.analysis.report.answers import (
    _answer,
)
from hopbench.analysis.report.document import (
    Analysed,
)
from hopbench.analysis.report.markup import (
    _call_class,
    _esc,
    _flat,
    _level,
    num,
)

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
                    f'<td class="t call {_call_class(v["decision"])}">{_esc(v["call"])}</td></tr>')
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
    from hopbench.analysis import plot as PL

    groups, fits, verdicts, inputs = a.groups, a.fits, a.verdicts, a.inputs
    bpt, op = a.bytes_per_token, a.operating_tokens
    made: list[tuple[str, str, Callable[[str], str]]] = [
        ("fig-latency", "Round trip p50 against payload per rung, with the &alpha;&ndash;&beta; fit (dashed) and the "
                        "interval of each point.", lambda fid: PL.latency_svg(groups, fits, bpt, fid))]
    if verdicts:
        made.append(("fig-hop", "Hop cost at the operating payload against the break-even hop (t_draft): below the "
                                "line, moving the drafter pays.",
                     lambda fid: PL.hop_svg(verdicts, inputs.t_draft_ms, op, fid)))
    if verdicts and PL.target_lines(verdicts):
        made.append(("fig-targets", "Per-target hop at the operating payload against the number of targets sharing "
                                    "one drafter, with the break-even hop: below the line each target still beats "
                                    "co-located.", lambda fid: PL.targets_svg(verdicts, inputs.t_draft_ms, op, fid)))
    if PL.cdf_tokens(groups):
        made.append(("fig-cdf", "Latency CDFs per rung (every timed cycle, all repeats pooled).",
                      lambda fid: PL.cdf_svg(groups, fid)))
    return [(fid, cap, make(fid)) for fid, cap, make in made]


#: the ledger's parts (analysis.drafter.LEDGER_PARTS, in its order) as the bar shows them, with their colours
LEDGER_LOOK = {"echo": ("the echo hop (wire + plain server path)", "#8c96a8"), "queue": ("queue", "#e0a030"),
                "stage": ("staging (H2D)", "#d06a2a"), "forward": ("forward (GPU)", "#3a6ea5"),
                "back": ("ids back (D2H)", "#6a9fd4"), "rest": ("the server's rest", "#b42318"),
                "left": ("left (hop − all the parts)", "#555")}
LEDGER_SHOWN = {k: LEDGER_LOOK[k] for k in LEDGER_PARTS}


def ledger_svg(doc: dict) -> str:
    """One stacked horizontal bar per drafter payload: its hop's parts (p50s, ms) end to end,
    the hop itself marked; a negative `left` (parts' p50s summing past the hop's) is drawn
    as a mark, not a bar."""
    rows = doc.get("ledger") or []
    width, left_w, bar_h, gap = 740, 200, 22, 12
    top = 40
    scale = (width - left_w - 20) / max(max(r["hop"], sum(max(r[k], 0) for k in LEDGER_SHOWN)) for r in rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {top + len(rows) * (bar_h + gap) + 20}" '
           f'width="{width}" role="img" font-size="11" font-family="system-ui,sans-serif">']
    for i, (label, colour) in enumerate(LEDGER_SHOWN.values()):  # the legend, one line
        lx = 10 + i * 104
        out.append(f'<rect x="{lx}" y="6" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="15">{_esc(label.split(" (")[0])}</text>')
    for j, r in enumerate(rows):
        y = top + j * (bar_h + gap)
        out.append(f'<text x="{left_w - 6}" y="{y + bar_h * 0.7}" text-anchor="end">{_esc(r["payload"])} '
                   f'({_esc(r["where"])})</text>')
        x = left_w
        for k, (label, colour) in LEDGER_SHOWN.items():
            w = max(r[k], 0) * scale
            if w > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}">'
                           f'<title>{_esc(label)}: {r[k]:.3f} ms</title></rect>')
                x += w
        hx = left_w + r["hop"] * scale
        out.append(f'<line x1="{hx:.1f}" x2="{hx:.1f}" y1="{y - 3}" y2="{y + bar_h + 3}" stroke="#000" '
                   f'stroke-width="2"><title>the hop {r["hop"]:.3f} ms</title></line>')
    out.append("</svg>")
    return "".join(out)


def render(a: Analysed, doc: dict) -> str:
    figs = "".join(f'<figure id="{fid}">{svg}<figcaption>{cap}</figcaption></figure>'
                   for fid, cap, svg in figures(a))
    if doc.get("ledger"):
        figs += ('<figure id="fig-ledger">' + ledger_svg(doc) + "<figcaption>Each drafter payload's hop as its parts "
                 "(p50s of the timed cycles, ms), end to end; the black line is the hop. The echo is the same payload's "
                 "hop to the plain server path in the same session; the parts after it are the server's, from the "
                 "request received to the reply sent; what is left is the hop minus them all (docs/DRAFTER.md).</figcaption>"
                 "</figure>")
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
