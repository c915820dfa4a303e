"""The Answer on one screen: the inputs once, one row per rung with each design's call side
by side (synchronous, streamed, projected, with the served drafter), the codec's and a
measured spec's beside them, the warnings that touch the row, and the several-targets
answers below."""

from __future__ import annotations

from hopbench.analysis import verdict as V
from hopbench.analysis.report.markup import (
    _call_class,
    _esc,
    num,
)
from hopbench.records import Place, Series


def _codec_cells(doc: dict) -> dict[str, str]:
    """Per rung with codec cells: the best codec's call against the raw hop of the same
    transport (its hop includes its encode and decode), and its effect on the drafts."""
    best: dict[str, int] = {}
    codecs = doc.get("codecs") or []
    for i, c in enumerate(codecs):
        if c["rung"] not in best or c["hop_ms"] < codecs[best[c["rung"]]]["hop_ms"]:
            best[c["rung"]] = i
    cells = {}
    for rung, i in best.items():
        c = codecs[i]
        p = f"codecs.{i}"
        if c["pays"]:
            tone, call = ("even", c["call"]) if c.get("changes_drafts") else ("pays", "pays")
        else:
            tone, call = ("even", "undecided") if c.get("undecided") else ("costs", "none pays")
        data = c.get("payload_source")
        states = " (synthetic hidden states)" if data == "synthetic" else f" (hidden states: {_esc(data)})" if data else ""
        cells[rung] = (f'<span class="call {tone}">{_esc(c["codec"])}: {_esc(call)}</span> {_esc(c["transport"])} '
                       f'{num(doc, f"{p}.hop_ms", 3)} ms, {num(doc, f"{p}.hop_ratio", 2)}x raw, '
                       f'{num(doc, f"{p}.gain", 1, 100, sign=True)}%{states}<br><span class="note">{_drafts(doc, p, c)}'
                       '</span>')
    return cells


def _drafts(doc: dict, p: str, c: dict) -> str:
    """The codec's measured effect on the drafts (top-1 agreement, its interval and n, and the
    network it was measured on), or that it was not measured."""
    h = c.get("agreement")
    if not h:
        return ("Its effect on the drafts is not measured (<code>run --agreement</code>; a lossless codec keeps them "
                "exactly)")
    if h.get("identical_bytes"):
        return f'It keeps the drafts: identical bytes ({_esc(h.get("source", ""))})'
    from hopbench.analysis import agreement as AG

    verb = _esc(AG.verb_with_bar(h))
    return (f'Top-1 agreement {num(doc, f"{p}.agreement.top1", 2, 100)}% [{num(doc, f"{p}.agreement.top1_lo", 2, 100)}'
            f'&ndash;{num(doc, f"{p}.agreement.top1_hi", 2, 100)}%, n = {h["n"]:,}] ({_esc(h.get("source", ""))}): it '
            f'{verb}')


#: the Answer's columns: a series' kind of hop (docs/STREAM.md, docs/DRAFTER.md)
COLUMNS = {"sync": "synchronous taps", "stream": "streamed taps (exposed hop)",
           "projected": "synchronous projected (fc on the target)", "drafter": "with the served drafter"}


def _column(v: dict) -> str | None:
    """Which Answer column a verdict's series belongs to (None: a codec's or M > 1's, answered apart)."""
    s = Series.from_dict(v["series"])
    if s.clients != 1 or s.codec != "none":
        return None
    if s.drafter != "off":
        return "drafter"
    return "stream" if s.stream != "off" else "projected" if s.design == "projected" else "sync"


def _design_cell(doc: dict, i: int) -> str:
    v = doc["verdicts"][i]
    return (f'<span class="call {_call_class(v["decision"])}">{_esc(v["call"])}</span><br>'
            f'{_esc(Series.from_dict(v["series"]).transport)} {num(doc, f"verdicts.{i}.hop_ms", 3)} ms, '
            f'{num(doc, f"verdicts.{i}.projected_tok_s", 2)} tok/s ({num(doc, f"verdicts.{i}.gain", 1, 100, sign=True)}%)')


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


def _spec_targets_answers(doc: dict) -> list[str]:
    """Per `hopbench spec --targets` result given with --spec: how many targets one drafter
    box serves, measured end to end."""
    items = []
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
    return items


def _spec_cell(doc: dict, j: int, s: dict) -> str:
    """A rung's answer measured end to end by a `hopbench spec` result given with --spec."""
    each = "; ".join(f'{_esc(mm["mode"])} {num(doc, f"spec_measured.{j}.modes.{k}.tok_s", 2)} tok/s '
                     f'({num(doc, f"spec_measured.{j}.modes.{k}.gain", 1, 100, sign=True)}%)'
                     for k, mm in enumerate(s.get("modes") or []))
    partial = (f' <span class="note">({_esc(s["status"])}: {s["repeats"]} of {s["repeats_asked"]} repeats)</span>'
               if s.get("status") not in (None, "complete") else "")
    return (f'<span class="call {_call_class(s["decision"])}">{_esc(s["call"])}</span><br>measured end to end by '
            f'hopbench spec over {_esc(s["transport"])}: {each} against '
            f'{num(doc, f"spec_measured.{j}.local_tok_s", 2)} tok/s local{partial}')


def _trust(doc: dict, rung: str, shown: dict[str, int]) -> str:
    """What changes how far a rung's figures can be trusted: its cells that drifted (and
    whether an answered one did), a shaped cell far over its wire time, a hop near the floor."""
    out = []
    for w in doc.get("warnings") or []:
        if w.get("kind") == "drift":
            n, total = (w.get("rungs") or {}).get(rung, (0, 0))
            own = [f"{_esc(a['transport'])} {a['drift_rel']:+.1%}" for a in w.get("at") or []
                   if a["rung"] == rung and a["tokens"] == doc["operating_tokens"]
                   and a["transport"] in {doc["verdicts"][i]["transport"] for i in shown.values()}]
            if n:
                out.append(f"drift: {n} of {total} cells" + (f" (answered: {', '.join(own)})" if own else ""))
        elif w.get("rung") == rung and w.get("kind") in ("loaded host", "floor", "not a network hop"):
            out.append(_esc(w["short"]))
    return "<br>".join(out) or '<span class="note">none</span>'


def _answer(doc: dict) -> str:
    """The Answer on one screen: the inputs and where each came from, then one row per rung
    with each design's call side by side (its best transport), the codec's, the measured
    spec's, and the warnings that touch the row; the explanations once, below."""
    vs = doc["verdicts"]
    cols: dict[str, dict[str, int]] = {}
    for name in COLUMNS:
        idx = [i for i, v in enumerate(vs) if _column(v) == name]
        if idx:
            cols[name] = {r: idx[k] for r, k in V.best_per_rung([vs[i] for i in idx]).items()}
    measured = {s["rung"]: (j, s) for j, s in enumerate(doc.get("spec_measured") or []) if s.get("kind") != "targets"}
    codecs = _codec_cells(doc)
    rungs = list(dict.fromkeys(v["rung"] for v in vs if _column(v)))
    rows = [_answer_row(doc, rung, cols, codecs, measured) for rung in rungs]
    rest = _targets_answers(doc) + _spec_targets_answers(doc)
    if not rows and not rest:
        return ""
    head = ("<tr><th class=t>rung</th>" + "".join(f"<th class=t>{_esc(COLUMNS[c])}</th>" for c in cols)
            + ("<th class=t>codec</th>" if codecs else "") + ("<th class=t>measured end to end</th>" if measured else "")
            + "<th class=t>trust</th></tr>")
    table = f'<table class="answer">{head}{"".join(rows)}</table>' if rows else ""
    return (f'<section id="answer"><h2>Answer</h2>{_inputs_line(doc)}{table}'
            + (f'<ul class="answer">{"".join(rest)}</ul>' if rest else "") + _explained(doc, cols, measured)
            + "</section>")


def _rung_kind(doc: dict, v: dict) -> str | None:
    place = Place.from_dict(v["place"])
    rungs = doc.get("rungs") or {}
    info = rungs.get(place.rung_label) or rungs.get(place.rung) or {}
    return info.get("kind") if isinstance(info, dict) else None


def _answer_row(doc: dict, rung: str, cols: dict[str, dict[str, int]], codecs: dict[str, str],
                measured: dict[str, tuple[int, dict]]) -> str:
    shown = {c: by[rung] for c, by in cols.items() if rung in by}
    some = doc["verdicts"][next(iter(shown.values()))]
    kind = _rung_kind(doc, some)
    mark = "*" if kind == "emulated" else ""
    cells = [f'<td class="t" data-h="rung"><b>{_esc(rung)}</b>{mark}</td>']
    if kind == "loopback":  # both ends on this machine: the instrument's floor, not a link to move to
        i = min(shown.values(), key=lambda k: doc["verdicts"][k]["hop_ms"])
        span = len(cols) + bool(codecs) + bool(measured)
        cells.append(f'<td class="t wrap" colspan="{span}">the instrument\'s own floor (both ends on this machine over '
                     f'127.0.0.1), not a link the drafter could move over: {_esc(doc["verdicts"][i]["transport"])} '
                     f'{num(doc, f"verdicts.{i}.hop_ms", 3)} ms</td>')
    else:
        for c in cols:
            cells.append(f'<td class="t wrap" data-h="{_esc(COLUMNS[c])}">'
                         f'{_design_cell(doc, shown[c]) if c in shown else "-"}</td>')
        if codecs:
            cells.append(f'<td class="t wrap" data-h="codec">{codecs.get(rung, "-")}</td>')
        if measured:
            cells.append(f'<td class="t wrap" data-h="measured end to end">'
                         f'{_spec_cell(doc, *measured[rung]) if rung in measured else "-"}</td>')
    cells.append(f'<td class="t wrap" data-h="trust">{_trust(doc, rung, shown)}</td>')
    return f'<tr>{"".join(cells)}</tr>'


def _inputs_line(doc: dict) -> str:
    """The verdict's inputs, each with where it came from, said once."""
    inp = doc["inputs"]
    given = set(inp.get("given") or ())
    src = {True: "given", False: "the shape's, configs/shape.toml"}
    remote = inp.get("t_draft_remote_from") or "assumed"
    remote_said = ("assumed zero: <code>--t-draft-remote</code> gives it" if remote == "assumed"
                   else "given" if remote == "given" else f"measured: {_esc(remote)}")
    return (f'<p>Inputs: T = {doc["operating_tokens"]} accepted tokens ({doc["operating_bytes"]:,} B a hop); '
            f't_draft {num(doc, "inputs.t_draft_ms", 2)} ms ({src["t_draft_ms" in given]}), the break-even hop; '
            f'co-located cycle {num(doc, "inputs.cycle_ms", 2)} ms ({src["cycle_ms" in given]}) at '
            f'{num(doc, "inputs.tok_s", 2)} tok/s ({src["tok_s" in given]}); the remote drafter\'s own time '
            f'{num(doc, "inputs.t_draft_remote_ms", 3)} ms a cycle ({remote_said}); "move the drafter" needs a '
            f'projected gain of at least {num(doc, "inputs.min_gain", 0, 100)}% (<code>--min-gain</code>).</p>')


def _explained(doc: dict, cols: dict, measured: dict) -> str:
    """What each column means, said once below the table."""
    said = ["Each cell is its design's best transport on that rung (the surely-largest projected gain: the lower "
            "end of its 95% interval), with its median hop and the projected tok/s if the drafter moves "
            "(projected cycle = cycle &minus; t_draft + hop + the remote drafter's own time)."]
    if "stream" in cols:
        said.append("The streamed hop is the exposed one: ids back &minus; the verify forward's end, tap k sent when "
                    "layer k ends, its extraction cost as recorded (docs/STREAM.md).")
    if "projected" in cols:
        said.append("The projected design assumes the drafter's fc runs on the target (docs/STREAM.md).")
    if "drafter" in cols:
        said.append("With the served drafter, the hop includes its forward on the server (docs/DRAFTER.md).")
    if measured:
        said.append("Measured end to end: a <code>hopbench spec</code> result given with <code>--spec</code>; its "
                    "tok/s is measured, not projected.")
    if any(_rung_kind(doc, v) == "emulated" for v in doc["verdicts"]):
        said.append("* emulated on this one machine: two network namespaces joined by a veth pair, shaped with tc tbf.")
    if doc.get("placement"):
        said.append(_esc(doc["placement"]) + ".")
    return f'<p class="note">{" ".join(said)}</p>'


