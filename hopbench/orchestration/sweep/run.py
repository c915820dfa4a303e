"""`hopbench sweep`: pre-flight, then the cells in their planned order against each rung's
runtime, every finished cell kept; resumable. Aggregation is analysis's
(hopbench.analysis.summary)."""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from hopbench import results as R
from hopbench.analysis.summary import AGG_COLUMNS, aggregate
from hopbench.config import parse_hostport
from hopbench.config_sweep import Rung, SweepConfig, load_rung
from hopbench.core.transport import get_transport
from hopbench.errors import ConfigError, HopbenchError, TransportUnavailable
from hopbench.files import signals_held
from hopbench.orchestration import netem
from hopbench.orchestration.sweep.plan import cycles_for, plan_cells
from hopbench.orchestration.sweep.runtime import RungRuntime
from hopbench.orchestration.sweep.state import _fingerprint, find_resumable
from hopbench.records import RunConfig
from hopbench.shape import Shape


def missing_requirements(cfg: SweepConfig, rungs: list[Rung], analyse: bool) -> tuple[list[str], set[str]]:
    """What this sweep needs and this machine lacks: one line each with the exact install
    command, and the transports that are missing. Checked before anything is measured."""
    from hopbench.core.transport import install_line, registry

    lines: list[str] = []
    missing_tr: set[str] = set()
    wanted = [t for t in cfg.transports if any(t in r.transports for r in rungs)]
    for t in wanted:
        try:
            get_transport(t)
        except TransportUnavailable:
            missing_tr.add(t)
            lines.append(f"transport {t} is not installed: {registry()[t].install_line() or 'see docs/TRANSPORTS.md'}")
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


def _server_answers(host: str, port: int) -> str | None:
    """None when a hopbench server answers at host:port (one short session: HELLO, BYE);
    else why not, in a few words. A real rung's cells would all fail otherwise."""
    from hopbench.core.client import Session

    try:
        with Session(host, port, timeout_s=5.0, connect_timeout_s=5.0) as s:
            try:
                s.bye()
            except HopbenchError:
                pass  # it answered; how it ends the session is the cells' business
    except HopbenchError as exc:
        return str(exc)
    return None


def _checked(cfg: SweepConfig, shape: Shape, rungs: list[Rung], forward_ms: float | None, analyse: bool,
             skip_missing: bool, log: Callable[[str], None]) -> tuple[SweepConfig, Any]:
    """The sweep's config checked before anything is made: its codecs spelled one way, the
    hidden-state file readable, the streamed cells' schedule, what this machine lacks
    (refused, or with --skip-missing the missing transports left out). Returns the config
    to run and the stream's record (None: no streamed cells)."""
    if cfg.codecs != ("none",) or cfg.payload_from:  # checked and spelled one way before anything is made
        from hopbench.orchestration.runjob import check_codecs
        from hopbench.workload.hidden import source_for

        cfg = replace(cfg, codecs=tuple(check_codecs(",".join(cfg.codecs), shape.hidden)))
        if cfg.payload_from:
            source_for(cfg.payload_from, len(shape.aux_layers), shape.hidden)
    stream = None
    if "layers" in cfg.stream:  # the streamed cells' schedule, checked before anything is made
        from hopbench.shape import DTYPE_BYTES
        from hopbench.workload import stream as ST

        if forward_ms is None:
            raise ConfigError("sweep.stream = layers needs the verify forward's length (the shape's cycle - t_draft)")
        stream = ST.record(shape.aux_layers, shape.hidden * DTYPE_BYTES[shape.dtype], cfg.k, forward_ms)
    problems, missing_tr = missing_requirements(cfg, rungs, analyse)
    if problems and not (skip_missing and all(p.startswith("transport ") for p in problems)):
        raise ConfigError("pre-flight found what this sweep needs and this machine lacks (nothing was measured):\n  "
                          + "\n  ".join(problems)
                          + ("\n  (--skip-missing measures without the missing transports)" if missing_tr else ""))
    if missing_tr:
        for p in problems:
            log(f"warning: {p}; skipped (--skip-missing)")
        cfg = replace(cfg, transports=tuple(t for t in cfg.transports if t not in missing_tr))
    return cfg, stream


def _preflight(rungs: list[Rung], strict: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """Cheap pre-flight checks (hopbench.orchestration.doctor): this host, and for real rungs the route to
    the peer against the interface and rate the rung config names, and its server's answer."""
    from hopbench.orchestration import doctor

    preflight: dict[str, Any] = {"local": doctor.local_report(with_ucx=False).to_dict(), "rungs": {}}
    warnings = [f"local: {f['message']}" for f in preflight["local"]["findings"] if f["level"] == "warn"]
    unanswered = []
    for r in rungs:
        if r.kind == "real" and r.peer:
            host, port = parse_hostport(r.peer)
            rep = doctor.preflight(host, r.interface, r.rate_mbit)
            preflight["rungs"][r.name] = rep.to_dict()
            warnings += [f"{r.name}: {w.message}" for w in rep.warnings]
            why = _server_answers(host, port)
            if why:
                unanswered.append(f"{r.name}: no hopbench server answers at {r.peer} ({why}); start `hopbench serve "
                                  f"--bind {r.peer}` there, or fix rung.peer in {r.path}")
    if unanswered:
        raise ConfigError("pre-flight: a real rung's server does not answer (nothing was measured):\n  "
                          + "\n  ".join(unanswered))
    for w in warnings:
        log(f"warning: {w}")
    if strict and warnings:
        raise ConfigError(f"pre-flight checks warned ({len(warnings)}); --strict refuses to measure")
    return preflight


def _namespaces_or_loopback(rungs: list[Rung], log: Callable[[str], None]) -> tuple[list[Rung], str | None]:
    """The rungs this machine can run: emulated ones need network namespaces; without them,
    loopback only (said, and recorded as the sweep's fallback)."""
    fallback = None
    if any(r.kind == "emulated" for r in rungs):
        ok, why = netem.available()
        if not ok:
            fallback = f"emulated rungs need network namespaces: {why}; falling back to loopback only"
            log(f"warning: {fallback}")
            rungs = [r for r in rungs if r.kind != "emulated"] or [load_rung("loopback")]
            if not any(r.kind == "loopback" for r in rungs):
                rungs.insert(0, load_rung("loopback"))
    return rungs, fallback


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs: `resume` an unfinished sweep of the same fingerprint, `only_rungs`
    (default: the config's), `strict` (a failed preflight stops it), `analyse` (codec cells'
    analysis checked first), `skip_missing` (a cell whose library is missing is left out),
    `forward_ms` (the verify forward a streamed sweep's schedule follows)."""

    resume: bool = True
    only_rungs: list[str] | None = None
    strict: bool = False
    analyse: bool = False
    skip_missing: bool = False
    forward_ms: float | None = None


def run_sweep(cfg: SweepConfig, shape: Shape, *, results_root: Path, out: Path | None = None,
              options: SweepOptions = SweepOptions(), log: Callable[[str], None] = print,
              on_progress: Callable[[int, int, float, float, str], None] | None = None) -> Path:
    """Measure every cell of the sweep (ids of the shape's id_bytes); returns its folder.
    `on_progress(done, total, elapsed_s, eta_s, cell_key)` after each cell (default: plain
    lines, one every ~10 s)."""
    report_progress = on_progress or progress
    only_rungs, resume, strict = options.only_rungs, options.resume, options.strict
    rung_names = only_rungs or list(cfg.rungs)
    rungs = [load_rung(n) for n in rung_names]
    if not any(t in r.transports for r in rungs for t in cfg.transports):
        raise ConfigError(f"nothing to measure: the sweep's transports ({', '.join(cfg.transports)}) and the rungs' "
                          + "; ".join(f"{r.name}: {', '.join(r.transports) or 'none'}" for r in rungs)
                          + " share none (nothing was created)")
    cfg, stream = _checked(cfg, shape, rungs, options.forward_ms, options.analyse, options.skip_missing, log)
    preflight = _preflight(rungs, strict, log)
    rungs, fallback = _namespaces_or_loopback(rungs, log)
    folder = out or (find_resumable(results_root, cfg) if resume else None)
    if folder is not None and R.ResultFolder(folder).is_sweep:
        seed = R.ResultFolder(folder).resume_seed()  # before the lock: a writer's half-made record too
        log(f"resuming unfinished sweep {folder}")
    else:
        folder = R.new_folder(results_root, f"sweep-{cfg.name}-{cfg.profile}", out)
        seed = cfg.seed or random.SystemRandom().randrange(1, 2**31)
    lock = R.FolderLock(folder).acquire()  # held until the sweep ends: a second writer is refused
    try:
        return _measure(folder, seed, cfg, rungs, shape, fallback, preflight, log, report_progress, stream)
    finally:
        lock.release()


def _placements(rf: R.ResultFolder, cfg: SweepConfig, log: Callable[[str], None]) -> tuple[list[str], Any]:
    """The sweep's placements as resolved: "auto" is chosen by measurement on this machine,
    once per sweep folder (a resumed sweep keeps its choice). Returns (names, calibration)."""
    resolved = rf.read().header.extra.get("placements_resolved") if rf.is_sweep else None
    calibration = None
    if resolved is None:
        resolved = []
        for name in cfg.placements:
            if name == "auto":
                from hopbench.orchestration.calibrate import calibrate

                chosen, calibration = calibrate()
                log(f"placement auto -> {chosen} (loopback TCP p50 64 B + 184,320 B per candidate: "
                    + ", ".join(f"{n} {sum(v.values()) / 1e3:.0f} us" for n, v in calibration.items() if "error" not in v) + ")")
                resolved.append(chosen)
            else:
                resolved.append(name)
    return resolved, calibration


def _cell_job(cell: Any, rung: Rung, rt: RungRuntime, cfg: SweepConfig, shape: Shape, id_bytes: int, seed: int,
              stream: Any, cell_dir: Path) -> tuple[dict[str, Any], float]:
    """A cell's job for its rung's agent, and the seconds it may take."""
    cycles = cycles_for(cell, rung, cfg, (stream.forward_ms if stream else 0.0) / 1000)
    place = rt.place
    run_cfg = RunConfig(transport=cell.series.transport, k=cfg.k, id_bytes=id_bytes, cycles=cycles, warmup=cfg.warmup,
                        gap_ms=cell.gap_ms, poll=place.poll if place else "auto",
                        transport_settings=rung.settings(), rate_mbit=rung.rate_mbit, rung=cell.label,
                        bytes_per_token=shape.bytes_per_token, cpu=place.client_cpu if place else None,
                        codecs=(cell.series.codec,), payload_from=cfg.payload_from, hidden=shape.hidden,
                        taps=tuple(shape.aux_layers),
                        clients=cell.series.clients, stream=stream if cell.series.streamed else None,
                        design=cell.series.design)
    job = {"folder": str(cell_dir), "config": run_cfg.to_dict(),
           # the payload as one target names it: several targets add their own "@M"
           "payload": {"label": cell.series.alone.spell(cell.base), "tokens": cell.tokens,
                       "request_bytes": cell.request_bytes, "reply_bytes": cell.reply_bytes,
                       "codec": cell.series.codec, "stream": cell.series.streamed, "design": cell.series.design},
           "extra": {"sweep": {"cell": asdict(cell), "key": cell.key, "seed": seed}, "rung": cell.label,
                     "placement": place.describe() if place else None}}
    return job, (cfg.warmup + cycles + 1) * (cell.gap_ms / 1000 + 0.001) + 60


def _start_rungs(labels: dict[str, tuple[str, str]], todo: list, by_rung: dict[str, Rung], places: dict[str, Any],
                 folder: Path, report: dict[str, Any], log: Callable[[str], None]) -> dict[str, RungRuntime]:
    """The runtime (links, server) of each rung x placement a remaining cell needs, started
    and described in the report."""
    runtimes: dict[str, RungRuntime] = {}
    for label, (rname, pname) in labels.items():
        if any(c.label == label for c in todo):
            r = by_rung[rname]
            rt = RungRuntime(r, folder / "logs", places[pname])
            runtimes[label] = rt
            rt.start()
            report["rungs"][label] = rt.describe()
            log(f"rung {label}: {r.kind}" + (f", {r.rate_mbit:g} Mbit/s" if r.rate_mbit else "")
                + f", placement {pname}, server {rt.host}:{rt.port}"
                + (f" (pid {rt.server.proc.pid})" if rt.server else ""))
    return runtimes


def _run_cell(rt: RungRuntime, job: dict[str, Any], est: float, key: str, attempt: str, rf: R.ResultFolder,
              report: dict[str, Any], log: Callable[[str], None]) -> None:
    """One cell on its rung's agent; a server that died is restarted and the cell retried
    once (recorded); a cell that still fails is recorded as failed, and the sweep goes on."""
    answer = rt.run_cell(job, timeout=est)
    if not answer.get("ok") and rt.server_died():
        log(f"\nserver of rung {job['extra']['rung']} died ({answer.get('error')}); restarted it on port {rt.port}, "
            f"retrying {key}")
        report.setdefault("server_restarts", []).append({"cell": key, "error": answer.get("error")})
        rf.set_aside(key, attempt)
        answer = rt.run_cell(job, timeout=est)
    if not answer.get("ok"):
        report["failed_cells"].append({"key": key, "error": answer.get("error")})
        log(f"\ncell {key} failed: {answer.get('error')}")


def _opened(rf: R.ResultFolder, seed: int, cfg: SweepConfig, rungs: list, shape: Shape,
            said: tuple[str | None, dict[str, Any]], log: Callable[[str], None]) -> tuple[list[str], list, dict[str, Any]]:
    """A sweep folder readied: its logs and the configs as measured copied in, the placements
    resolved (calibrated where asked), the cells planned and the report's head (`said`: the
    fallback rung's reason and the preflight)."""
    folder = rf.path
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "configs").mkdir(exist_ok=True)
    for path in [r.path for r in rungs] + ([cfg.path] if cfg.path else []):  # the configs as measured
        shutil.copy(path, folder / "configs" / Path(path).name)
    resolved, calibration = _placements(rf, cfg, log)
    cells = plan_cells(cfg, rungs, shape, seed, resolved)
    fallback, preflight = said
    report: dict[str, Any] = R.SweepReport(
        kind="sweep", seed=seed, config=asdict(cfg), shape=R.ShapeRecord(shape.bytes_per_token, cfg.k, shape.id_bytes),
        preflight=preflight, extra={"fingerprint": _fingerprint(cfg), "fallback": fallback, "cells_total": len(cells),
                                    "placements_resolved": resolved, "placement_calibration": calibration}).to_dict()
    return resolved, cells, report


def _measure(folder: Path, seed: int, cfg: SweepConfig, rungs: list, shape: Shape, fallback: str | None,
             preflight: dict[str, Any], log: Callable[[str], None],
             report_progress: Callable[[int, int, float, float, str], None],
             stream: dict[str, Any] | None = None) -> Path:
    """Measure the planned cells into a locked sweep folder (new or resumed)."""
    id_bytes = shape.id_bytes
    rf = R.ResultFolder(folder)
    resolved, cells, report = _opened(rf, seed, cfg, rungs, shape, (fallback, preflight), log)
    from hopbench.core.placement import placement as _placement

    places = {n: _placement(n) for n in resolved}
    by_rung = {r.name: r for r in rungs}

    def save(status: str) -> None:
        report["status"] = status
        report["updated_utc"] = R.utc_iso()
        rf.write_sweep(report)

    save("running")
    runtimes: dict[str, RungRuntime] = {}
    labels = {c.label: (c.place.rung, c.place.placement or resolved[0]) for c in cells}
    places.update({pn: _placement(pn) for _, pn in labels.values() if pn not in places})
    old_term = signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    todo = [c for c in cells if not rf.cell_done(c.key)]
    if len(todo) < len(cells):
        log(f"{len(cells) - len(todo)} of {len(cells)} cells already complete; measuring the remaining {len(todo)}")
    t_start = time.monotonic()
    status = "incomplete"
    try:
        runtimes.update(_start_rungs(labels, todo, by_rung, places, folder, report, log))
        save("running")
        for i, cell in enumerate(todo):
            rt = runtimes[cell.label]
            rf.set_aside(cell.key, str(i))  # an earlier attempt that did not complete: kept aside
            job, est = _cell_job(cell, by_rung[cell.place.rung], rt, cfg, shape, id_bytes, seed, stream,
                                 rf.cell_dir(cell.key))
            _run_cell(rt, job, est, cell.key, str(i), rf, report, log)
            el = time.monotonic() - t_start
            report_progress(i + 1, len(todo), el, el / (i + 1) * (len(todo) - i - 1), cell.key)
        status = "complete" if not report["failed_cells"] else "incomplete"
    except KeyboardInterrupt:
        log(f"\ninterrupted: finished cells are kept in {folder}; run the same command again to resume")
        raise
    finally:
        signal.signal(signal.SIGTERM, old_term)
        _teardown(runtimes, folder, lambda: save(status))
    return folder


def _teardown(runtimes: dict[str, RungRuntime], folder: Path, save: Callable[[], None]) -> None:
    """The rungs stopped, the summary aggregated and the state saved, with Ctrl-C held until
    done: an interrupt then leaves no namespace behind and the sweep's status written."""
    with signals_held():
        for rt in runtimes.values():
            rt.stop()
        summary = aggregate(folder)
        R.atomic_write(R.ResultFolder(folder).file(R.SUMMARY_FILE), R.csv_text(AGG_COLUMNS, summary))
        save()


#: seconds between plain progress lines (a sweep's cell takes ~1 s; iperf3 prints every 1 s);
#: HOPBENCH_PROGRESS_S sets another interval (0: every cell)
PROGRESS_EVERY_S = 10.0
_last_line = [-math.inf]


def progress(done: int, total: int, elapsed: float, eta: float, key: str) -> None:
    """Plain progress for a log file or a pipe: the first cell, then a line at most every
    PROGRESS_EVERY_S seconds and the last, each with the cells done of the total, the cell
    just measured (rung, transport, payload), the time so far and left at the rate so far;
    no carriage returns (the CLI shows a live bar instead when stderr is a terminal)."""
    every = float(os.environ.get("HOPBENCH_PROGRESS_S") or PROGRESS_EVERY_S)
    if done in (1, total) or elapsed - _last_line[0] >= every:
        _last_line[0] = elapsed
        sys.stderr.write(f"[{done}/{total}] {100 * done / total:3.0f}%  elapsed {elapsed:5.0f} s  left ~{eta:5.0f} s  "
                         f"{key}\n")
        sys.stderr.flush()


