"""make bench-stream: the streamed hop against the synchronous one, side by side in one session
per transport and rung (docs/STREAM.md).

Two network namespaces joined by a veth pair shaped with tbf (hopbench.orchestration.netem),
the server in one, `hopbench run --stream layers --rate R` in the other, for each rate and
transport. Printed per row: the synchronous T3 hop, the projected payload's (fc on the
target: 3 x 12,288 B) and its ratio to it, the streamed exposed hop and its ratio,
the model's expected exposed hop and the measured/model ratio, the empty-chunk hop (the same
schedule with 16-byte chunks, measured in the same session: `B80~layers`) and the streamed
hop over it; then each transport's streamed hop, and its empty-chunk hop, over tcp's on the
same rung. Needs root with iproute2 (ip, tc).

    python3 benchmarks/bench_stream.py [--rates 100,10] [--transports tcp,zmq,ucx] [--cycles 30] [--poll busy]
                                       [--placement free|same|split]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

import numpy as np

from hopbench.estimate import median_text

PLACEMENTS = {"free": (None, None), "same": ("1", "1"), "split": ("1", "0")}  # (server CPU, client CPU)


def one(rate: float, transport: str, cycles: int, poll: str = "auto", placement: str = "free") -> dict:
    """One rung and transport: the streamed run (its session also measures the empty-chunk hop,
    `B80~layers`: the same schedule with 16-byte chunks)."""
    from hopbench.orchestration import netem
    from hopbench.orchestration.serverproc import ready_port

    opts = ["--opt", "UCX_TLS=tcp", "--opt", "NIXL_UCX_TLS=tcp", "--poll", poll]
    server_cpu, client_cpu = PLACEMENTS[placement]
    pin_server = ["--cpu", server_cpu] if server_cpu else []
    pin = ["--cpu", client_cpu] if client_cpu else []
    with netem.Link.create(rate_mbit=rate) as link:
        srv = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                                                             f"{link.server_addr}:0", *opts, *pin_server],
                               stdout=subprocess.PIPE, text=True)
        try:
            port = ready_port(srv)
            with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
                r = subprocess.run(link.exec_prefix("client") + [
                    sys.executable, "-m", "hopbench", "run", "--peer", f"{link.server_addr}:{port}", "--stream",
                    "layers", "--link", f"emu-{rate:g}m,rate={rate:g}", "--transport", transport, "--cycles",
                    str(cycles), "--warmup", "3", "--no-floor", "--json", "--out", f"{tmp}/run", *opts, *pin],
                    capture_output=True, text=True, timeout=1800)
            rep = json.loads(r.stdout)["report"] if r.returncode == 0 else {}
        finally:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:  # a server stuck in its transport's shutdown: it measured already
                srv.kill()
                srv.wait(10)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    p50 = {p["payload"]: p["summary"]["p50_ns"] / 1e6 for p in rep["payloads"]}
    s = next(p["summary"] for p in rep["payloads"] if p["payload"] == "T3~layers")
    model = rep.get("stream_model") or {}
    return {"sync": p50["T3"], "streamed": p50["T3~layers"], "small": p50["B64"], "projected": p50["T3#projected"],
            "expected": (model.get("tail_ms") or 0.0) + p50.get("B80~layers", p50["B64"]),
            "hiding": model.get("hiding_rate_mbit"), "empty": p50.get("B80~layers"), "n": s["n"],
            "ci": (s["p50_ci_lo_ns"] / 1e6, s["p50_ci_hi_ns"] / 1e6, s["p50_ci_level"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,10")
    ap.add_argument("--transports", default="tcp,zmq,ucx")
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3, help="runs per row, interleaved over the transports")
    ap.add_argument("--poll", default="auto", choices=["auto", "block", "busy"],
                    help="both ends' poll mode (busy: the drafter spins in its receive, no wake-up to pay)")
    ap.add_argument("--placement", default="split", choices=sorted(PLACEMENTS),
                    help="free: where the scheduler puts them; same: server and client (and their threads) on CPU 1; "
                         "split: server on CPU 1, client on CPU 0 (on this VM a wake-up across CPUs costs ~100 us)")
    a = ap.parse_args()
    from hopbench.orchestration import netem

    ok, why = netem.available()
    if not ok:
        sys.exit(f"bench-stream needs network namespaces: {why}")
    print(f"placement {a.placement}, poll {a.poll}; {a.repeats} run(s) per row, interleaved over the transports, "
          f"{a.cycles} timed cycles each: the median of the runs' p50s; the streamed and empty-chunk hops, and the "
          "ratios to tcp paired by run, with their distribution-free interval over the runs, its level and n "
          "(3 runs: [min-max], 75%)")
    print(f"{'rung':>9} {'transport':>9} {'sync ms':>9} {'projected ms':>12} {'proj/sync':>9} {'streamed ms':>34} "
          f"{'stream/sync':>11} {'model ms':>9} {'meas/model':>10} {'empty-chunk ms':>34} {'str/empty':>9}  least hiding rate")
    for rate in (float(x) for x in a.rates.split(",")):
        runs: dict[str, list[dict]] = {tr: [] for tr in a.transports.split(",")}
        for _ in range(a.repeats):
            for tr in runs:
                x = one(rate, tr, a.cycles, a.poll, a.placement)
                if "error" in x:
                    print(f"{f'emu-{rate:g}m':>9} {tr:>9}  a run failed: {x['error']}")
                runs[tr].append(x)
        rows = {tr: _median_row([x for x in xs if "error" not in x]) for tr, xs in runs.items()}
        for tr, x in rows.items():
            if x is None:
                continue
            print(f"{f'emu-{rate:g}m':>9} {tr:>9} {x['sync']:9.3f} {x['projected']:12.3f} "
                  f"{x['projected'] / x['sync']:9.3f} {median_text(x['streamed_runs']):>34} {x['streamed'] / x['sync']:11.3f} "
                  f"{x['expected']:9.3f} {x['streamed'] / x['expected']:10.3f} {median_text(x['empty_runs']):>34} "
                  f"{_opt(x['empty'] and x['streamed'] / x['empty'], 9)}  {x['hiding']:.1f} Mbit/s")
        base = runs.get("tcp")
        for key, what in (("streamed", "streamed hop"), ("empty", "empty-chunk hop (the accept count and ids after a "
                                                                   "forward's quiet)")):
            paired = {tr: _paired(xs, base or [], key) for tr, xs in runs.items() if tr != "tcp"}
            if any(paired.values()):
                print(f"   {what} over tcp's, paired by run: " + ", ".join(
                    f"{tr} {median_text(r, '.2f')}" for tr, r in paired.items() if r))


def _median_row(xs: list[dict]) -> dict | None:
    """The runs' medians per column; the streamed hop's and the empty-chunk hop's runs kept for
    their interval."""
    if not xs:
        return None
    out: dict = {k: float(np.median([x[k] for x in xs])) for k in ("sync", "projected", "streamed", "expected",
                                                                   "hiding")}
    empties = [x["empty"] for x in xs if x.get("empty")]
    out["empty"] = float(np.median(empties)) if empties else None
    out["streamed_runs"], out["empty_runs"] = [x["streamed"] for x in xs], empties
    return out


def _paired(xs: list[dict], base: list[dict], key: str) -> list[float]:
    """Per run, this transport's value over tcp's of the same round (both measured, no error)."""
    return [x[key] / b[key] for x, b in zip(xs, base) if "error" not in x and "error" not in b and x.get(key)
            and b.get(key)]


def _opt(v: float | None, width: int) -> str:
    return f"{v:{width}.3f}" if v else f"{'-':>{width}}"


if __name__ == "__main__":
    main()
