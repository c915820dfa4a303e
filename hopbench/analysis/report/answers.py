"""The Answer: the verdict in a sentence per rung, and the codec, payload design and
several-targets answers beside it."""

from __future__ import annotations

from dataclasses import replace

from hopbench.analysis import verdict as V
from hopbench.analysis.report.markup import (
    _call_class,
    _esc,
    num,
)
from hopbench.records import Place, Series


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
            changes = c.get("changes_drafts")
            head = (f'<span class="call even">{_esc(c["codec"])}: {_esc(c["call"])}</span>' if changes
                    else f'<span class="call pays">{_esc(c["codec"])} pays</span>')
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: {head} '
                         f'&mdash; over {_esc(c["transport"])} it turns a {num(doc, f"{p}.raw_hop_ms", 3)} ms hop into '
                         f'{num(doc, f"{p}.hop_ms", 3)} ms ({num(doc, f"{p}.hop_ratio", 2)}x, encode and decode '
                         f'included): projected gain {num(doc, f"{p}.gain", 1, 100, sign=True)}% against '
                         f'{num(doc, f"{p}.raw_gain", 1, 100, sign=True)}% raw{said}. {_drafts(doc, p, c)}</li>')
        elif c.get("undecided"):
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: <span class="call even">undecided</span> &mdash; the best, '
                         f'{_esc(c["codec"])}, makes the {_esc(c["transport"])} hop {num(doc, f"{p}.hop_ms", 3)} ms '
                         f'against {num(doc, f"{p}.raw_hop_ms", 3)} ms raw, within the measured spread{said}. '
                         f'{_drafts(doc, p, c)}</li>')
        else:
            items.append(f'<li><b>{_esc(rung)}</b>, codecs: <span class="call costs">none pays</span> &mdash; the best, '
                         f'{_esc(c["codec"])}, makes the {_esc(c["transport"])} hop {num(doc, f"{p}.hop_ms", 3)} ms '
                         f'against {num(doc, f"{p}.raw_hop_ms", 3)} ms raw: on this link its CPU time costs more '
                         f'than the bytes it saves{said}. {_drafts(doc, p, c)}</li>')
    return items


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
                     f'{_call_class(vs[bi]["decision"])}">{_esc(DESIGN_NAMES[best[0]])}: {_esc(vs[bi]["call"])}</span> '
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


def _spec_answer(doc: dict, rung: str, j: int, s: dict) -> str:
    """A rung's answer measured end to end by a `hopbench spec` result given with --spec."""
    each = "; ".join(f'{_esc(mm["mode"])} {num(doc, f"spec_measured.{j}.modes.{k}.tok_s", 2)} tok/s '
                     f'({num(doc, f"spec_measured.{j}.modes.{k}.gain", 1, 100, sign=True)}%)'
                     for k, mm in enumerate(s.get("modes") or []))
    partial = (f' <span class="note">(the spec is {_esc(s["status"])}: {s["repeats"]} of '
               f'{s["repeats_asked"]} repeats measured)</span>') if s.get("status") not in (None, "complete") else ""
    return (f'<li><b>{_esc(rung)}</b>: <span class="call {_call_class(s["decision"])}">{_esc(s["call"])}</span> '
            f'&mdash; measured end to end by hopbench spec over {_esc(s["transport"])} '
                 f'({_esc(s["folder"])}): {each} against {num(doc, f"spec_measured.{j}.local_tok_s", 2)} tok/s '
                 f'local; the call is the best mode, {_esc(s["mode"])}. The projections in the verdict table '
                 f'below are not this answer: they assume a remote drafter of '
                 f'{doc["inputs"]["t_draft_remote_ms"]:g} ms{partial}</li>')


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
            items.append(_spec_answer(doc, rung, *measured[rung]))
            continue
        items.append(f'<li><b>{_esc(rung)}</b>: <span class="call {_call_class(v["decision"])}">{_esc(v["call"])}</span> '
                     f'&mdash; best transport {_esc(v["transport"])}, hop {num(doc, f"verdicts.{i}.hop_ms", 3)} ms against '
                     f'a break-even of {num(doc, f"verdicts.{i}.break_even_ms", 2)} ms, projected '
                     f'{num(doc, f"verdicts.{i}.projected_tok_s", 2)} tok/s '
                     f'({num(doc, f"verdicts.{i}.gain", 1, 100, sign=True)}%){emulated}</li>')
    items += _codec_answers(doc)
    items += _design_answers(doc)
    items += _targets_answers(doc)
    items += _spec_targets_answers(doc)
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
