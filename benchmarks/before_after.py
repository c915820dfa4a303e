"""Benchmark (not a test): one benchmark run from an earlier commit's build and from this
checkout, alternated round by round (before, now, before, now, ...), so what a change costs is
read beside the run-to-run spread of the same benchmark in the same session.

    python benchmarks/before_after.py --before 61620e7 --rounds 6 core [-- ARGS]
    python benchmarks/before_after.py --before 61620e7 --rounds 3 stream -- --rates 100
    python benchmarks/before_after.py --before 61620e7 native -- --places loopback

`core` is bench_core.py (hopbench's TCP p50 beside a minimal socket ping-pong), `stream`
bench_stream.py (the streamed and synchronous hops on emulated rungs; root). Each side runs
its own code end to end: the earlier commit is built into a wheel (a git worktree and `pip
wheel --no-build-isolation`, or `--wheel` for one built elsewhere), installed with --target
into a temporary folder, and its own benchmark script runs from a copy outside any checkout
with that folder on PYTHONPATH. Printed per row of the benchmark's table: each side's median
over the rounds of the row's figures and the rounds' paired now/before ratios,
each with its distribution-free interval, achieved level and n. `native` hands the earlier
build to bench_native.py's own `--before`, which interleaves its runs itself."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _core_rows(out: str) -> dict[tuple[str, ...], dict[str, float]]:
    """bench_core's table: per size N, hopbench's p50 (us) and its ratio to the minimal ping-pong."""
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    for m in re.finditer(r"^\s*(\d+)\s+([\d.]+) \[[^\]]*\]\s+([\d.]+) \[[^\]]*\]\s+([\d.]+)\s*$", out, re.M):
        rows[(m[1],)] = {"hopbench us": float(m[2]), "minimal us": float(m[3]), "ratio": float(m[4])}
    return rows


def _stream_rows(out: str) -> dict[tuple[str, ...], dict[str, float]]:
    """bench_stream's table: per rung and transport, the synchronous and the streamed hop (ms)."""
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    for m in re.finditer(r"^\s*(emu-\S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)", out, re.M):
        rows[(m[1], m[2])] = {"sync ms": float(m[3]), "projected ms": float(m[4]), "streamed ms": float(m[5])}
    return rows


BENCHES = {"core": ("bench_core.py", _core_rows), "stream": ("bench_stream.py", _stream_rows)}


def build_before(rev: str, work: Path, wheel: Path | None, scripts: bool) -> Path:
    """The earlier commit installed into work/site (from `wheel`, or built from a worktree)
    and, with `scripts`, its benchmarks copied to work/run/benchmarks; returns the site folder."""
    site, run = work / "site", work / "run"
    if wheel is None:
        tree = work / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], cwd=ROOT, check=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(work / "wheel"), str(tree)], check=True)
            run.mkdir()
            subprocess.run(["cp", "-r", str(tree / "benchmarks"), str(run / "benchmarks")], check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        wheel = next((work / "wheel").glob("hopbench-*.whl"))
    elif scripts:
        with open(work / "b.tar", "wb") as tar:
            subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "--prefix=run/", rev, "benchmarks"],
                           stdout=tar, check=True)
        subprocess.run(["tar", "-xf", str(work / "b.tar"), "-C", str(work)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    return site


def wrapper(site: Path, work: Path) -> Path:
    """A `python` that imports the earlier build (bench_native's --before)."""
    py = work / "python-before"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    return py


def one(side: str, script: str, site: Path, work: Path, args: list[str]) -> str:
    import os

    if side == "before":
        cmd, cwd = [sys.executable, str(work / "run" / "benchmarks" / script), *args], work / "run"
        env = {**os.environ, "PYTHONPATH": str(site)}
    else:
        cmd, cwd, env = [sys.executable, str(ROOT / "benchmarks" / script), *args], ROOT, dict(os.environ)
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit(f"{side}: {script} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-400:]}")
    return p.stdout


def report(runs: dict[str, list[dict]]) -> None:
    """Per row and figure: each side's median over the rounds with its distribution-free
    interval, achieved level and n (hopbench.estimate.median_text), and the rounds' paired
    now/before ratios the same way (round i's now against round i's before)."""
    from hopbench.estimate import median_text

    keys = [k for k in runs["now"][0] if all(k in r for side in runs.values() for r in side)]
    if not keys:
        raise SystemExit("no row of the table is in every round of both sides")
    print(f"{'row':20s} {'figure':12s} {'before':>34s} {'now':>34s} {'now/before, paired by round':>36s}")
    for key in keys:
        for fig in runs["now"][0][key]:
            before = [r[key][fig] for r in runs["before"]]
            now = [r[key][fig] for r in runs["now"]]
            ratios = [n / b for n, b in zip(now, before) if b]
            print(f"{' '.join(key):20s} {fig:12s} {median_text(before):>34s} {median_text(now):>34s} "
                  f"{median_text(ratios):>36s}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", choices=[*BENCHES, "native"])
    ap.add_argument("args", nargs="*", help="after --: the benchmark's own arguments")
    ap.add_argument("--before", default="61620e7", help="the earlier commit (default: REVIEW5's tree)")
    ap.add_argument("--wheel", type=Path, help="the earlier commit's wheel, built elsewhere")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of (before, now)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hopbench-before-") as tmp:
        work = Path(tmp)
        site = build_before(a.before, work, a.wheel, a.bench != "native")
        if a.bench == "native":
            sys.exit(subprocess.call([sys.executable, str(ROOT / "benchmarks" / "bench_native.py"),
                                      "--before", str(wrapper(site, work)), *a.args], cwd=ROOT))
        script, parse = BENCHES[a.bench]
        runs: dict[str, list[dict]] = {"before": [], "now": []}
        print(f"{script}: {a.rounds} rounds of (before = {a.before}, now = this checkout), alternated; "
              f"args {' '.join(a.args) or '(defaults)'}", flush=True)
        for i in range(a.rounds):
            for side in ("before", "now") if i % 2 == 0 else ("now", "before"):
                rows = parse(one(side, script, site, work, a.args))
                if not rows:
                    raise SystemExit(f"{side}: no table rows in {script}'s output")
                runs[side].append(rows)
            print(f"  round {i + 1}/{a.rounds} done", flush=True)
        report(runs)


if __name__ == "__main__":
    main()
