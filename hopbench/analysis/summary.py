"""The sweep's summary.csv: one row per cell, the cell estimate every analysis command
uses (hopbench.estimate) plus the spread across repeats."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hopbench.errors import HopbenchError

AGG_COLUMNS = ["rung", "transport", "payload", "tokens", "request_bytes", "reply_bytes", "gap_ms", "repeats",
               "n", "p50_ns", "p50_ci_lo_ns", "p50_ci_hi_ns", "p50_ci_level", "p50_ci_scope", "p50_rep_min_ns",
               "p50_rep_max_ns", "spread_rel", "rate_mbit",
               # tidy: the series' parts beside its label (`transport` is the label, "tcp+fp8@4")
               "base_transport", "codec", "design", "stream", "clients"]


def aggregate(folder: Path) -> list[dict]:
    """Per (rung, transport, payload, gap): the cell estimate every analysis command uses
    (hopbench.estimate: median of repeat medians, order-statistic CI over repeats with its
    achieved level: 75% at 3 repeats, 93.75% at 5), plus the spread across repeats. Reads
    the cells with the same loader the analysis commands use."""
    from hopbench.analysis.data import load_groups

    try:
        groups, _ = load_groups(folder)
    except HopbenchError:  # nothing complete yet (an early interruption)
        return []
    rows = []
    for g in groups:
        e = g.estimate()
        p50s = np.sort(np.array(g.repeat_p50_ns, dtype=float))
        rows.append({"rung": g.rung, "transport": g.transport, "payload": g.payload, "tokens": g.tokens,
                     "request_bytes": g.request_bytes, "reply_bytes": g.reply_bytes, "gap_ms": g.gap_ms,
                     "repeats": e.n_repeats, "n": e.n_samples, "p50_ns": e.value, "p50_ci_lo_ns": e.lo,
                     "p50_ci_hi_ns": e.hi, "p50_ci_level": e.level, "p50_ci_scope": e.scope,
                     "p50_rep_min_ns": float(p50s[0]), "p50_rep_max_ns": float(p50s[-1]),
                     "spread_rel": float((p50s[-1] - p50s[0]) / e.value) if e.value else 0.0,
                     "rate_mbit": g.rate_mbit, "base_transport": g.series.transport, "codec": g.series.codec,
                     "design": g.series.design, "stream": g.series.stream, "clients": g.series.clients})
    return rows
