"""What the report and the commands both read off a loaded folder: the hop rows at the
operating payload, the instrument's floors, the placement note and the repeat-trend warning
(their own module: the report and the commands that write it import them, not each other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hopbench.analysis.data import Reading, load_groups
from hopbench.errors import ConfigError
from hopbench.estimate import Estimate
from hopbench.records import CellKey


def trend_warning(groups) -> str | None:
    """A ramp across repeat order, shared by the cells (see hopbench.estimate.repeat_trend)."""
    from hopbench.estimate import pct, repeat_trend

    t = repeat_trend([(g.repeat_ids, g.repeat_p50_ns) for g in groups])
    if not t["trend"]:
        return None
    fs = ", ".join(f"r{r} x{v:.3f}" for r, v in t["factors"].items())
    return (f"warning: the repeats drift in time order (Kendall p = {t['p']:.3f}, span {t['span_rel']:.1%} across "
            f"{len(t['factors'])} repeats: {fs}); the machine was not steady: its {pct(0.95)} intervals assume repeats "
            f"are exchangeable")


def hop_rows(folder: Path | Reading, operating_tokens: int, groups=None) -> list[tuple[CellKey, Estimate]]:
    """(cell, hop estimate in ms) at the operating payload, one row per series and think time
    measured (verdict names the rung with its gap when it has one: records.Place.label;
    groups: the folder's, when the caller has loaded them already)."""
    if groups is None:
        groups, _ = load_groups(folder)
    rows = [(g.cell, g.estimate().scaled(1e-6))
            for g in sorted(groups, key=lambda g: (g.rung, g.gap_ms)) if g.tokens == operating_tokens]
    if not rows:
        have = sorted({g.tokens for g in groups if g.tokens})
        streamed = bool(groups) and all(g.streamed for g in groups)  # a streamed run takes no --tokens: T = K + 1
        how = (f"a streamed run with K + 1 = {operating_tokens} (hopbench run --stream layers --k "
               f"{operating_tokens - 1})" if streamed else f"T = {operating_tokens} (hopbench run --tokens "
               f"{operating_tokens})")
        raise ConfigError(f"{folder}: no measurement at the operating payload T = {operating_tokens} "
                          f"(measured T: {', '.join(map(str, have)) or 'none, only byte sizes'}); "
                          f"give verdict --tokens with one of them, or measure {how}")
    return rows


def verdicts(folder: Path | Reading, operating_tokens: int, inputs, groups=None) -> list:
    """The verdict of every hop row (hop_rows), a hop whose UCX lanes bypassed the network
    marked as such (verdict.not_network): the one place commands and report build them."""
    from hopbench.analysis import verdict as V

    if groups is None:
        groups, _ = load_groups(folder)
    found: dict[CellKey, set[str]] = {}
    for g in groups:
        if g.tokens == operating_tokens and g.bypass:
            found.setdefault(g.cell, set()).update(g.bypass)
    record = agreement_record(folder)
    cost = stream_cost(folder)
    extra = cost[0] if cost else 0.0  # a streamed series' forward is that much longer: its hop pays it
    return [V.with_agreement(V.not_network(V.verdict(cell.place, cell.series,
                                                     est.shifted(extra) if cell.series.streamed else est, inputs),
                                           found.get(cell, set())), record)
            for cell, est in hop_rows(folder, operating_tokens, groups)]


def stream_cost(folder: Path | Reading) -> tuple[float, str] | None:
    """A streamed run's extraction cost (ms a forward, added to its streamed series' exposed
    hop in the verdict) and where it came from: measured by the run's real producer (`run
    --target`, with its interval) or given (`--stream layers,cost=MS`); None without a stream."""
    from hopbench.errors import HopbenchError
    from hopbench.records import StreamSpec
    from hopbench.results import ResultFolder

    try:
        config = getattr(ResultFolder(Path(folder)).read_header(), "config", None) or {}
    except (OSError, ValueError, HopbenchError):
        return None
    if not isinstance(config.get("stream"), dict):
        return None
    st = StreamSpec.from_dict(config["stream"])
    x = (st.producer or {}).get("extraction")
    if isinstance(x, dict):
        return st.cost_ms, (f"measured by the run's {st.target} producer on {(st.producer or {}).get('device')} "
                            f"({x['graphs']} graphs): {x['cost_ms']:+.3f} ms [{x['cost_lo_ms']:+.3f}, "
                            f"{x['cost_hi_ms']:+.3f}], forward with taps - without")
    return st.cost_ms, "given (--stream layers,cost=MS)" if st.cost_ms else \
        "none given (0; `run --stream layers,target=gpu` measures it)"


def agreement_record(folder: Path | Reading) -> dict[str, Any] | None:
    """The codec agreement a run's report.json carries (`run --agreement`, docs/CODECS.md),
    or None (not measured; a sweep's folder has none)."""
    from hopbench.errors import HopbenchError
    from hopbench.results import ResultFolder

    try:
        rec = ResultFolder(Path(folder)).read_header().extra.get("agreement")
    except (OSError, ValueError, HopbenchError):
        return None
    return rec if isinstance(rec, dict) else None


def verdicts_with_drafter(folder: Path | Reading, operating_tokens: int, inputs: Any, groups: Any = None,
                          show: Any = None) -> tuple[list, Any]:
    """The verdicts; where the run measured the server's drafter model (its "!draft" series)
    and no --t-draft-remote was given, the other series are projected with its measured
    draft_ns (its interval carried) instead of 0, and the drafter's own series with 0: its
    forward is inside its hop."""
    from dataclasses import replace

    from hopbench.analysis.drafter import from_run_folder

    show = show or (lambda line: None)

    measured = from_run_folder(Path(folder), operating_tokens) if inputs.t_draft_remote_from == "assumed" else None
    if measured is not None and measured.ms >= inputs.t_draft_ms:
        show(f"note: the measured remote drafter ({measured.ms:.3f} ms) is no faster than the local t_draft "
             f"({inputs.t_draft_ms:g} ms): moving it cannot pay; the plain series are projected with 0 ms")
        measured = None
    with_remote = inputs
    if measured is not None:
        show(f"the remote drafter's own time: {measured.ms:.3f} +- {measured.pm:.3f} ms ({measured.source}); the "
             "plain series carry it, the !draft series hold it in their hop")
        with_remote = replace(inputs, t_draft_remote_ms=measured.ms, t_draft_remote_pm=measured.pm,
                              t_draft_remote_from=measured.source)
    every = verdicts(folder, operating_tokens, with_remote, groups)
    plain = [v for v in every if v.series.drafter == "off"]
    if len(plain) == len(every):
        return every, with_remote
    inside = replace(inputs, t_draft_remote_ms=0.0, t_draft_remote_pm=0.0, t_draft_remote_from="inside the hop")
    drafted = [v for v in verdicts(folder, operating_tokens, inside, groups) if v.series.drafter != "off"]
    return plain + drafted, replace(with_remote, t_draft_remote_from=with_remote.t_draft_remote_from
                                    + "; the !draft series: inside their hop")


def instrument_floors(folder: Path | Reading, loaded=None) -> dict[str, float]:
    """transport -> floor in ms: a run's own floor measurement, or in a sweep the smallest
    payload on the loopback rung (loaded: the folder's (groups, top), if already read)."""
    groups, top = loaded or load_groups(folder)
    if top.get("floor"):
        return {top["floor"]["transport"]: top["floor"]["p50_ns"] / 1e6}
    out: dict[str, float] = {}
    for g in sorted(groups, key=lambda g: g.request_bytes):
        if g.place.rung == "loopback" and g.gap_ms == 0 and g.transport not in out and not g.streamed:
            out[g.transport] = g.p50_ns / 1e6
    return out


def placement_note(top: dict) -> str:
    """Where the two ends ran and how they received, as recorded: it moves small-payload
    latency 2-4x, so every verdict states it (a sweep's 'auto' says what it chose)."""
    resolved = top.get("placements_resolved")
    if isinstance(resolved, list) and resolved:
        auto = "auto" in ((top.get("config") or {}).get("placements") or [])
        return f"placement: {', '.join(map(str, resolved))}" + (" (chosen by 'auto' on this machine)" if auto else "")
    cfg = top.get("config") or {}
    if "poll" in cfg or "cpu" in cfg:
        return (f"placement: client cpu {cfg.get('cpu') or 'unpinned'}, poll {cfg.get('poll') or 'auto'} "
                "(the server's: its own flags)")
    return "placement: not recorded"
