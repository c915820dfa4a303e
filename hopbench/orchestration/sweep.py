"""`hopbench sweep`: link rungs x transports x payloads (x think-time gaps), repeated R
times in an interleaved random order (recorded seed), so machine drift shows up as
spread across repeats, not as bias between cells.

Per rung: an emulated link (hopbench.netem) or loopback or a real peer; one long-lived
`hopbench serve` in the server namespace and one agent (hopbench.agent) in the client
namespace. Each cell is one session and one result folder under cells/; a cell whose
report says "complete" is never measured again, so re-running resumes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench.orchestration import netem
from hopbench import results as R
from hopbench.config import CONFIG_DIR, check_keys, load_toml, require
from hopbench.errors import ConfigError, HopbenchError, TransportUnavailable
from hopbench.shape import Shape, log_grid
from hopbench.orchestration.serverproc import parse_ready
from hopbench.core.transport import get_transport

SWEEP_SCHEMA = "hopbench.sweep"
RUNG_KEYS = {"name", "kind", "transports", "rate_mbit", "mtu", "peer", "interface", "bytes_max", "ucx", "zmq",
             "placement"}
SWEEP_KEYS = {"name", "rungs", "transports", "tokens", "k", "bytes_min", "bytes_max", "bytes_points", "repeats",
              "cell_budget_s", "min_cycles", "max_cycles", "warmup", "seed", "gaps_ms", "operating_tokens",
              "placements"}
WIRE_PER_MSS = 1538 / 1448  # Ethernet frame on the wire (incl. preamble, IFG) per TCP MSS at MTU 1500


@dataclass(frozen=True)
class Rung:
    name: str
    kind: str  # loopback | emulated | real
    transports: tuple[str, ...]
    rate_mbit: float | None = None
    mtu: int = 1500
    peer: str | None = None
    interface: str | None = None
    bytes_max: int | None = None
    ucx: dict = field(default_factory=dict)
    zmq: dict = field(default_factory=dict)
    placement: str | None = None  # pins this rung to one placement (e.g. "split-busy")
    path: str = ""

    def settings(self) -> dict[str, dict]:
        return {k: v for k, v in (("ucx", dict(self.ucx)), ("zmq", dict(self.zmq))) if v}


def load_rung(name: str) -> Rung:
    path = Path(name) if name.endswith(".toml") else CONFIG_DIR / "rungs" / f"{name}.toml"
    data = load_toml(path, allowed={"rung"})
    f = str(path)
    r = require(data, "rung", dict, f)
    check_keys(r, RUNG_KEYS, f, "rung.")
    kind = require(r, "kind", str, f, "rung.")
    if kind not in ("loopback", "emulated", "real"):
        raise ConfigError(f"{f}: rung.kind must be loopback, emulated or real (got {kind!r})")
    if kind == "real" and "peer" not in r:
        raise ConfigError(f"{f}: a real rung needs rung.peer (HOST:PORT of its hopbench serve)")
    return Rung(name=require(r, "name", str, f, "rung."), kind=kind,
                transports=tuple(require(r, "transports", list, f, "rung.")),
                rate_mbit=r.get("rate_mbit"), mtu=r.get("mtu", 1500), peer=r.get("peer"),
                interface=r.get("interface"), bytes_max=r.get("bytes_max"), ucx=r.get("ucx", {}),
                zmq=r.get("zmq", {}), placement=r.get("placement"), path=f)


@dataclass(frozen=True)
class SweepConfig:
    name: str
    rungs: tuple[str, ...]
    transports: tuple[str, ...]
    tokens: tuple[int, ...]
    k: int
    bytes_min: int
    bytes_max: int
    bytes_points: int
    repeats: int
    cell_budget_s: float
    min_cycles: int
    max_cycles: int
    warmup: int
    seed: int
    gaps_ms: tuple[float, ...]
    operating_tokens: int
    placements: tuple[str, ...] = ("auto",)
    path: str = ""
    profile: str = "default"


def load_sweep(path: str | Path, quick: bool = False) -> SweepConfig:
    path = Path(path)
    data = load_toml(path, allowed={"sweep", "quick"})
    f = str(path)
    s = dict(require(data, "sweep", dict, f))
    check_keys(s, SWEEP_KEYS, f, "sweep.")
    if quick:
        q = data.get("quick", {})
        check_keys(q, SWEEP_KEYS, f, "quick.")
        s.update(q)
    try:
        cfg = SweepConfig(
            name=s["name"], rungs=tuple(s["rungs"]), transports=tuple(s["transports"]), tokens=tuple(s["tokens"]),
            k=int(s["k"]), bytes_min=int(s["bytes_min"]), bytes_max=int(s["bytes_max"]),
            bytes_points=int(s["bytes_points"]), repeats=int(s["repeats"]), cell_budget_s=float(s["cell_budget_s"]),
            min_cycles=int(s["min_cycles"]), max_cycles=int(s["max_cycles"]), warmup=int(s["warmup"]),
            seed=int(s["seed"]), gaps_ms=tuple(float(g) for g in s["gaps_ms"]),
            operating_tokens=int(s["operating_tokens"]), placements=tuple(s.get("placements", ["auto"])),
            path=f, profile="quick" if quick else "default")
    except KeyError as exc:
        raise ConfigError(f"{f}: missing key sweep.{exc.args[0]}") from None
    if cfg.repeats < 1:
        raise ConfigError(f"{f}: sweep.repeats must be >= 1")
    return cfg


@dataclass(frozen=True)
class Cell:
    rung: str
    transport: str
    payload: str
    tokens: int | None
    request_bytes: int
    reply_bytes: int
    gap_ms: float
    repeat: int
    placement: str = ""  # set when several placements are swept: part of the rung label

    @property
    def label(self) -> str:
        """The rung as analysis sees it: one per rung x placement when placements vary."""
        return f"{self.rung}@{self.placement}" if self.placement else self.rung

    @property
    def key(self) -> str:
        return f"{self.label}/{self.transport}/{self.payload}-g{self.gap_ms:g}/r{self.repeat}"


def plan_cells(cfg: SweepConfig, rungs: list[Rung], shape: Shape, seed: int,
               placements: list[str] | None = None) -> list[Cell]:
    """All cells, repeat by repeat, each repeat's cells in a seeded random order. With more
    than one placement, every placement is an axis like the others."""
    per_repeat: list[Cell] = []
    many = bool(placements and len(placements) > 1)

    def axis(r: Rung) -> list[str]:
        if r.placement:  # the rung's own placement wins over the sweep's list
            return [r.placement]
        return list(placements) if many else [""]

    for rung, pl in ((r, p) for r in rungs for p in axis(r)):
        grid = log_grid(cfg.bytes_min, min(cfg.bytes_max, rung.bytes_max or cfg.bytes_max), cfg.bytes_points)
        for tr in cfg.transports:
            if tr not in rung.transports:
                continue
            payloads = [(f"T{t}", t, shape.request_bytes(t)) for t in cfg.tokens]
            payloads += [(f"B{b}", None, b) for b in grid]
            for label, tokens, nbytes in payloads:
                for gap in cfg.gaps_ms:
                    if gap and tokens != cfg.operating_tokens:
                        continue  # think time is measured at the operating payload only
                    per_repeat.append(Cell(rung.name, tr, label, tokens, nbytes, shape.reply_bytes(cfg.k), gap, 0, pl))
    rng = random.Random(seed)
    cells = []
    for rep in range(cfg.repeats):
        batch = [replace(c, repeat=rep) for c in per_repeat]
        rng.shuffle(batch)
        cells.extend(batch)
    return cells


def cycles_for(cell: Cell, rung: Rung, cfg: SweepConfig) -> int:
    """Timed cycles: about cell_budget_s of work, clamped to [min_cycles, max_cycles].
    The round trip is estimated from the wire time at the rung's rate (plus think time)."""
    est = 100e-6 + cell.gap_ms / 1000
    if rung.rate_mbit:
        est += (cell.request_bytes + cell.reply_bytes) * WIRE_PER_MSS * 8 / (rung.rate_mbit * 1e6)
    else:
        est += cell.request_bytes / 1e9  # ~8 Gbit/s through a veth or loopback
    return int(min(cfg.max_cycles, max(cfg.min_cycles, math.ceil(cfg.cell_budget_s / est))))


class _Proc:
    """A child process whose stdout lines we read with a timeout (no sleeps)."""

    def __init__(self, cmd: list[str], log_path: Path, stdin: bool = False):
        self.log = open(log_path, "a")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     start_new_session=True)

    def readline(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise HopbenchError(f"no answer from `{' '.join(self.proc.args[-6:])}` within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise HopbenchError(f"`{' '.join(self.proc.args[-6:])}` exited (code {self.proc.poll()}); see {self.log.name}")
        return line

    def drain_to_log(self) -> None:
        def pump():
            for line in self.proc.stdout:
                self.log.write(line)
                self.log.flush()
        threading.Thread(target=pump, daemon=True).start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.log.close()


class RungRuntime:
    """Link + server + agent for one rung; stop() tears all of it down."""

    def __init__(self, rung: Rung, logs: Path, place=None):
        self.place = place  # hopbench.placement.Placement or None
        self.rung = rung
        self.logs = logs
        self.link: netem.Link | None = None
        self.server: _Proc | None = None
        self.agent: _Proc | None = None
        self.host = "127.0.0.1"
        self.port = 0

    def start(self) -> None:
        rung, py = self.rung, [sys.executable, "-m"]
        client_prefix: list[str] = []
        if rung.kind == "emulated":
            self.link = netem.Link.create(rate_mbit=rung.rate_mbit, mtu=rung.mtu)
            client_prefix = self.link.exec_prefix("client")
            self.host = self.link.server_addr
        if rung.kind == "real":
            from hopbench.cli import parse_hostport

            self.host, self.port = parse_hostport(rung.peer)
        else:
            self.start_server()
        pin = ["taskset", "-c", self.place.client_cpu] if self.place and self.place.client_cpu else []
        tag = rung.name + (f"@{self.place.name}" if self.place else "")
        self.agent = _Proc(client_prefix + pin + py + ["hopbench.orchestration.agent"], self.logs / f"agent-{tag}.log", stdin=True)

    def start_server(self) -> None:
        prefix = self.link.exec_prefix("server") if self.link else []
        opts = [f"--opt={k}={v}" for s in self.rung.settings().values() for k, v in s.items()]
        if self.place:
            opts += ["--poll", self.place.poll] + (["--cpu", self.place.server_cpu] if self.place.server_cpu else [])
        tag = self.rung.name + (f"@{self.place.name}" if self.place else "")
        self.server = _Proc(prefix + [sys.executable, "-m", "hopbench", "serve", "--bind", f"{self.host}:0", *opts],
                            self.logs / f"server-{tag}.log")
        line = self.server.readline(60)
        while line and not parse_ready(line):  # a library's warnings before the ready line
            line = self.server.readline(60)
        if not parse_ready(line):
            raise HopbenchError(f"the server of rung {tag} did not report ready (see {self.logs}/server-{tag}.log)")
        self.port = parse_ready(line)[1]
        self.server.drain_to_log()

    def server_died(self) -> bool:
        """True (and a fresh server started) when our local server is gone."""
        if self.server is None or self.server.proc.poll() is None:
            return False
        self.server.stop()
        self.start_server()
        return True

    def run_cell(self, job: dict, timeout: float) -> dict:
        assert self.agent is not None
        job = {**job, "host": self.host, "port": self.port}
        self.agent.proc.stdin.write(json.dumps(job) + "\n")
        self.agent.proc.stdin.flush()
        return json.loads(self.agent.readline(timeout))

    def describe(self) -> dict:
        d = {**asdict(self.rung), "server": f"{self.host}:{self.port}",
             "placement": self.place.describe() if self.place else None}
        if self.link:
            d["link"] = self.link.describe()
        return d

    def stop(self) -> None:
        for p in (self.agent, self.server):
            if p is not None:
                p.stop()
        if self.link is not None:
            self.link.destroy()


def _fingerprint(cfg: SweepConfig) -> str:
    d = asdict(cfg)
    d.pop("path")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def find_resumable(root: Path, cfg: SweepConfig) -> Path | None:
    """The newest unfinished sweep folder of this exact config, if any."""
    fp = _fingerprint(cfg)
    for sweep_json in sorted(Path(root).glob(f"*-sweep-{cfg.name}-{cfg.profile}/sweep.json"), reverse=True):
        try:
            rep = json.loads(sweep_json.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if rep.get("fingerprint") == fp and rep.get("status") != "complete":
            return sweep_json.parent
    return None


def cell_done(folder: Path) -> bool:
    try:
        return json.loads((folder / "report.json").read_text()).get("status") == "complete"
    except (OSError, json.JSONDecodeError):
        return False


def missing_requirements(cfg: SweepConfig, rungs: list[Rung], analyse: bool) -> tuple[list[str], set[str]]:
    """What this sweep needs and this machine lacks: one line each with the exact install
    command, and the transports that are missing. Checked before anything is measured."""
    from hopbench.core.transport import REGISTRY, install_line

    lines: list[str] = []
    missing_tr: set[str] = set()
    wanted = [t for t in cfg.transports if any(t in r.transports for r in rungs)]
    for t in wanted:
        try:
            get_transport(t)
        except TransportUnavailable:
            missing_tr.add(t)
            extra = REGISTRY[t].extra
            lines.append(f"transport {t} is not installed: {install_line(extra) if extra else 'see docs/TRANSPORTS.md'}")
        except HopbenchError as exc:
            missing_tr.add(t)
            lines.append(f"transport {t}: {exc}")
    if analyse:
        import importlib.util

        for mod, extra, what in (("matplotlib", "plot", "the plots"), ("scipy", "analysis", "fit and verdict")):
            if importlib.util.find_spec(mod) is None:
                lines.append(f"{what} need {mod}: {install_line(extra)} (or --no-analyse)")
    if any(r.kind == "emulated" for r in rungs) and os.geteuid() == 0:
        for tool, pkg, why in (("ip", "iproute2", "network namespaces"), ("tc", "iproute2", "the tbf shaper"),
                               ("ethtool", "ethtool", "veth offloads (left on, they reorder packets: docs/SWEEP.md)")):
            if not shutil.which(tool):
                lines.append(f"{tool} not found, needed for {why}: apt-get install {pkg}")
    return lines, missing_tr


def run_sweep(cfg: SweepConfig, shape: Shape, id_bytes: int, *, results_root: Path, out: Path | None = None,
              resume: bool = True, only_rungs: list[str] | None = None, strict: bool = False,
              log: Callable[[str], None] = print, analyse: bool = False, skip_missing: bool = False) -> Path:
    rung_names = only_rungs or list(cfg.rungs)
    rungs = [load_rung(n) for n in rung_names]
    problems, missing_tr = missing_requirements(cfg, rungs, analyse)
    if problems and not (skip_missing and all(p.startswith("transport ") for p in problems)):
        raise ConfigError("pre-flight found what this sweep needs and this machine lacks (nothing was measured):\n  "
                          + "\n  ".join(problems)
                          + ("\n  (--skip-missing measures without the missing transports)" if missing_tr else ""))
    if missing_tr:
        for p in problems:
            log(f"warning: {p}; skipped (--skip-missing)")
        cfg = replace(cfg, transports=tuple(t for t in cfg.transports if t not in missing_tr))
    # cheap pre-flight checks (hopbench.doctor): this host, and for real rungs the route
    # to the peer against the interface and rate the rung config names
    from hopbench.orchestration import doctor

    preflight: dict[str, Any] = {"local": doctor.local_report(with_ucx=False).to_dict(), "rungs": {}}
    warnings = [f"local: {f['message']}" for f in preflight["local"]["findings"] if f["level"] == "warn"]
    for r in rungs:
        if r.kind == "real":
            host = r.peer.rsplit(":", 1)[0]
            rep = doctor.preflight(host, r.interface, r.rate_mbit)
            preflight["rungs"][r.name] = rep.to_dict()
            warnings += [f"{r.name}: {w.message}" for w in rep.warnings]
    for w in warnings:
        log(f"warning: {w}")
    if strict and warnings:
        raise ConfigError(f"pre-flight checks warned ({len(warnings)}); --strict refuses to measure")
    fallback = None
    if any(r.kind == "emulated" for r in rungs):
        ok, why = netem.available()
        if not ok:
            fallback = f"emulated rungs need network namespaces: {why}; falling back to loopback only"
            log(f"warning: {fallback}")
            rungs = [r for r in rungs if r.kind != "emulated"] or [load_rung("loopback")]
            if not any(r.kind == "loopback" for r in rungs):
                rungs.insert(0, load_rung("loopback"))
    folder = out or (find_resumable(results_root, cfg) if resume else None)
    if folder is not None and (folder / "sweep.json").exists():
        state = json.loads((folder / "sweep.json").read_text())
        seed = state["seed"]
        log(f"resuming unfinished sweep {folder}")
    else:
        folder = R.new_folder(results_root, f"sweep-{cfg.name}-{cfg.profile}", out)
        seed = cfg.seed or random.SystemRandom().randrange(1, 2**31)
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "configs").mkdir(exist_ok=True)
    for r in rungs:
        shutil.copy(r.path, folder / "configs" / Path(r.path).name)
    if cfg.path:
        shutil.copy(cfg.path, folder / "configs" / Path(cfg.path).name)
    # placements: "auto" is chosen by measurement on this machine, once per sweep folder
    resolved = None
    if (folder / "sweep.json").exists():
        resolved = json.loads((folder / "sweep.json").read_text()).get("placements_resolved")
    calibration = None
    if resolved is None:
        resolved = []
        for name in cfg.placements:
            if name == "auto":
                from hopbench.core.placement import calibrate

                chosen, calibration = calibrate(sys.executable)
                log(f"placement auto -> {chosen} (loopback TCP p50 64 B + 184,320 B per candidate: "
                    + ", ".join(f"{n} {sum(v.values()) / 1e3:.0f} us" for n, v in calibration.items() if "error" not in v) + ")")
                resolved.append(chosen)
            else:
                resolved.append(name)
    from hopbench.core.placement import placement as _placement

    places = {n: _placement(n) for n in resolved}
    cells = plan_cells(cfg, rungs, shape, seed, resolved)
    by_rung = {r.name: r for r in rungs}
    report: dict[str, Any] = {
        "schema": SWEEP_SCHEMA, "schema_version": R.SCHEMA_VERSION, "status": "running", "created_utc": R.utc_iso(),
        "fingerprint": _fingerprint(cfg), "seed": seed, "config": asdict(cfg), "fallback": fallback,
        "shape": {"bytes_per_token": shape.bytes_per_token, "k": cfg.k, "id_bytes": id_bytes},
        "rungs": {}, "cells_total": len(cells), "failed_cells": [], "preflight": preflight,
        "placements_resolved": resolved, "placement_calibration": calibration,
    }

    def save(status: str) -> None:
        report["status"] = status
        report["updated_utc"] = R.utc_iso()
        R.atomic_write(folder / "sweep.json", json.dumps(report, indent=1, default=str) + "\n")

    save("running")
    runtimes: dict[str, RungRuntime] = {}
    labels = {c.label: (c.rung, c.placement or resolved[0]) for c in cells}
    places.update({pn: _placement(pn) for _, pn in labels.values() if pn not in places})
    old_term = signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    todo = [c for c in cells if not cell_done(folder / "cells" / c.key)]
    if len(todo) < len(cells):
        log(f"{len(cells) - len(todo)} of {len(cells)} cells already complete; measuring the remaining {len(todo)}")
    t_start = time.monotonic()
    status = "incomplete"
    try:
        for label, (rname, pname) in labels.items():
            if any(c.label == label for c in todo):
                r = by_rung[rname]
                rt = RungRuntime(r, folder / "logs", places[pname])
                runtimes[label] = rt
                rt.start()
                report["rungs"][label] = rt.describe()
                log(f"rung {label}: {r.kind}" + (f", {r.rate_mbit:g} Mbit/s" if r.rate_mbit else "")
                    + f", placement {pname}, server {rt.host}:{rt.port}")
        save("running")
        for i, cell in enumerate(todo):
            rung = by_rung[cell.rung]
            cell_dir = folder / "cells" / cell.key
            if cell_dir.exists():  # an earlier attempt that did not complete: keep it aside
                cell_dir.rename(cell_dir.with_name(f"{cell_dir.name}.failed-{R.utc_stamp()}-{i}"))
            cycles = cycles_for(cell, rung, cfg)
            job = {"folder": str(cell_dir), "transport": cell.transport, "k": cfg.k, "id_bytes": id_bytes,
                   "cycles": cycles, "warmup": cfg.warmup, "gap_ms": cell.gap_ms,
                   "payload": {"label": cell.payload, "tokens": cell.tokens, "request_bytes": cell.request_bytes,
                               "reply_bytes": cell.reply_bytes},
                   "transport_settings": rung.settings(), "poll": runtimes[cell.label].place.poll,
                   "config": {"cycles": cycles, "warmup": cfg.warmup, "gap_ms": cell.gap_ms, "k": cfg.k},
                   "extra": {"sweep": {"cell": asdict(cell), "key": cell.key, "seed": seed}, "rung": cell.label,
                             "placement": runtimes[cell.label].place.describe()}}
            est = (cfg.warmup + cycles + 1) * (cell.gap_ms / 1000 + 0.001) + 60
            rt = runtimes[cell.label]
            answer = rt.run_cell(job, timeout=est)
            if not answer.get("ok") and rt.server_died():
                log(f"\nserver of rung {cell.label} died ({answer.get('error')}); restarted it on port {rt.port}, retrying {cell.key}")
                report.setdefault("server_restarts", []).append({"cell": cell.key, "error": answer.get("error")})
                cell_dir.rename(cell_dir.with_name(f"{cell_dir.name}.failed-{R.utc_stamp()}-{i}"))
                answer = rt.run_cell(job, timeout=est)
            if not answer.get("ok"):
                report["failed_cells"].append({"key": cell.key, "error": answer.get("error")})
                log(f"\ncell {cell.key} failed: {answer.get('error')}")
            done = i + 1
            el = time.monotonic() - t_start
            eta = el / done * (len(todo) - done)
            progress(done, len(todo), el, eta, cell.key)
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        status = "complete" if not report["failed_cells"] else "incomplete"
    except KeyboardInterrupt:
        log(f"\ninterrupted: finished cells are kept in {folder}; run the same command again to resume")
        raise
    finally:
        for rt in runtimes.values():
            rt.stop()
        signal.signal(signal.SIGTERM, old_term)
        summary = aggregate(folder)
        R.atomic_write(folder / "summary.csv", R.csv_text(AGG_COLUMNS, summary))
        save(status)
    return folder


AGG_COLUMNS = ["rung", "transport", "payload", "tokens", "request_bytes", "reply_bytes", "gap_ms", "repeats",
               "n", "p50_ns", "p50_ci_lo_ns", "p50_ci_hi_ns", "p50_ci_level", "p50_ci_scope", "p50_rep_min_ns",
               "p50_rep_max_ns", "spread_rel", "rate_mbit"]


def progress(done: int, total: int, elapsed: float, eta: float, key: str) -> None:
    """On a terminal one live line; in a log file a plain line per 10% (no carriage returns)."""
    text = f"[{done}/{total}] {100 * done / total:3.0f}%  elapsed {elapsed:5.0f} s  ETA {eta:5.0f} s  {key}"
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{text:<100}")
    elif done == total or done * 10 // total != (done - 1) * 10 // total:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()


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
                     "rate_mbit": g.rate_mbit})
    return rows
