"""Analysis commands as plain functions over result folders: fit, verdict, plot.
Derived outputs go to <folder>/analysis/ (rewritten atomically; raw results are never
touched)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hopbench.analysis import compare as CMP
from hopbench.analysis import fit as F
from hopbench.analysis import verdict as V
from hopbench.analysis.data import Reading, load_groups, recorded_shape
from hopbench.analysis.hops import (
    instrument_floors,
    placement_note,
    stream_cost,
    trend_warning,
    verdicts,
    verdicts_with_drafter,
)
from hopbench.errors import ConfigError, HopbenchError
from hopbench.estimate import pct
from hopbench.records import MIN_GAIN, StreamSpec
from hopbench.results import RUN_FILE, ResultFolder, atomic_write, document


def _out(folder: "Path | Reading") -> Path:
    return ResultFolder(folder).analysis_dir()


def _fmt_alpha(f: F.Fit) -> tuple[str, str]:
    """(alpha, its CI), or, for a negative intercept (an upper segment's), the segment."""
    if f.alpha_s < 0:
        return f"(intercept of {f.segment_lo_bytes:,}-{f.segment_hi_bytes:,} B)", "-"
    return f"{f.alpha_s * 1e6:.1f}", f"{f.alpha_ci[0] * 1e6:.1f}..{f.alpha_ci[1] * 1e6:.1f}"


def _fit_table(fits: list[F.Fit], show: Any) -> None:
    """The fits' table: per rung x transport, alpha and beta with their intervals, the
    half-bandwidth size, the regime."""
    from hopbench.analysis.tables import render

    methods = sorted({f"{f.ci_method} ({'within one run' if f.ci_scope == 'within-run' else 'repeats as the unit'})"
                      for f in fits})
    show("CIs: " + "; ".join(methods))
    rows = []
    for f in fits:
        b = lambda v: v * 8 / 1e6  # noqa: E731
        lvl = pct(f.ci_level) + ("*" if f.ci_scope == "within-run" else "")
        alpha, alpha_ci = _fmt_alpha(f)
        rows.append([f.rung, f.transport, str(f.points), str(f.n_repeats), lvl, alpha, alpha_ci, f"{b(f.beta_Bps):.1f}",
                     f"{b(f.beta_ci[0]):.1f}..{b(f.beta_ci[1]):.1f}", f"{f.n_half_bytes / 1e3:.1f}",
                     f"{f.n_half_tokens:.2f}", f"{f.wire_efficiency:.1%}" if f.wire_efficiency else "-",
                     f"{f.goodput_ratio:.1%}" if f.goodput_ratio else "-", str(f.breakpoint_bytes or "-"),
                     f"{f.share_bandwidth:.0%}", f.regime])
    show(render(["rung", "tr", "pts", "r", "level", "alpha us", "alpha CI", "beta Mbit/s", "beta CI", "n1/2 kB",
                 "n1/2 tok", "vs rate", "vs TCP bound", "break B", "bw share", "regime"], rows, right=set(range(2, 15))))
    if any(f.ci_scope == "within-run" for f in fits):
        show("* within one run: the run-to-run spread is not in this interval (measure repeats: a sweep)")


def _wire_lines(wires: list[dict[str, Any]], operating_tokens: int, show: Any) -> None:
    """The wire-time check: each cell's measured p50 against the physical wire time and the
    wire plus the unshaped round trip, and a warning for the cells the host loaded."""
    if not wires:
        return
    show(f"wire-time check at T = {operating_tokens}: measured p50 [CI, level, repeats] vs the physical wire time "
         f"(bytes x 1538/1448 x 8 / rate) and vs wire + the unshaped round trip")
    for w in wires:
        ci = (f"[{w['measured_lo_ns'] / 1e3:.1f}-{w['measured_hi_ns'] / 1e3:.1f}, {pct(w['level'])}, "
              f"{w['repeats']}r]" if w.get("level") else "[no CI]")
        over = f"  << {F.LOADED_WARNING}" if w["deviation"] > F.LOADED_OVER else ""
        show(f"  {w['rung']:<10} {w['transport']:<4} measured {w['measured_ns'] / 1e3:9.1f} us {ci}  wire "
             f"{w['wire_ns'] / 1e3:9.1f} us ({w['measured_ns'] / w['wire_ns'] - 1:+.2%})  wire+unshaped "
             f"{w['expected_ns'] / 1e3:9.1f} us ({w['deviation']:+.2%}){over}")
    loaded = [f"{w['rung']} {w['transport']}" for w in wires if w["deviation"] > F.LOADED_OVER]
    if loaded:
        show(f"warning: {', '.join(loaded)} measured more than {F.LOADED_OVER:.0%} over wire + unshaped: the host "
             "(or the link) added time the rate does not explain, so those cells say more about this host's load "
             "than about the link; re-measure them on an idle host (`hopbench doctor` shows what else runs)")


def run_fit(folder: Path | Reading, bytes_per_token: int, operating_tokens: int, show=print,
            require: bool = False) -> list[F.Fit]:
    """require: a folder with nothing to fit is an error (the fit command); elsewhere (a
    sweep's closing analysis) the table says why and the rest goes on."""
    groups, _ = load_groups(folder)
    fits = F.fit_groups(groups, bytes_per_token, operating_tokens)
    if not fits:
        if require:
            raise HopbenchError(f"{folder}: {F.why_no_fit(groups)}")
        show(F.why_no_fit(groups))
        return fits
    show(f"alpha-beta fit (latency = alpha + bytes/beta) per rung x transport; operating payload T = {operating_tokens} "
         f"({operating_tokens * bytes_per_token:,} B); points = payload sizes, r = repeats")
    _fit_table(fits, show)
    cross = F.crossover(fits)
    for sentence in cross.values():
        show(sentence)
    wires = F.wire_check(groups, bytes_per_token, operating_tokens)
    _wire_lines(wires, operating_tokens, show)
    trend = trend_warning(groups)
    if trend:
        show(trend)
    atomic_write(_out(folder) / "fit.json", json.dumps({"fits": [f.to_dict() for f in fits], "crossover": cross,
                                                        "wire_check": wires, "repeat_trend": trend},
                                                       indent=1, default=str) + "\n")
    return fits


#: a streamed run's forward this far from the one the projected cycle implies is said
FORWARD_TOLERANCE = 0.05


def forward_note(top: dict, inputs: V.Inputs) -> str | None:
    """A streamed run measured under a forward (its --stream layers,forward=MS) other than the one the
    verdict's cycle implies (cycle - t_draft): one line naming both, since the exposed hop
    depends on the forward the chunks were sent within (issue 62 item 12)."""
    stream = (top.get("config") or {}).get("stream")
    # a run's StreamSpec; a sweep's config lists its stream modes and streams under the decode
    # cycle's own forward (its cells carry their StreamSpec)
    if not isinstance(stream, dict):
        return None
    measured = StreamSpec.from_dict(stream).forward_ms
    implied = inputs.cycle_ms - inputs.t_draft_ms
    if abs(measured / implied - 1) <= FORWARD_TOLERANCE:
        return f"the streamed series were measured under a {measured:g} ms forward, the projected cycle's"
    return (f"warning: the streamed series were measured under a {measured:g} ms forward (--stream layers,forward=MS), but the "
            f"cycle projected here implies {implied:g} ms (--cycle {inputs.cycle_ms:g} - --t-draft "
            f"{inputs.t_draft_ms:g}): their exposed hop is for the other forward; measure under this one, or give "
            "the cycle the run had")


def run_verdict(folder: Path | Reading | None, inputs: V.Inputs, operating_tokens: int, hops: dict[str, float] | None = None,
                show=print, calls: dict | None = None) -> list[V.Verdict]:
    """The verdict table and every call printed with it (the codecs', the targets'); `calls`,
    when given, receives those calls as the JSON document carries them."""
    if hops:
        vs = [V.verdict(name, "given", ms, inputs) for name, ms in hops.items()]
    else:
        if folder is None:
            raise ConfigError("give a result folder or --hop-ms")
        vs, inputs = verdicts_with_drafter(folder, operating_tokens, inputs, show=show)
    floors = instrument_floors(folder) if folder is not None else {}
    show(f"verdict at the operating payload T = {operating_tokens}"
         + ("; floor = the instrument's own smallest round trip of that transport on loopback" if floors else ""))
    if folder is not None:
        top = load_groups(folder)[1]
        show(placement_note(top))
        if top.get("status") not in (None, "complete"):
            n = max((v.n_repeats or 1 for v in vs), default=0)
            show(f"note: this result is {top['status']}: the calls below come from what was measured so far (at most "
                 f"{n} repeat(s) per cell: the n column), not from the whole "
                 f"{'sweep' if top.get('kind') == 'sweep' or 'rungs' in top else 'run'}")
    if folder is not None and (cost := stream_cost(folder)) is not None:
        show(f"the streamed series' hop includes an extraction cost of {cost[0]:.3f} ms a forward, {cost[1]}")
    if folder is not None and (note := forward_note(load_groups(folder)[1], inputs)) is not None:
        show(note)
    show(V.format_table(vs, inputs, floors))
    codecs = V.codec_calls(vs, V.codec_sources(load_groups(folder)[0]) if folder is not None else None)
    for c in codecs:
        show(c["line"])
    targets = V.targets_calls(vs)  # several targets at once: the per-target hop against M, the capacity
    for t in targets:
        show(t["line"])
    if calls is not None:  # the inputs as used: a measured remote drafter's time in them
        calls.update(codecs=codecs, targets=targets, inputs=vars(inputs))
    if folder is not None:
        atomic_write(_out(folder) / "verdict.json", json.dumps({"inputs": vars(inputs), "operating_tokens": operating_tokens,
                                                                "verdicts": [v.to_dict() for v in vs], "codecs": codecs,
                                                                "targets": targets}, indent=1) + "\n")
        groups, _ = load_groups(folder)
        pairs = CMP.gap_pairs(groups)
        if pairs:
            show("think time between cycles (--gap-ms): the same cell with and without the gap")
            show(CMP.format_table([CMP.compare_groups(a, b, paired=True) for a, b in pairs], "no gap", "gap"))
    return vs


def run_plot(folder: Path | Reading, bytes_per_token: int, inputs: V.Inputs, operating_tokens: int, show=print) -> list[Path]:
    from hopbench.analysis import plot as PL

    groups, _ = load_groups(folder)
    fits = F.fit_groups(groups, bytes_per_token, operating_tokens)
    try:
        vs = verdicts(folder, operating_tokens, inputs, groups)
    except ConfigError as exc:  # no operating payload (e.g. run --bytes grid): every other figure still draws
        vs = []
        show(f"no hop-cost figure: {exc}")
    paths = PL.write_all(Path(folder) / "plots", groups, fits, vs, bytes_per_token, inputs.t_draft_ms, operating_tokens)
    show("plots: " + ", ".join(str(p) for p in paths))
    return paths


def report_all(folder: Path, scfg, show=print) -> None:
    from hopbench.analysis.data import Reading

    _report_all(Reading(folder), scfg, show)  # fit, verdict and plots share one reading of the folder


def _report_all(folder: Path | Reading, scfg, show=print) -> None:
    inputs = V.Inputs(scfg.t_draft_ms, scfg.cycle_ms, scfg.tok_s)
    bpt, op = recorded_shape(folder, scfg.shape.bytes_per_token, scfg.operating_tokens)
    run_fit(folder, bpt, op, show)
    run_verdict(folder, inputs, op, show=show)
    run_plot(folder, bpt, inputs, op, show)


def write_report(folder: Path, scfg, output: Path | None = None, min_gain: float = MIN_GAIN,
                 spec: list[Path] | None = None, inputs: V.Inputs | None = None) -> Path:
    """The HTML report (hopbench.analysis.report) and its JSON document in analysis/report.json.
    The default page, <folder>/report.html, is derived and rewritten; any other path must not exist."""
    from hopbench.analysis import report as RP

    folder = Path(folder)
    if output is not None and output.exists() and output.resolve() != (folder / "report.html").resolve():
        raise ConfigError(f"{output} exists; refusing to overwrite it (choose another -o)")
    doc, page = RP.build(folder, scfg, min_gain, spec, inputs)
    atomic_write(_out(folder) / RUN_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    path = output or folder / "report.html"
    atomic_write(path, page)
    if doc.get("status") == "running" and output is None:
        import sys

        print(f"hopbench: warning: {folder} is still running: {path} shows what was measured so far and is stale once "
              "it ends (run report again then)", file=sys.stderr)
    return path


def matrix_report(folder: Path, transport: str, scfg, say=print) -> dict:
    """After `hopbench matrix`: the per-pair lines, the heatmaps and the report page; the
    matrix document (for --json)."""
    from hopbench.analysis import matrix as AM

    lines, doc = AM.report(folder, transport)
    for line in lines:
        say(line)
    plots = AM.heatmaps(folder, transport)
    say("heatmaps: " + ", ".join(str(p) for p in plots if p.suffix == ".png"))
    page = write_report(folder, scfg)
    say(f"matrix results: {folder}")
    say(f"report: {page}")
    return {**doc, "folder": str(folder)}


def verdict_documents(folders: list[Path], inputs: V.Inputs, tokens: int | None, scfg,
                      hops: dict[str, float] | None = None, show=print) -> dict:
    """`hopbench verdict`: a table per folder (or for hops given directly); the JSON document."""
    docs: list[dict] = []
    if hops:
        vs = run_verdict(None, inputs, tokens or scfg.operating_tokens, hops, show=show)
        docs.append({"folder": None, "inputs": vars(inputs), "verdicts": [v.to_dict() for v in vs]})
    elif not folders:
        raise ConfigError("give a result folder or --hop-ms")
    for i, folder in enumerate([] if hops else folders):
        if len(folders) > 1:
            show(("\n" if i else "") + f"== {folder}")
        op = tokens or recorded_shape(folder, scfg.shape.bytes_per_token, scfg.operating_tokens)[1]
        calls: dict = {}
        vs = run_verdict(folder, inputs, op, show=show, calls=calls)
        top = load_groups(folder)[1]
        docs.append({"folder": str(folder), "operating_tokens": op, "inputs": vars(inputs), "status": top.get("status"),
                     "placement": placement_note(top), "verdicts": [v.to_dict() for v in vs], **calls})
    return document("verdict", {"results": docs})
