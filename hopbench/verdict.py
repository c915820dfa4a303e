"""The break-even verdict: does moving the drafter off-box pay on this rung?

Moving the drafter frees t_draft from every decode cycle and adds one hop:
    projected cycle = cycle - t_draft + hop
    projected tok/s = tok/s x cycle / projected cycle
    break-even hop  = t_draft
The hop's CI is carried through (the projection is monotonic in the hop, so the CI ends
map to CI ends). "dead heat" when the CI straddles break-even, or when the projected gain
is within +-tolerance (default 1%, the study's "to within 1%").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Inputs:
    t_draft_ms: float
    cycle_ms: float
    tok_s: float
    tolerance: float = 0.01


@dataclass
class Verdict:
    rung: str
    transport: str
    hop_ms: float
    hop_ci_ms: tuple[float, float] | None
    break_even_ms: float
    projected_cycle_ms: float
    projected_tok_s: float
    projected_tok_s_ci: tuple[float, float] | None
    gain: float
    gain_ci: tuple[float, float] | None
    call: str

    def to_dict(self) -> dict:
        return asdict(self)


def project(hop_ms: float, inp: Inputs) -> tuple[float, float]:
    cycle = inp.cycle_ms - inp.t_draft_ms + hop_ms
    return cycle, inp.tok_s * inp.cycle_ms / cycle


def verdict(rung: str, transport: str, hop_ms: float, inp: Inputs, hop_ci_ms: tuple[float, float] | None = None) -> Verdict:
    cycle, tok = project(hop_ms, inp)
    gain = tok / inp.tok_s - 1
    tok_ci = gain_ci = None
    straddles = False
    if hop_ci_ms is not None:
        lo, hi = hop_ci_ms
        tok_ci = (project(hi, inp)[1], project(lo, inp)[1])  # a longer hop gives fewer tok/s
        gain_ci = (tok_ci[0] / inp.tok_s - 1, tok_ci[1] / inp.tok_s - 1)
        straddles = lo <= inp.t_draft_ms <= hi
    if straddles or abs(gain) <= inp.tolerance:
        call = "dead heat"
    elif gain > 0:
        call = "move the drafter"
    else:
        call = "keep the drafter local"
    return Verdict(rung, transport, hop_ms, hop_ci_ms, inp.t_draft_ms, cycle, tok, tok_ci, gain, gain_ci, call)


def format_table(vs: list[Verdict], inp: Inputs, floors: dict[str, float] | None = None) -> str:
    """floors: transport -> the instrument's floor in ms (64 B on loopback), shown beside the hop."""
    floors = floors or {}
    lines = [
        f"inputs: t_draft = {inp.t_draft_ms} ms (break-even hop), decode cycle = {inp.cycle_ms} ms, "
        f"co-located = {inp.tok_s} tok/s, dead-heat tolerance = {inp.tolerance:.0%}",
        f"{'rung':<16} {'transport':<9} {'hop ms':>9} {'hop 95% CI':>19} {'floor ms':>9} {'cycle ms':>9} {'tok/s':>7} "
        f"{'tok/s CI':>15} {'gain':>7}  call",
    ]
    for v in vs:
        ci = f"{v.hop_ci_ms[0]:.3f}-{v.hop_ci_ms[1]:.3f}" if v.hop_ci_ms else "-"
        tci = f"{v.projected_tok_s_ci[0]:.2f}-{v.projected_tok_s_ci[1]:.2f}" if v.projected_tok_s_ci else "-"
        fl = f"{floors[v.transport]:.3f}" if v.transport in floors else "-"
        lines.append(f"{v.rung:<16} {v.transport:<9} {v.hop_ms:9.3f} {ci:>19} {fl:>9} {v.projected_cycle_ms:9.2f} "
                     f"{v.projected_tok_s:7.2f} {tci:>15} {v.gain:+7.1%}  {v.call}")
    return "\n".join(lines)
