"""The wheel as a user installs it (`make wheel-check`, run by `make test`).

Builds the wheel from this checkout, checks what is in it against the source tree (every
module of hopbench/ and transports/, every config of configs/, one top-level name), installs
it (not editable) with its extras into a fresh venv, and from a directory outside the
checkout runs: `hopbench --version`, `transports`, `verdict --hop-ms`, `serve` + `run` on
loopback, `fit` on that run, a small loopback `sweep --quick` from a config file written
there, and an import of every installed module (hopbench.testing.conformance among them).

Exits non-zero naming the first thing that is wrong. `--keep DIR` leaves the venv there.
`--leave-out PATH` builds the wheel with one source file or folder removed (a copy of the
checkout): the check must then fail, which is how it is shown to catch a missing piece.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from hopbench.core.transport import installed
from hopbench.orchestration.serverproc import parse_ready

ROOT = Path(__file__).resolve().parent.parent
#: the wheel's venv takes every registered transport's extra (each module of the wheel must
#: import there, every transport's included) and the analysis', plots' and codecs' extras
EXTRAS = ",".join(sorted({r.extra for r in installed() if r.extra}) + ["analysis", "plot", "codecs"])
# source folder -> its installed package path inside the wheel
MAPPED = {"hopbench": "hopbench", "transports": "hopbench/transports", "configs": "hopbench/configs"}


class Failed(Exception):
    pass


def sh(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
        raise Failed(f"`{' '.join(map(str, cmd))}` exited {proc.returncode}:\n    " + "\n    ".join(tail))
    return proc.stdout


def expected_files(src: Path) -> set[str]:
    """What the wheel must hold: every .py of the mapped folders and every config .toml."""
    want: set[str] = set()
    for folder, dest in MAPPED.items():
        for f in (src / folder).rglob("*"):
            if "__pycache__" in f.parts or not f.is_file():
                continue
            if f.suffix == ".py" or (folder == "configs" and f.suffix == ".toml"):
                want.add(f"{dest}/{f.relative_to(src / folder).as_posix()}")
    return want


def build_wheel(src: Path, dist: Path) -> Path:
    sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)], cwd=dist)
    wheels = sorted(dist.glob("hopbench-*.whl"))
    if len(wheels) != 1:
        raise Failed(f"expected one wheel in {dist}, found {[w.name for w in wheels]}")
    return wheels[0]


def check_contents(wheel: Path, src: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    if tops != {"hopbench"}:
        raise Failed(f"the wheel installs top-level names {sorted(tops)}; only 'hopbench' is allowed")
    missing = sorted(expected_files(src) - names)
    if missing:
        raise Failed(f"the wheel leaves out {len(missing)} file(s) of the checkout: {', '.join(missing[:8])}")
    eps = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
    text = zipfile.ZipFile(wheel).read(eps).decode() if eps else ""
    if "[hopbench.transports]" not in text:
        raise Failed("the wheel declares no hopbench.transports entry points (the transport registry)")


def run_outside(venv: Path, work: Path, log) -> None:
    hb = str(venv / "bin" / "hopbench")
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"

    def hop(*args: str, timeout: float = 300) -> str:
        out = sh([hb, *args], cwd=work, env=env, timeout=timeout)
        log(f"  ok: hopbench {' '.join(args)}")
        return out

    hop("--version")
    out = hop("transports")
    for name in ("tcp", "zmq", "ucx", "nixl"):
        if not any(line.split()[:2] == [name, "available"] for line in out.splitlines()):
            raise Failed(f"`hopbench transports` does not list {name} as available:\n{out}")
    if "fake" in out:
        raise Failed("`hopbench transports` lists the test transport 'fake'")
    hop("verdict", "--hop-ms", "lab=1.713")

    server = subprocess.Popen([hb, "serve", "--bind", "127.0.0.1:0", "--once"], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        assert server.stdout is not None
        for _ in range(50):
            line = server.stdout.readline()
            if not line:
                break
            got = parse_ready(line)
            if got:
                port = got[1]
                break
        if port is None:
            raise Failed(f"`hopbench serve` did not report ready: {server.stderr.read() if server.stderr else ''}")
        out = hop("run", "--peer", f"127.0.0.1:{port}", "--tokens", "1,3,8", "--cycles", "50", "--results-dir", "results")
    finally:
        server.terminate()
        server.wait(timeout=30)
    runs = sorted((work / "results").glob("*/report.json"))
    if len(runs) != 1:
        raise Failed(f"`hopbench run` wrote {len(runs)} result folders under {work / 'results'}")
    hop("fit", str(runs[0].parent))

    (work / "my-sweep.toml").write_text(
        '[sweep]\nname = "wheel-check"\nrungs = ["loopback"]\ntransports = ["tcp", "zmq", "ucx"]\n'
        "tokens = [1, 3]\nk = 2\nbytes_min = 64\nbytes_max = 65536\nbytes_points = 3\nrepeats = 2\n"
        "cell_budget_s = 0.02\nmin_cycles = 5\nmax_cycles = 100\nwarmup = 2\nseed = 7\ngaps_ms = [0]\n"
        'operating_tokens = 3\nplacements = ["unpinned-block"]\n'
        "[quick]\nrepeats = 2\n")
    hop("sweep", "my-sweep.toml", "--quick", "--results-dir", "sweeps", timeout=600)

    code = ("import importlib, pkgutil, hopbench, hopbench.testing.conformance\n"
            "bad = []\n"
            "for m in pkgutil.walk_packages(hopbench.__path__, 'hopbench.'):\n"
            "    if m.name.endswith(('_native', '__main__')): continue\n"
            "    try: importlib.import_module(m.name)\n"
            "    except ImportError as e:\n"
            "        if 'cupy' not in str(e): bad.append(f'{m.name}: {e}')\n"
            "assert not bad, bad\n"
            "import importlib.util as u; assert u.find_spec('transports') is None, 'a top-level transports is importable'\n"
            "print('imported', sum(1 for _ in pkgutil.walk_packages(hopbench.__path__, 'hopbench.')), 'modules')\n")
    log("  " + sh([py, "-c", code], cwd=work, env=env).strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="build and install here and keep it")
    ap.add_argument("--leave-out", help="a path of the checkout to remove from a copy before building (must fail)")
    args = ap.parse_args()
    t0 = time.monotonic()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="hopbench-wheel-"))
    tmp.mkdir(parents=True, exist_ok=True)
    log = print
    try:
        src = ROOT
        if args.leave_out:
            src = tmp / "src"
            shutil.rmtree(src, ignore_errors=True)
            shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "results", "build", "*.egg-info",
                                                                     "__pycache__", "*.so"))
            victim = src / args.leave_out
            shutil.rmtree(victim) if victim.is_dir() else victim.unlink()
            log(f"wheel-check: built from a copy without {args.leave_out} (this check must fail)")
        dist = tmp / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        dist.mkdir()
        wheel = build_wheel(src, dist)
        log(f"wheel-check: built {wheel.name}")
        # contents are checked against the real checkout: a file missing from the build is caught
        check_contents(wheel, ROOT)
        log("  ok: one top-level name (hopbench), every module and config of the checkout, the transport entry points")
        venv = tmp / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", str(venv)], cwd=tmp)
        sh([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[{EXTRAS}]"], cwd=tmp)
        log(f"  ok: installed {wheel.name}[{EXTRAS}] into a fresh venv (not editable)")
        # nixl as `hopbench transports` tells a user to install it (its wheel declares torch: --no-deps)
        from hopbench.transports import NIXL

        line = NIXL.install_line() or ""
        sh([str(venv / "bin" / "python"), "-m", *line.split()[:1], *[a.strip("'") for a in line.split()[1:]]], cwd=tmp)
        log(f"  ok: {line}")
        work = tmp / "elsewhere"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        run_outside(venv, work, log)
    except (Failed, subprocess.TimeoutExpired) as exc:
        print(f"wheel-check FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"wheel-check passed in {time.monotonic() - t0:.0f} s (outside the checkout: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
