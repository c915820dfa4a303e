"""Reading a `hopbench spec` folder: tokens/s per mode with its interval over repeats
(hopbench.estimate, repeats as the unit), the arithmetic the measurement is checked
against, and the projection the verdict would make from this session's measured hop.

- local arithmetic: tokens / (t_verify + t_draft_local), with the repeat's own tokens;
- sync projection: tokens / (t_verify + hop(T) + t_draft_remote) per cycle, hop(T) the
  median measured hop of that repeat's sync cycles at T tokens: the verdict's model
  (cycle' = cycle - t_draft + hop, plus the remote drafter's own time) fed with this
  session's hop;
- stream projection: the same model with mode stream's exposed hop (ids back - the
  forward's end) and the forward's extraction cost (docs/STREAM.md);
- differences measured - arithmetic (or projection) per repeat, with their interval."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopbench.errors import HopbenchError
from hopbench.estimate import Estimate, cell_estimate, pct

MODES = ("local", "sync", "overlap", "stream")  # hopbench spec's modes, in the order tables show them


@dataclass
class ModeResult:
    mode: str
    tok_s: Estimate
    tokens_per_cycle: float
    hit_rate: float | None
    reference: str | None  # "arithmetic" (local) or "projection" (sync)
    reference_tok_s: Estimate | None
    diff_rel: Estimate | None  # measured / reference - 1, per repeat
    gain: Estimate | None = None  # tok/s over local's in the same repeat - 1 (paired: the same outcomes)


def _nominal_ms(work: dict[str, Any]) -> float | None:
    return work.get("mean_ms")


def load(folder: str | Path) -> tuple[dict[str, Any], Any, Any]:
    """report.json, and cycles.csv and summary.csv as pandas DataFrames."""
    from hopbench import results as R
    from hopbench.analysis.deps import pandas

    rf = R.ResultFolder(folder)
    try:
        reading = rf.read()
    except (OSError, ValueError, HopbenchError) as exc:
        raise HopbenchError(f"{folder}: not a hopbench spec folder ({exc})") from None
    if not isinstance(reading.header, R.SpecReport):
        raise HopbenchError(f"{folder}: not a hopbench spec folder (schema {reading.record.get('schema')!r})")
    report = reading.record
    R.verify_files(rf.file(R.RUN_FILE), report)  # the CSVs as written (spec results before the manifest: unchecked)
    pd = pandas()
    return report, pd.read_csv(rf.file(R.CYCLES_FILE)), pd.read_csv(rf.file(R.SUMMARY_FILE))


def analyse(folder: str | Path) -> tuple[dict[str, Any], list[ModeResult]]:
    report, cycles, summary = load(folder)
    cfg = report["config"]
    scale = float(cfg.get("time_scale", 1.0))
    t_verify = _nominal_ms(report["work"]["verify"])
    t_local = _nominal_ms(report["work"]["draft_local"])
    remote = str(cfg.get("draft_remote", ""))
    t_remote = float(remote.split(":", 1)[1]) * scale if remote.startswith(("sleep:", "spin:")) else None
    timed = cycles[cycles["phase"] == 2]
    out: list[ModeResult] = []
    cost = float(cfg.get("stream_cost_ms") or 0.0) * scale
    for mode in [m for m in MODES if (summary["mode"] == m).any()]:
        rows = summary[(summary["mode"] == mode) & summary["tok_s"].notna()]
        tok = rows["tok_s"].astype(float).tolist()
        est = cell_estimate(tok)
        tpc = float(rows["tokens_per_cycle"].mean())
        hits = rows["hit_rate"].dropna() if "hit_rate" in rows else []
        ref_vals: list[float] = []
        for rep in rows["repeat"]:
            cyc = timed[(timed["mode"] == mode) & (timed["repeat"] == rep)]
            tokens = cyc["tokens"].to_numpy(dtype=np.int64)
            if mode == "local" and t_verify is not None and t_local is not None:
                ref_vals.append(tokens.sum() / (len(tokens) * (t_verify + t_local) / 1e3))
            elif mode in ("sync", "stream") and t_verify is not None and t_remote is not None:
                hop = (cyc.groupby("tokens")["hop_ns"].median() / 1e6).to_dict()  # this session's hop per T
                forward = t_verify + (cost if mode == "stream" else 0.0)
                secs = sum((forward + hop[int(t)] + t_remote) / 1e3 for t in tokens)
                ref_vals.append(tokens.sum() / secs)
        ref = cell_estimate(ref_vals) if ref_vals else None
        diff = cell_estimate([m / p - 1 for m, p in zip(tok, ref_vals)]) if ref_vals else None
        reference = {"local": "arithmetic", "sync": "projection", "stream": "projection"}.get(mode)
        out.append(ModeResult(mode, est, tpc, float(np.mean(hits)) if len(hits) else None,
                              reference if ref_vals else None, ref, diff, _gain(summary, mode, rows)))
    return report, out


def _gain(summary: Any, mode: str, rows: Any) -> Estimate | None:
    """A remote mode's tok/s against local's, repeat by repeat (the modes of a repeat draw the
    same acceptance outcomes, so the pair is the comparison the verdict projects)."""
    if mode == "local":
        return None
    local = summary[(summary["mode"] == "local") & summary["tok_s"].notna()]
    base = dict(zip(local["repeat"], local["tok_s"].astype(float)))
    pairs = [float(t) / base[r] - 1 for r, t in zip(rows["repeat"], rows["tok_s"]) if r in base and base[r] > 0]
    return cell_estimate(pairs) if pairs else None


def _ci(e: Estimate | None, fmt: str = "{:.2f}", rel: bool = False) -> str:
    if e is None:
        return "-"
    f = (lambda v: f"{v:+.2%}") if rel else (lambda v: fmt.format(v))  # noqa: E731
    if not e.has_interval:
        return f(e.value)
    return f"{f(e.value)} [{f(e.lo)}..{f(e.hi)}]"


def _repeats(report: dict, results: list) -> str:
    """The repeats as measured: all of them, or how many of those asked an unfinished spec has."""
    asked = report["config"]["repeats"]
    if report.get("status") in (None, "complete"):
        return f"{asked} repeats"
    each = ", ".join(f"{r.mode} {r.tok_s.n_repeats or 0}" for r in results)
    return f"{report.get('status')}: of {asked} repeats asked, measured {each or 'none'}"


def format_table(report: dict[str, Any], results: list[ModeResult]) -> str:
    cfg = report["config"]
    acc = report["acceptance"]
    lines = [
        f"modelled: verify {report['work']['verify']['spec']}, local draft {report['work']['draft_local']['spec']}, "
        f"remote draft {cfg['draft_remote']} (time scale {cfg['time_scale']:g}); acceptance {acc['spec']} "
        f"(E[tokens/cycle] = {acc['mean_tokens']:.3f}), K = {cfg['k']}, fan-out {cfg['fanout']}",
        f"measured: {cfg['transport']}"
        + (f" with the hidden states encoded by {cfg['codec']} inside the hop ("
           + ("synthetic data" if (report.get("payload_source") or {}).get("synthetic") else
              str((report.get("payload_source") or {}).get("file"))) + ")" if cfg.get("codec", "none") != "none" else "")
        + f" to {report.get('peer') or '-'}; {_repeats(report, results)} x {cfg['cycles']} cycles "
        f"per mode, modes interleaved; tok/s = tokens / time over each repeat; [interval] = "
        + (pct(results[0].tok_s.level) if results and results[0].tok_s.level else "-") + " over repeats",
    ]
    from hopbench.analysis.tables import render

    lines.append(render(["mode", "tok/s", "vs local", "tokens/cycle", "hit rate", "checked against", "its tok/s",
                         "measured/it - 1"],
                        [[r.mode, _ci(r.tok_s), _ci(r.gain, rel=True) if r.gain else "-", f"{r.tokens_per_cycle:.3f}",
                          "-" if r.hit_rate is None else format(r.hit_rate, ".0%"), r.reference or "-",
                          _ci(r.reference_tok_s), _ci(r.diff_rel, rel=True)] for r in results],
                        right={1, 2, 3, 4, 6, 7}))
    lines.append("vs local = a mode's tok/s over local's in the same repeat - 1 (the same acceptance outcomes), "
                 "its [interval] over repeats as tok/s's")
    lines.append("arithmetic (local) = tokens / (t_verify + t_draft_local); projection (sync) = the verdict's model "
                 "with this session's measured hop per T and the remote drafter's time (stream: its exposed hop after "
                 "the forward)")
    return "\n".join(lines)
