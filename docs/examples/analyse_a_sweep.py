"""A notebook-style example: load a sweep with hopbench.load, group with pandas, plot.

    python docs/examples/analyse_a_sweep.py RESULTS_FOLDER [OUT.png]

(tests/test_frames.py runs it on the golden sweep folder.)"""

import sys
from pathlib import Path

import hopbench

folder = Path(sys.argv[1])
out = Path(sys.argv[2]) if len(sys.argv) > 2 else folder / "example.png"

f = hopbench.load(folder)

# the hop per rung x transport at each token count, with its interval and level
hop = (f.cells[f.cells.tokens.notna()]
       .groupby(["rung", "transport", "tokens"])[["p50_ms", "ci_lo_ms", "ci_hi_ms", "ci_level", "repeats"]]
       .first())
print(hop.to_string())

# every round trip: the spread per payload (pandas describe)
print(f.cycles.groupby(["transport", "payload"])["rtt_ns"].describe()[["count", "50%", "max"]].to_string())

# the alpha-beta fit as a table
print(f.fits[["rung", "transport", "alpha_us", "beta_mbit_s", "ci_level", "regime"]].to_string(index=False))

# a plot: median round trip against request size per transport
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots()
for tr, g in f.cells.groupby("transport"):
    g = g.sort_values("request_bytes")
    ax.plot(g.request_bytes, g.p50_ms * 1e3, "o-", label=tr)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("request bytes")
ax.set_ylabel("median round trip (us)")
ax.legend()
fig.savefig(out)
print(f"plot: {out}")
