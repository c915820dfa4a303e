"""make bench-stream: the streamed hop against the synchronous one, side by side in one session
per transport and rung (docs/STREAM.md).

Two network namespaces joined by a veth pair shaped with tbf (hopbench.orchestration.netem),
the server in one, `hopbench run --stream layers --rate R` in the other, for each rate and
transport. Printed per row: the synchronous T3 hop, the projected payload's (fc on the
target: 3 x 12,288 B) and its ratio to it, the streamed exposed hop and its ratio,
the model's expected exposed hop and the measured/model ratio; then each transport's streamed
hop over tcp's on the same rung. Needs root with iproute2 (ip, tc).

    python3 benchmarks/bench_stream.py [--rates 100,10] [--transports tcp,zmq,ucx] [--cycles 30] [--poll busy]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def one(rate: float, transport: str, cycles: int, poll: str = "auto") -> dict:
    from hopbench.orchestration import netem
    from hopbench.orchestration.serverproc import ready_port

    opts = ["--opt", "UCX_TLS=tcp", "--opt", "NIXL_UCX_TLS=tcp", "--poll", poll]
    with netem.Link.create(rate_mbit=rate) as link:
        srv = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                                                             f"{link.server_addr}:0", *opts],
                               stdout=subprocess.PIPE, text=True)
        try:
            port = ready_port(srv)
            r = subprocess.run(link.exec_prefix("client") + [
                sys.executable, "-m", "hopbench", "run", "--peer", f"{link.server_addr}:{port}", "--stream", "layers",
                "--rate", f"{rate:g}", "--rung", f"emu-{rate:g}m", "--transport", transport, "--cycles", str(cycles),
                "--warmup", "3", "--no-floor", "--json", "--results-dir", "/tmp", *opts],
                capture_output=True, text=True, timeout=1800)
        finally:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:  # a server stuck in its transport's shutdown: it measured already
                srv.kill()
                srv.wait(10)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    rep = json.loads(r.stdout)["report"]
    p50 = {p["payload"]: p["summary"]["p50_ns"] / 1e6 for p in rep["payloads"]}
    s = next(p["summary"] for p in rep["payloads"] if p["payload"] == "T3~layers")
    model = rep.get("stream_model") or {}
    return {"sync": p50["T3"], "streamed": p50["T3~layers"], "small": p50["B64"], "projected": p50["T3#projected"],
            "expected": (model.get("tail_ms") or 0.0) + p50["B64"], "hiding": model.get("hiding_rate_mbit"),
            "n": s["n"], "ci": (s["p50_ci_lo_ns"] / 1e6, s["p50_ci_hi_ns"] / 1e6, s["p50_ci_level"]),
            "folder": json.loads(r.stdout)["folder"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,10")
    ap.add_argument("--transports", default="tcp,zmq,ucx")
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--poll", default="auto", choices=["auto", "block", "busy"],
                    help="both ends' poll mode (busy: the drafter spins in its receive, no wake-up to pay)")
    a = ap.parse_args()
    from hopbench.orchestration import netem

    ok, why = netem.available()
    if not ok:
        sys.exit(f"bench-stream needs network namespaces: {why}")
    print(f"p50s of one run per row, {a.cycles} timed cycles each; the streamed p50's interval is within that run "
          "(order statistics, its level printed): the run-to-run spread is not in it")
    print(f"{'rung':>9} {'transport':>9} {'sync ms':>9} {'projected ms':>12} {'proj/sync':>9} {'streamed ms':>12} "
          f"{'stream/sync':>11} {'model ms':>9} {'meas/model':>10}  least hiding rate  streamed CI")
    for rate in (float(x) for x in a.rates.split(",")):
        rows = {}
        for tr in a.transports.split(","):
            x = rows[tr] = one(rate, tr, a.cycles, a.poll)
            if "error" in x:
                print(f"{f'emu-{rate:g}m':>9} {tr:>9}  failed: {x['error']}")
                continue
            print(f"{f'emu-{rate:g}m':>9} {tr:>9} {x['sync']:9.3f} {x['projected']:12.3f} "
                  f"{x['projected'] / x['sync']:9.3f} {x['streamed']:12.3f} {x['streamed'] / x['sync']:11.3f} "
                  f"{x['expected']:9.3f} {x['streamed'] / x['expected']:10.3f}  {x['hiding']:.1f} Mbit/s  "
                  f"[{x['ci'][0]:.3f}-{x['ci'][1]:.3f}, {x['ci'][2]:.1%}, n = {x['n']}]")
        base = rows.get("tcp")
        if base and "error" not in base:
            print("   streamed hop over tcp's: " + ", ".join(
                f"{tr} {x['streamed'] / base['streamed']:.2f}" for tr, x in rows.items() if "error" not in x))


if __name__ == "__main__":
    main()
