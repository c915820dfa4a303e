"""Results as tidy pandas DataFrames (the `analysis` extra), for notebooks and scripts:

    import hopbench
    f = hopbench.load("results/20261203T...-sweep-default-default")
    f.cells.groupby(["rung", "transport"])["p50_ms"].min()

- `cycles`: one row per timed round trip (rung, transport, payload, tokens, request_bytes,
  reply_bytes, gap_ms, repeat, seq, rtt_ns);
- `cells`: one row per cell, the estimate every command uses (hopbench.estimate), with its
  interval, level, scope, repeats and cycles;
- `fits`: one row per rung x transport, the alpha-beta fit with CIs and the regime.
Reads run and sweep folders of every schema version (tests/golden), and `hopbench spec`
folders: there `cycles` is its cycles.csv (one row per decode cycle: mode, repeat, ...),
`cells` one row per mode with tok/s and its interval over repeats, `fits` empty."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopbench.analysis.data import load_groups, recorded_shape
from hopbench.errors import ConfigError, HopbenchError


@dataclass
class Frames:
    cycles: Any  # pandas.DataFrame
    cells: Any
    fits: Any
    top: dict[str, Any]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ConfigError("hopbench.load needs pandas: pip install 'hopbench[analysis]'") from None
    return pandas


def _spec_frames(path: str | Path) -> Frames | None:
    """A `hopbench spec` folder as Frames (None: not one)."""
    from hopbench import results as R
    from hopbench.analysis import spec as AS

    try:
        header = R.ResultFolder(path).read_header()
    except (OSError, ValueError, HopbenchError):
        return None
    if not isinstance(header, R.SpecReport):
        return None
    pd = _pandas()
    report, cycles, _ = AS.load(path)
    _, modes = AS.analyse(path)
    cells = [{"mode": m.mode, "tok_s": m.tok_s.value, "ci_lo": m.tok_s.lo, "ci_hi": m.tok_s.hi, "ci_level": m.tok_s.level,
              "repeats": m.tok_s.n_repeats, "tokens_per_cycle": m.tokens_per_cycle, "hit_rate": m.hit_rate}
             for m in modes]
    return Frames(cycles, pd.DataFrame(cells), pd.DataFrame(), report)


def load(path: str | Path, bytes_per_token: int | None = None, operating_tokens: int | None = None) -> Frames:
    pd = _pandas()
    from hopbench.analysis import fit as F

    spec = _spec_frames(path)
    if spec is not None:
        return spec

    groups, top = load_groups(path)
    bpt, op = recorded_shape(path, bytes_per_token, operating_tokens)
    cyc, cells = [], []
    for g in groups:
        base = {"rung": g.rung, "transport": g.transport, "payload": g.payload, "tokens": g.tokens,
                "request_bytes": g.request_bytes, "reply_bytes": g.reply_bytes, "gap_ms": g.gap_ms}
        for rid, samples in zip(g.repeat_ids, g.samples):
            for seq, rtt in enumerate(samples.tolist()):
                cyc.append({**base, "repeat": rid, "seq": seq, "rtt_ns": rtt})
        e = g.estimate()
        cells.append({**base, "rate_mbit": g.rate_mbit, "repeats": e.n_repeats, "n": e.n_samples,
                      "p50_ms": e.value / 1e6, "ci_lo_ms": None if e.lo is None else e.lo / 1e6,
                      "ci_hi_ms": None if e.hi is None else e.hi / 1e6, "ci_level": e.level, "ci_scope": e.scope})
    fits = []
    for f in F.fit_groups(groups, bpt, op):
        fits.append({"rung": f.rung, "transport": f.transport, "alpha_us": f.alpha_s * 1e6,
                     "alpha_ci_lo_us": f.alpha_ci[0] * 1e6, "alpha_ci_hi_us": f.alpha_ci[1] * 1e6,
                     "beta_mbit_s": f.beta_Bps * 8 / 1e6, "beta_ci_lo_mbit_s": f.beta_ci[0] * 8 / 1e6,
                     "beta_ci_hi_mbit_s": f.beta_ci[1] * 8 / 1e6, "ci_level": f.ci_level, "ci_scope": f.ci_scope,
                     "repeats": f.n_repeats, "breakpoint_bytes": f.breakpoint_bytes, "regime": f.regime,
                     "share_bandwidth": f.share_bandwidth})
    return Frames(pd.DataFrame(cyc), pd.DataFrame(cells), pd.DataFrame(fits), top)
