"""Analysis commands as plain functions over result folders: fit, verdict, plot.
Derived outputs go to <folder>/analysis/ (rewritten atomically; raw results are never
touched)."""

from __future__ import annotations

import json
from pathlib import Path

from hopbench import compare as C
from hopbench import fit as F
from hopbench import verdict as V
from hopbench.data import load_groups
from hopbench.results import atomic_write


def _out(folder: Path) -> Path:
    out = Path(folder) / "analysis"
    out.mkdir(exist_ok=True)
    return out


def run_fit(folder: Path, bytes_per_token: int, operating_tokens: int, show=print) -> list[F.Fit]:
    groups, _ = load_groups(folder)
    fits = F.fit_groups(groups, bytes_per_token, operating_tokens)
    show(f"alpha-beta fit (latency = alpha + bytes/beta) per rung x transport; operating payload T = {operating_tokens} "
         f"({operating_tokens * bytes_per_token:,} B)")
    show(f"{'rung':<14} {'tr':<4} {'alpha us':>9} {'alpha 95% CI':>17} {'beta Mbit/s':>12} {'beta 95% CI':>19} "
         f"{'n1/2 kB':>8} {'n1/2 tok':>8} {'vs rate':>7} {'vs TCP bound':>12} {'break B':>8} {'bw share':>8}  regime")
    for f in fits:
        b = lambda v: v * 8 / 1e6  # noqa: E731
        show(f"{f.rung:<14} {f.transport:<4} {f.alpha_s * 1e6:9.1f} {f.alpha_ci[0] * 1e6:8.1f}..{f.alpha_ci[1] * 1e6:<7.1f} "
             f"{b(f.beta_Bps):12.1f} {b(f.beta_ci[0]):9.1f}..{b(f.beta_ci[1]):<8.1f} {f.n_half_bytes / 1e3:8.1f} "
             f"{f.n_half_tokens:8.2f} {f'{f.wire_efficiency:.1%}' if f.wire_efficiency else '-':>7} "
             f"{f'{f.goodput_ratio:.1%}' if f.goodput_ratio else '-':>12} {f.breakpoint_bytes or '-':>8} "
             f"{f.share_bandwidth:8.0%}  {f.regime}")
    cross = F.crossover(fits)
    for sentence in cross.values():
        show(sentence)
    wires = F.wire_check(groups, bytes_per_token, operating_tokens)
    if wires:
        show(f"wire-time check at T = {operating_tokens}: measured p50 vs the physical wire time "
             f"(bytes x 1538/1448 x 8 / rate) and vs wire + the unshaped round trip")
        for w in wires:
            show(f"  {w['rung']:<10} {w['transport']:<4} measured {w['measured_ns'] / 1e3:9.1f} us  wire {w['wire_ns'] / 1e3:9.1f} us "
                 f"({w['measured_ns'] / w['wire_ns'] - 1:+.2%})  wire+unshaped {w['expected_ns'] / 1e3:9.1f} us ({w['deviation']:+.2%})")
    atomic_write(_out(folder) / "fit.json", json.dumps({"fits": [f.to_dict() for f in fits], "crossover": cross,
                                                        "wire_check": wires}, indent=1, default=str) + "\n")
    return fits


def hop_rows(folder: Path, operating_tokens: int) -> list[tuple[str, str, float, tuple[float, float]]]:
    groups, _ = load_groups(folder)
    rows = []
    for g in groups:
        if g.tokens == operating_tokens and g.gap_ms == 0:
            lo, hi = g.p50_ci_ns()
            rows.append((g.rung, g.transport, g.p50_ns / 1e6, (lo / 1e6, hi / 1e6)))
    return rows


def instrument_floors(folder: Path) -> dict[str, float]:
    """transport -> floor in ms: a run's own floor measurement, or in a sweep the smallest
    payload on the loopback rung."""
    groups, top = load_groups(folder)
    if top.get("floor"):
        return {top["floor"]["transport"]: top["floor"]["p50_ns"] / 1e6}
    out: dict[str, float] = {}
    for g in sorted(groups, key=lambda g: g.request_bytes):
        if g.rung.split("@")[0] == "loopback" and g.gap_ms == 0 and g.transport not in out:
            out[g.transport] = g.p50_ns / 1e6
    return out


def run_verdict(folder: Path | None, inputs: V.Inputs, operating_tokens: int, hops: dict[str, float] | None = None,
                show=print) -> list[V.Verdict]:
    if hops:
        vs = [V.verdict(name, "given", ms, inputs) for name, ms in hops.items()]
    else:
        vs = [V.verdict(r, t, ms, inputs, ci) for r, t, ms, ci in hop_rows(folder, operating_tokens)]
    floors = instrument_floors(folder) if folder is not None else {}
    show(f"verdict at the operating payload T = {operating_tokens}"
         + ("; floor = the instrument's own smallest round trip of that transport on loopback" if floors else ""))
    show(V.format_table(vs, inputs, floors))
    if folder is not None:
        atomic_write(_out(folder) / "verdict.json", json.dumps({"inputs": vars(inputs), "operating_tokens": operating_tokens,
                                                                "verdicts": [v.to_dict() for v in vs]}, indent=1) + "\n")
        groups, _ = load_groups(folder)
        pairs = C.gap_pairs(groups)
        if pairs:
            show("think time between cycles (--gap-ms): the same cell with and without the gap")
            show(C.format_table([C.compare_groups(a, b) for a, b in pairs], "no gap", "gap"))
    return vs


def run_plot(folder: Path, bytes_per_token: int, inputs: V.Inputs, operating_tokens: int, show=print) -> list[Path]:
    from hopbench import plot as P

    groups, _ = load_groups(folder)
    fits = F.fit_groups(groups, bytes_per_token, operating_tokens, boot=50)
    vs = [V.verdict(r, t, ms, inputs, ci) for r, t, ms, ci in hop_rows(folder, operating_tokens)]
    paths = P.write_all(Path(folder) / "plots", groups, fits, vs, bytes_per_token, inputs.t_draft_ms, operating_tokens)
    show("plots: " + ", ".join(str(p) for p in paths))
    return paths


def report_all(folder: Path, scfg, show=print) -> None:
    inputs = V.Inputs(scfg.t_draft_ms, scfg.cycle_ms, scfg.tok_s)
    bpt, op = scfg.shape.bytes_per_token, scfg.operating_tokens
    run_fit(folder, bpt, op, show)
    run_verdict(folder, inputs, op, show=show)
    run_plot(folder, bpt, inputs, op, show)
