"""The break-even verdict: does moving the drafter off-box pay on this rung?

Moving the drafter frees t_draft from every decode cycle and adds one hop:
    projected cycle = cycle - t_draft + hop + t_draft_remote
    projected tok/s = tok/s x cycle / projected cycle
    break-even hop  = t_draft - t_draft_remote
t_draft_remote (`--t-draft-remote`, default 0: the study's projection) is the remote
drafter's own time per cycle; `hopbench spec` measures the same model end to end.
The inputs default to the remote-drafter study's measured decode cycle (configs/shape.toml
[decode]: t_draft 15.88 ms = draft_fwd 9.91 + markov_sample 4.75 + ctxkv 1.23, cycle
89.34 ms, 24.05 tok/s co-located). Each input may carry its own uncertainty
("15.88+-0.4": a 95% half-width).

Calls ("dead heat" is the study's rule: its 16.02 ms hop against 15.88 ms break-even,
+0.88%, "to within 1%"):
- "move the drafter" only when the projected gain's whole 95% interval clears the
  minimum worth a second box (`--min-gain`, default 5%);
- a no when the whole interval lies below that bar: "keep the drafter local" (no gain),
  "not worth it (+0.2% < 5%)" (a gain below the bar), "dead heat" when the hop is also
  within the tolerance of break-even (decide());
- "undecided" only when the interval holds the bar (the data cannot tell which side).

The projection assumes the whole t_draft is freed and the remote drafter's own time is
t_draft_remote (0 by default); `hopbench spec` measures the real loop instead.
Inputs that cannot describe a decode loop are refused (ConfigError, one line): t_draft must
be shorter than the cycle, and the remote drafter faster than the local one.

Uncertainty: the hop's interval (from hopbench.estimate, at its achieved level) and the
inputs' intervals are propagated to the projected tok/s and gain by Monte Carlo (seeded),
each input drawn from a normal (split normal for an asymmetric hop interval) matching its
interval; the projection's interval is the central 95% of the draws.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from hopbench.analysis import dist as D
from hopbench.errors import ConfigError
from hopbench.estimate import Estimate, pct
from hopbench.records import MIN_GAIN, Place, Series

DRAWS = 20000


@dataclass(frozen=True)
class Inputs:
    t_draft_ms: float
    cycle_ms: float
    tok_s: float
    tolerance: float = 0.01
    t_draft_remote_ms: float = 0.0  # the remote drafter's own time per cycle
    t_draft_pm: float = 0.0  # 95% half-widths of the inputs (0: taken as exact)
    cycle_pm: float = 0.0
    tok_s_pm: float = 0.0
    min_gain: float = MIN_GAIN
    t_draft_remote_pm: float = 0.0  # its 95% half-width (a measured drafter's interval)
    #: where the remote drafter's time came from: "assumed" (0), "given" (--t-draft-remote MS), or
    #: the measurement it was read from (docs/DRAFTER.md)
    t_draft_remote_from: str = "assumed"
    #: which of t_draft_ms, cycle_ms, tok_s the user gave (the rest are the shape's: configs/shape.toml)
    given: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("t_draft_ms", "cycle_ms", "tok_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} = {v!r}: expected a positive number")
        if self.t_draft_ms >= self.cycle_ms:
            raise ConfigError(f"t_draft {self.t_draft_ms:g} ms >= decode cycle {self.cycle_ms:g} ms: the drafter's time "
                              "is part of the cycle, so it must be shorter than the cycle")
        if not (math.isfinite(self.t_draft_remote_ms) and 0 <= self.t_draft_remote_ms < self.t_draft_ms):
            raise ConfigError(f"t_draft_remote {self.t_draft_remote_ms:g} ms: must be >= 0 and below t_draft "
                              f"{self.t_draft_ms:g} ms (a remote drafter no faster than the local one leaves no hop to spend)")
        if not 0 <= self.tolerance < 1:
            raise ConfigError(f"tolerance {self.tolerance}: expected a fraction in [0, 1)")
        if not (math.isfinite(self.min_gain) and 0 <= self.min_gain < 10):
            raise ConfigError(f"min_gain {self.min_gain}: expected a fraction >= 0 (0.05 = 5%)")

    def describe(self) -> str:
        def q(v: float, pm: float, unit: str) -> str:
            return f"{v:g}{'+-' + format(pm, 'g') if pm else ''}{unit}"

        remote = f", remote drafter {self.t_draft_remote_ms:g} ms" if self.t_draft_remote_ms else ""
        return (f"t_draft = {q(self.t_draft_ms, self.t_draft_pm, ' ms')}{remote} (break-even hop = t_draft - remote), "
                f"decode cycle = "
                f"{q(self.cycle_ms, self.cycle_pm, ' ms')}, co-located = {q(self.tok_s, self.tok_s_pm, ' tok/s')}, "
                f"dead heat = hop within {self.tolerance:.0%} of break-even, worth moving = projected gain >= "
                f"{self.min_gain:.0%}; assumes the whole t_draft is freed; the remote drafter's own time is "
                f"{q(self.t_draft_remote_ms, self.t_draft_remote_pm, ' ms')} ({self.t_draft_remote_from})")


_QTY = re.compile(r"^\s*([0-9.eE+-]+?)\s*(?:(?:\+-|±|\+/-)\s*([0-9.eE+]+))?\s*$")


def parse_hops(text: str) -> dict[str, float]:
    """--hop-ms NAME=MS,...: hop costs given directly."""
    hops: dict[str, float] = {}
    for item in text.split(","):
        name, _, val = item.partition("=")
        try:
            hops[name] = float(val)
        except ValueError:
            raise ConfigError(f"--hop-ms {item!r}: expected NAME=MS") from None
    return hops


def inputs_from(shape, t_draft: str | None, cycle: str | None, tok_s: str | None, **rest: Any) -> Inputs:
    """The verdict's inputs: each VALUE[+-HALF] flag given, else the shape config's value (exact)."""
    td = parse_quantity(t_draft, "--t-draft") if t_draft is not None else (shape.t_draft_ms, 0.0)
    cy = parse_quantity(cycle, "--cycle") if cycle is not None else (shape.cycle_ms, 0.0)
    ts = parse_quantity(tok_s, "--tok-s") if tok_s is not None else (shape.tok_s, 0.0)
    given = tuple(n for n, x in (("t_draft_ms", t_draft), ("cycle_ms", cycle), ("tok_s", tok_s)) if x is not None)
    return Inputs(td[0], cy[0], ts[0], t_draft_pm=td[1], cycle_pm=cy[1], tok_s_pm=ts[1], given=given, **rest)


def parse_quantity(text: str, what: str) -> tuple[float, float]:
    """'15.88' or '15.88+-0.4' / '15.88±0.4' -> (value, 95% half-width)."""
    m = _QTY.match(str(text))
    try:
        if not m:
            raise ValueError
        v = float(m.group(1))
        pm = float(m.group(2)) if m.group(2) else 0.0
    except ValueError:
        raise ConfigError(f"{what} {text!r}: expected a number, optionally with +-HALF_WIDTH (95%)") from None
    if not math.isfinite(v) or v <= 0 or pm < 0 or not math.isfinite(pm):
        raise ConfigError(f"{what} {text!r}: expected a positive number")
    return v, pm


class Decision(str, Enum):
    """What a verdict decided; its call (the sentence) is formatted from it and its numbers,
    never parsed back: presenters colour and class by `tone` (pyperf's `significant` beside
    its one-line text)."""

    MOVE = "move"
    KEEP = "keep"
    NOT_WORTH = "not-worth"
    DEAD_HEAT = "dead-heat"
    UNDECIDED = "undecided"
    NOT_NETWORK = "not-network"
    CHANGES_DRAFTS = "changes-drafts"  # a move whose codec changes the drafts (with_agreement)

    @property
    def tone(self) -> str:
        """pays / even / costs: the report's class and the terminal table's colour."""
        return {"move": "pays", "keep": "costs", "not-network": "costs"}.get(self.value, "even")


@dataclass
class Verdict:
    rung: str
    transport: str
    hop_ms: float
    hop_ci_ms: tuple[float, float] | None
    hop_ci_level: float | None
    hop_ci_scope: str | None
    n_repeats: int | None
    n_cycles: int | None
    break_even_ms: float
    hop_vs_break_even: float  # hop / break-even - 1
    projected_cycle_ms: float
    projected_tok_s: float
    projected_tok_s_ci: tuple[float, float] | None  # 95%, propagated
    gain: float
    gain_ci: tuple[float, float] | None
    call: str
    min_gain: float = MIN_GAIN
    #: UCX transports whose lanes bypassed the network (hopbench.lanes): no call is made
    not_network: list[str] = field(default_factory=list)
    #: the typed identity the two labels above spell (records.Place, records.Series)
    place: Place = field(default_factory=lambda: Place(""))
    series: Series = field(default_factory=lambda: Series(""))
    #: a lossy codec's measured effect on the drafts (its headline: analysis.agreement.for_codec)
    agreement: dict | None = None
    #: what `call` says, as a value (Decision)
    decision: Decision = Decision.UNDECIDED

    def to_dict(self) -> dict:
        return asdict(self)


NOT_NETWORK = "not a network hop"


def not_network(v: Verdict, found: "list[str] | set[str]") -> Verdict:
    """The verdict of a hop whose lanes bypassed the network: its numbers stay (they are what
    was measured), its call says it measured memory, and best_per_rung passes it over."""
    if not found:
        return v
    v.not_network = sorted(found)
    v.decision = Decision.NOT_NETWORK
    v.call = (f"{NOT_NETWORK} ({', '.join(v.not_network)}: UCX moved it through memory between two ends on one "
              "host; rerun with UCX_TLS/NIXL_UCX_TLS=tcp)")
    return v


CHANGES_DRAFTS = "move, but the codec changes the drafts"


def with_agreement(v: Verdict, record: dict | None) -> Verdict:
    """A codec series' verdict with its codec's measured agreement (the record a run's
    report.json carries): a codec whose agreement interval reaches below the bar is never
    called plain "move the drafter" (its hop is cut, but the drafter then predicts from
    other states): CHANGES_DRAFTS."""
    from hopbench.analysis import agreement as AG

    h = AG.for_codec(record, v.series.codec) if v.series.codec != "none" else None
    if h is None:
        return v
    v.agreement = h
    if h["changes_drafts"] and v.decision is Decision.MOVE:
        v.decision, v.call = Decision.CHANGES_DRAFTS, CHANGES_DRAFTS
    return v


def project(hop_ms: float, inp: Inputs) -> tuple[float, float]:
    cycle = inp.cycle_ms - inp.t_draft_ms + hop_ms + inp.t_draft_remote_ms
    return cycle, inp.tok_s * inp.cycle_ms / cycle


def _draw_hop(rng: np.random.Generator, hop: Estimate) -> np.ndarray:
    if not hop.has_interval or not hop.level:
        return np.full(DRAWS, hop.value)
    z = D.norm_ppf(0.5 + hop.level / 2)
    sd_lo = max(hop.value - hop.lo, 0.0) / z  # type: ignore[operator]
    sd_hi = max(hop.hi - hop.value, 0.0) / z  # type: ignore[operator]
    e = rng.standard_normal(DRAWS)
    return hop.value + np.where(e < 0, e * sd_lo, e * sd_hi)


def call_for_gain(gain: float, min_gain: float) -> tuple[Decision, str]:
    """The decision and call for a decided gain (projected, or measured by hopbench spec)."""
    if gain > 0 and gain >= min_gain:
        return Decision.MOVE, "move the drafter"
    if gain > 0:
        return Decision.NOT_WORTH, f"not worth it ({gain:+.1%} < {min_gain:.0%})"
    return Decision.KEEP, "keep the drafter local"


def decide(gain: float, gain_ci: tuple[float, float] | None, rel: float, inp: Inputs) -> tuple[Decision, str]:
    """The call from the projected gain and its 95% interval. The one decision is whether the
    gain reaches the bar (`min_gain`; 0 when there is none): "move the drafter" needs the
    whole interval at or above it, a "no" needs the whole interval below it ("keep the
    drafter local", "not worth it", or "dead heat" when the hop is within the tolerance of
    break-even), and "undecided" is left for an interval that holds the bar. An interval
    that straddles break-even but lies wholly below a 5% bar is a certain no: whether the
    gain is -0.8% or +0.2%, it is not worth a second box."""
    lo, hi = gain_ci if gain_ci is not None else (gain, gain)
    bar = inp.min_gain
    if abs(rel) <= inp.tolerance and (hi < bar or bar == 0):
        return Decision.DEAD_HEAT, "dead heat"
    if lo >= bar and lo > 0:
        return Decision.MOVE, "move the drafter"
    if hi < bar or hi <= 0:
        return call_for_gain(min(gain, hi), bar)
    where = f"the {bar:.0%} bar" if bar > 0 else "break-even"
    return Decision.UNDECIDED, f"undecided (the 95% interval {lo:+.1%}..{hi:+.1%} holds {where})"


def best_per_rung(vs: "list[Verdict] | list[dict]") -> "dict[str, int]":
    """rung -> the index of its best series (Verdicts, or their dicts as documents hold them):
    the one whose projected gain is surely the largest (the lower end of its 95% interval;
    the gain itself without one). By the point estimate alone, a series of a few noisy
    repeats (a hop interval of 0.2-33.9 ms) beat every well-measured one and left its rung
    undecided. A hop that bypassed the network is never the best while another exists, nor a
    codec's that changes the drafts (with_agreement) while one that keeps them exists."""

    ds = [v if isinstance(v, dict) else asdict(v) for v in vs]

    def sure(d: dict) -> tuple[int, float]:  # (rank, the surely-largest gain): a bypass last, then a changed draft
        g = d["gain_ci"][0] if d.get("gain_ci") else d["gain"]
        return (-2 if d.get("not_network") else -1 if (d.get("agreement") or {}).get("changes_drafts") else 0), g

    best: dict[str, int] = {}
    for i, d in enumerate(ds):
        if d["rung"] not in best or sure(d) > sure(ds[best[d["rung"]]]):
            best[d["rung"]] = i
    return best


def verdict(place: Place | str, series: Series | str, hop: Estimate | float, inp: Inputs, seed: int = 3) -> Verdict:
    """The verdict of a hop measured at `place` in `series` (a bare rung or transport name
    stands for a plain one). hop: an Estimate in ms (or a bare number in ms, taken as exact)."""
    place, series = Place.of(place), Series.of(series)
    if not isinstance(hop, Estimate):
        hop = Estimate(float(hop), None, None, None, "given", "given", 0, 0)
    cycle, tok = project(hop.value, inp)
    gain = tok / inp.tok_s - 1
    tok_ci = gain_ci = None
    if hop.has_interval or inp.t_draft_pm or inp.cycle_pm or inp.tok_s_pm or inp.t_draft_remote_pm:
        rng = np.random.default_rng(seed)
        h = _draw_hop(rng, hop)
        td = inp.t_draft_ms + rng.standard_normal(DRAWS) * inp.t_draft_pm / 1.959964
        cy = inp.cycle_ms + rng.standard_normal(DRAWS) * inp.cycle_pm / 1.959964
        ts = inp.tok_s + rng.standard_normal(DRAWS) * inp.tok_s_pm / 1.959964
        rem = np.maximum(inp.t_draft_remote_ms + rng.standard_normal(DRAWS) * inp.t_draft_remote_pm / 1.959964, 0.0)
        tok_d = ts * cy / (cy - td + h + rem)
        gain_d = cy / (cy - td + h + rem) - 1
        tok_ci = (float(np.percentile(tok_d, 2.5)), float(np.percentile(tok_d, 97.5)))
        gain_ci = (float(np.percentile(gain_d, 2.5)), float(np.percentile(gain_d, 97.5)))
    break_even = inp.t_draft_ms - inp.t_draft_remote_ms
    rel = hop.value / break_even - 1
    decision, call = decide(gain, gain_ci, rel, inp)
    return Verdict(place.label, series.label, hop.value, (hop.lo, hop.hi) if hop.has_interval else None,  # type: ignore[arg-type]
                   hop.level, hop.scope if hop.has_interval else None, hop.n_repeats or None, hop.n_samples or None,
                   break_even, rel, cycle, tok, tok_ci, gain, gain_ci, call, inp.min_gain, place=place, series=series,
                   decision=decision)


def format_table(vs: list[Verdict], inp: Inputs, floors: dict[str, float] | None = None) -> str:
    """floors: transport -> the instrument's floor in ms (64 B on loopback), shown beside the hop."""
    floors = floors or {}
    lines = [
        f"inputs: {inp.describe()}",
        "hop = median of repeat medians; its CI at the level shown (order statistics over repeats; 'run' = within one "
        "run only, run-to-run spread not included); tok/s and gain CIs: 95%, all inputs' intervals propagated",
    ]
    rows = []
    for v in vs:
        ci = f"{v.hop_ci_ms[0]:.3f}-{v.hop_ci_ms[1]:.3f}" if v.hop_ci_ms else "-"
        lvl = "-" if v.hop_ci_level is None else (pct(v.hop_ci_level) + (" run" if v.hop_ci_scope == "within-run" else ""))
        n = "-" if not v.n_repeats else f"{v.n_repeats}r/{v.n_cycles or 0}c"
        tci = f"{v.projected_tok_s_ci[0]:.2f}-{v.projected_tok_s_ci[1]:.2f}" if v.projected_tok_s_ci else "-"
        gci = f"{v.gain_ci[0]:+.1%}..{v.gain_ci[1]:+.1%}" if v.gain_ci else "-"
        fl = f"{floors[v.transport]:.3f}" if v.transport in floors else "-"
        rows.append([v.rung, v.transport, n, f"{v.hop_ms:.3f}", ci, lvl, fl, f"{v.hop_vs_break_even:+.1%}",
                     f"{v.projected_cycle_ms:.2f}", f"{v.projected_tok_s:.2f}", tci, f"{v.gain:+.1%}", gci, v.call])
    from hopbench.analysis.tables import render

    lines.append(render(["rung", "transport", "n", "hop ms", "hop CI", "level", "floor ms", "vs b-e", "cycle ms", "tok/s",
                         "tok/s 95% CI", "gain", "gain 95% CI", "call"], rows, right=set(range(2, 13)), call_column=13,
                        tones=[v.decision.tone for v in vs]))
    lines.append("n = repeats r / timed cycles c; vs b-e = hop / break-even - 1")
    return "\n".join(lines)


def codec_calls(vs: "list[Verdict]", sources: "dict[tuple[Place, Series], str | None] | None" = None) -> list[dict]:
    """Per codec series ("tcp+fp8"), whether the codec pays on its rung: its hop (the codec's
    encode and decode included) against the same transport's raw hop. With intervals on both
    hops the call needs them apart: pays when the codec's upper bound is below the raw lower
    bound, does not pay when its lower bound is above the raw upper bound, else undecided
    (within the measured spread). `sources`: (rung, series) -> the data the codec encoded
    ("synthetic" or a file's name), said with every line: a ratio on synthetic data is not
    a claim about any model."""
    raw = {(v.place, v.series): v for v in vs if v.series.codec == "none"}
    out = []
    for v in vs:
        base = raw.get((v.place, v.series.raw))  # several targets: compared with the raw hop at the same M
        if v.series.codec == "none" or base is None:
            continue
        base_name, codec = v.series.raw.alone.label, v.series.codec
        lo, hi = v.hop_ci_ms or (v.hop_ms, v.hop_ms)
        rlo, rhi = base.hop_ci_ms or (base.hop_ms, base.hop_ms)
        pays = hi < rlo
        undecided = not pays and not lo > rhi
        call = ("the codec pays" if pays else "undecided: the two hops' intervals overlap" if undecided
                else "the codec does not pay (it costs more time than it saves)")
        if pays and v.agreement and v.agreement["changes_drafts"]:  # never a plain "pays" (issue 52)
            call = f"the codec cuts the hop to {v.hop_ms / base.hop_ms:.2f}x but changes the drafts"
        data = (sources or {}).get((v.place, v.series))
        said = f" ({data} data)" if data == "synthetic" else f" (hidden states from {data})" if data else ""
        drafts = _drafts_said(v)
        out.append({"rung": v.rung, "transport": base_name, "codec": codec, "hop_ms": v.hop_ms, "raw_hop_ms": base.hop_ms,
                    "hop_ratio": v.hop_ms / base.hop_ms, "gain": v.gain, "raw_gain": base.gain, "pays": pays,
                    "undecided": undecided, "call": call, "payload_source": data, "agreement": v.agreement,
                    "changes_drafts": bool(v.agreement and v.agreement["changes_drafts"]),
                    "line": (f"codec {codec} on {v.rung} ({base_name}{said}): hop {v.hop_ms:.3f} ms = "
                             f"{v.hop_ms / base.hop_ms:.2f}x the raw {base.hop_ms:.3f} ms; gain {v.gain:+.1%} against "
                             f"{base.gain:+.1%} raw: {call}; {drafts}")})
    return out


def _drafts_said(v: Verdict) -> str:
    """What the codec does to the drafts, as measured (or that it was not)."""
    from hopbench.analysis import agreement as AG

    h = v.agreement
    if h is None:
        return "its effect on the drafts not measured (run --agreement; a lossless codec keeps them exactly)"
    return f"{AG.said(h)}: it {AG.verb_with_bar(h)}"


def targets_calls(vs: "list[Verdict]") -> list[dict]:
    """Per rung and series measured with several targets at once (tcp, tcp@2, tcp@4 ...): the
    per-target hop and gain at each M, and the capacity: the largest M measured up to which
    every M still beats co-located (its gain's interval above 0; without an interval, the
    gain itself). None when even one target alone does not beat it."""
    by: dict[tuple[str, str], list[tuple[int, Verdict]]] = {}
    for v in vs:
        by.setdefault((v.rung, v.series.alone.label), []).append((v.series.clients, v))
    out = []
    for (rung, series), items in by.items():
        if all(m == 1 for m, _ in items):
            continue
        items.sort(key=lambda mv: mv[0])
        points = [{"targets": m, "hop_ms": v.hop_ms, "hop_ci_ms": v.hop_ci_ms, "gain": v.gain, "gain_ci": v.gain_ci,
                   "beats": (v.gain_ci[0] if v.gain_ci else v.gain) > 0} for m, v in items]
        capacity = None
        for pt in points:
            if not pt["beats"]:
                break
            capacity = pt["targets"]
        last = points[-1]["targets"]
        said = (f"every target still beats co-located up to M = {capacity}" if capacity else
                "not even the first M measured beats co-located")
        more = " (the most measured: more may fit)" if capacity == last else ""
        out.append({"rung": rung, "transport": series, "points": points, "capacity": capacity,
                    "capacity_is_last": capacity == last, "break_even_ms": items[0][1].break_even_ms,
                    "line": (f"{rung}, {series}: per-target hop " + ", ".join(
                        f"M={pt['targets']} {pt['hop_ms']:.3f} ms ({pt['gain']:+.1%})" for pt in points)
                        + f"; {said}{more}")})
    return out


def codec_sources(groups: list) -> "dict[tuple[Place, Series], str | None]":
    """(place, series) -> the data a codec series encoded (hopbench.analysis.data.Group)."""
    return {(g.place, g.series): g.payload_source for g in groups if g.payload_source}
