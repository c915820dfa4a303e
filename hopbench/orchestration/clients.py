"""`hopbench run --clients M`: M targets against one drafter (docs/RESULTS.md "Several targets").

The run measures every payload first with one target alone (the reference: series `tcp`),
then with M targets at once (series `tcp@M`): M processes, one per target, pinned round
robin over --cpu, each its own session against the one server, every plan of theirs
started together (PLAN `group`, docs/PROTOCOL.md "Plans started together": the server holds
each ACCEPT until the M plans are in). Each target writes its own result folder under
targets/; the run's folder then holds both phases as one run: the reference's rows, and per
payload of the M phase the pooled round trips of all targets (the per-target hop at M, what
fit and verdict read), a row per target, and the aggregate (cycles/s, goodput, Jain's
fairness index over the targets' goodput, the incast factor = the per-target p50 at M over
the p50 alone, tails from the targets' HdrHistograms merged).

A target that fails is recorded (its folder keeps what it measured, its error is in the
run's `clients.targets`) and the others go on: the server stops waiting for a member whose
session ended."""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench import columns as COL
from hopbench import results as R
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import CONNECT_TIMEOUT_S, Payload, RunConfig, StreamSpec, clients_label

TARGETS_DIR = "targets"
ALONE = "alone"


def cpu_plan(cpu: str | None, clients: int) -> tuple[list[int | None], str | None]:
    """Each target's CPU (round robin over --cpu), and a warning when the list is shorter than M."""
    if not cpu:
        return [None] * clients, None
    from hopbench.core.placement import parse_cpus

    cpus = sorted(parse_cpus(cpu))
    plan: list[int | None] = [cpus[i % len(cpus)] for i in range(clients)]
    warn = None
    if len(cpus) < clients:
        warn = (f"--cpu {cpu} lists {len(cpus)} CPU(s) for {clients} targets: they share them round robin "
                f"({', '.join(f'target {i + 1} on CPU {c}' for i, c in enumerate(plan))}); targets sharing a CPU "
                "measure the CPU's sharing too")
    return plan, warn


@dataclasses.dataclass(frozen=True)
class TargetJob:
    """What one target process runs (picklable: it crosses to a spawned process)."""

    host: str
    port: int
    payloads: list[Payload]
    cfg: RunConfig
    folder: Path
    secret: str | None
    cpu: int | None
    group: str | None
    target: int | None
    progress: bool = False  # a long plan's progress on stderr (the reference and target 1)


def target_process(target: int | None, cpu: int | None, done: Any, measure: Callable[[], Any]) -> None:
    """A target process's body: pinned, `measure()` run, its outcome (the target and its error,
    None when it completed) put on `done`; a failure is this target's alone."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
        os.environ["HOPBENCH_PINNED"] = str(cpu)
    import signal

    def first_interrupt_only(signum: int, frame: Any) -> None:
        # Ctrl-C reaches a target twice when the parent passes it on as well: the second must
        # not cut the first's save short (a .tmp was left, issue 42)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, first_interrupt_only)
    error = None
    try:
        measure()
    except KeyboardInterrupt:
        error = "interrupted"
    except HopbenchError as exc:
        error = str(exc)
    except Exception as exc:  # reported as this target's error; the others go on
        error = f"{exc.__class__.__name__}: {exc}"
    done.put((target, error))


def _target_main(job: TargetJob, done: Any) -> None:
    """A `run` target: one session, its own result folder; with `job.progress`, a long plan's
    progress on stderr, named by its target."""
    from hopbench.orchestration.runner import RunIdentity, SessionHooks, progress_line, run_session

    who = f"target {job.target}" if job.target else "the reference"

    def report(*a: Any) -> None:
        print(f"{who}:{progress_line(*a)}", file=sys.stderr, flush=True)

    target_process(job.target, job.cpu, done, lambda: run_session(
        job.host, job.port, job.payloads, job.cfg, secret=job.secret, identity=RunIdentity(job.group, job.target),
        folder=lambda: R.new_folder(job.folder.parent, job.folder.name, job.folder),
        hooks=SessionHooks(on_progress=report if job.progress else None)))


def run_targets(jobs: list[Any], entry: Callable[[Any, Any], None] = _target_main) -> dict[int | None, str | None]:
    """Run the jobs at once, one spawned process each running `entry(job, done)`; each job's
    error by its `target` (None: it completed). A process that dies without a word is
    reported with its exit code."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    procs = [ctx.Process(target=entry, args=(job, done), name=f"hopbench-target-{job.target}") for job in jobs]
    for p in procs:
        p.start()
    errors: dict[int | None, str | None] = {}
    try:
        for p, job in zip(procs, jobs):
            p.join()
            if p.exitcode != 0:
                errors[job.target] = f"target process exited with code {p.exitcode}"
        while len(errors) < len(jobs):
            try:
                target, error = done.get(timeout=1.0)
            except Exception:  # a process that died without a word: its exit code is recorded above
                break
            errors.setdefault(target, error)
    except KeyboardInterrupt:
        _let_targets_save(procs)
        raise
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
    return errors


SAVE_GRACE_S = 10.0  # an interrupted target's time to write what it measured before it is ended


def _let_targets_save(procs: list[Any]) -> None:
    """Ctrl-C: the targets (one process group with this one, from a terminal) got SIGINT too and
    are writing what they measured (status incomplete); they are given SAVE_GRACE_S to end
    before anything is terminated (killing them mid-write left a 0-byte .tmp and folders that
    said "running", issue 42). One that did not get the signal (a SIGINT sent to this
    process alone) is sent it after the first wait."""
    import signal

    deadline = time.monotonic() + SAVE_GRACE_S / 2
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive() and p.pid:
            try:
                os.kill(p.pid, signal.SIGINT)
            except OSError:
                pass
    deadline = time.monotonic() + SAVE_GRACE_S / 2
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))


def server_limit(host: str, port: int, timeout_s: float, secret: str | None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[int, dict[str, Any], str | None]:
    """The server's sessions at once (caps.max_sessions, absent: 1), environment and software,
    read over one short session before anything is measured."""
    from hopbench.core.client import Session

    with Session(host, port, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, secret=secret) as probe:
        limit = int((probe.server_hello.get("caps") or {}).get("max_sessions") or 1)
        server_env, software = probe.server_env, probe.server_hello.get("software")
        probe.bye()
    return limit, server_env, software


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _read_report(folder: Path) -> dict[str, Any] | None:
    reading = R.ResultFolder(folder).read_or_none()
    return None if reading is None else reading.record


def _ends(rows: list[dict[str, str]], gap_ns: int, forward_ns: int = 0) -> np.ndarray:
    """Each cycle's end on its target's own timeline (ns from its plan's start): open loop,
    its intended send + its round trip (measured from it); closed loop, the round trips and
    think times back to back. A streamed cycle (`forward_ns`: its forward and extraction
    cost) lasts the forward, the end message's send lag and its exposed hop (the sample)."""
    rtt = np.asarray([int(r["rtt_ns"]) for r in rows], dtype=np.int64)
    if rows and rows[0].get("intended_ns"):
        return np.asarray([int(r["intended_ns"]) for r in rows], dtype=np.int64) + rtt
    if forward_ns:
        rtt = rtt + forward_ns + np.asarray([int(r.get("end_lag_ns") or 0) for r in rows], dtype=np.int64)
    return np.cumsum(rtt + gap_ns)


def common_window(timelines: list[tuple[np.ndarray, np.ndarray, bool]]) -> tuple[int, int] | None:
    """The span in which every target that completed was in its timed cycles: from the last
    target's first timed cycle to the first target's last cycle (the plans started together,
    so their timelines share an origin to within the server's send loop). `timelines`: per
    target (cycle ends, timed mask, completed). None when there is no such span."""
    done = [(ends, timed) for ends, timed, ok in timelines if ok and timed.any()]
    if not done:
        return None
    starts = []
    for ends, timed in done:  # a target's timed cycles start where its last untimed one ended
        i0 = int(np.argmax(timed))
        starts.append(int(ends[i0 - 1]) if i0 else 0)
    w0 = max(starts)
    w1 = min(int(ends[-1]) for ends, _ in done)
    return (w0, w1) if w1 > w0 else None


def _in_window(t: int, err: str | None, p: dict[str, Any], line: tuple[list[dict[str, str]], np.ndarray, np.ndarray, bool],
               window: tuple[int, int] | None, plan: dict[str, Any], sample_rows: list[dict], merged: Any
               ) -> tuple[dict[str, Any], np.ndarray]:
    """One target's cycles inside the common window: its row (n, tails, rate, goodput) and
    its round trips; its sample rows appended (those outside marked `outside`), its
    histogram added to `merged`."""
    from hopbench.orchestration.stats import hdr_histogram, hdr_tails, summarize

    rows, ends, timed, _ = line
    inside = timed & (ends > window[0]) & (ends <= window[1]) if window else timed
    x = np.asarray([int(r["rtt_ns"]) for r in rows], dtype=np.int64)[inside]
    for r, keep, was in zip(rows, inside, timed):
        sample_rows.append(r if keep or not was else {**r, "warmup": 2, "phase": "outside"})
    h = hdr_histogram(x)
    merged.add(h)
    st = summarize(x) if x.size else {"n": 0}
    span_s = (window[1] - window[0]) / 1e9 if window else None
    s = p["summary"]
    rate = x.size / span_s if span_s else s.get("cycles_per_s")
    return ({"target": t, "complete": bool(s.get("complete")), "error": p.get("error") or err,
             "n": int(x.size), "n_total": s.get("n"), "p50_ns": st.get("p50_ns"), "p99_ns": st.get("p99_ns"),
             "p999_ns": st.get("p999_ns"), "cycles_per_s": rate,
             "goodput_mbit": rate * int(plan["request_bytes"]) * 8 / 1e6 if rate else None,
             **{k: s.get(k) for k in ("late_sends", "send_lag_p50_ns", "queue_p50_ns", "batch_rows_p50")},
             **hdr_tails(h)}, x)


def _target_lines(label: str, found: list, samples_by_target: dict[int, list[dict[str, str]]], plan: dict[str, Any],
                  reports: list) -> tuple[dict[int, Any], tuple[int, int] | None]:
    """Each target's samples of the payload in order, with each cycle's end on the shared
    clock, which are timed and whether its run completed; and the window every complete
    target was measuring in (hopbench.orchestration.clients.common_window)."""
    gap_ns = int(float(plan.get("gap_ms") or 0) * 1e6)
    stream = next((((rep or {}).get("config") or {}).get("stream") for *_, rep in reports
                   if ((rep or {}).get("config") or {}).get("stream")), None) if "stream" in plan else None
    spec = StreamSpec.from_dict(stream) if stream else None
    forward_ns = int(round((spec.forward_ms + spec.cost_ms) * 1e6)) if spec else 0
    lines: dict[int, tuple[list[dict[str, str]], np.ndarray, np.ndarray, bool]] = {}
    for t, err, p in found:
        if p is None:
            continue
        rows = sorted((r for r in samples_by_target[t] if r["payload"] == label), key=lambda r: int(r["seq"]))
        timed = np.asarray([r["phase"] == "timed" for r in rows], dtype=bool)
        lines[t] = (rows, _ends(rows, gap_ns, forward_ns), timed, bool(p["summary"].get("complete")) and not err)
    return lines, common_window([(ends, timed, ok) for _, ends, timed, ok in lines.values()])


def _aggregate(per: list[dict], pooled: list[int], merged: Any, window: tuple[int, int] | None, base: Any,
               clients: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The M phase's pooled summary (every target's samples in the window) and its aggregate:
    cycles/s and goodput summed, Jain's index, the incast against the target alone."""
    from hopbench.orchestration.stats import hdr_tails, jain, summarize

    summary = {k: v for k, v in summarize(np.asarray(pooled, dtype=np.int64)).items()
               if not k.startswith("drift")}
    rates = [x["cycles_per_s"] for x in per if x.get("cycles_per_s")]
    goodputs = [x["goodput_mbit"] for x in per if x.get("goodput_mbit")]
    agg = {"targets": clients, "measured": len(rates), "cycles_per_s": float(sum(rates)) if rates else None,
           "goodput_mbit": float(sum(goodputs)) if goodputs else None, "jain": jain(goodputs),
           "window_s": (window[1] - window[0]) / 1e9 if window else None,
           "alone_p50_ns": base, "incast": summary.get("p50_ns") / base if base and summary.get("n") else None,
           **hdr_tails(merged)}
    return summary, agg


def _payload_entry(label: str, reports: list, samples_by_target: dict[int, list[dict[str, str]]],
                   alone_p50: dict[str, Any], clients: int, sample_rows: list[dict],
                   summary_rows: list[dict]) -> dict[str, Any] | None:
    """One payload's M phase (aggregate): its entry, its rows appended; None when no target
    measured it."""
    from hopbench.orchestration.stats import hdr_histogram

    found = [(t, err, next((q for q in (rep or {}).get("payloads", []) if q["payload"] == label), None))
             for t, _, err, rep in reports]
    plan = next((p["plan"] for _, _, p in found if p is not None), None)
    if plan is None:
        return None
    lines, window = _target_lines(label, found, samples_by_target, plan, reports)
    per: list[dict] = []
    pooled: list[int] = []
    merged = hdr_histogram()
    for t, err, p in found:
        if p is None:
            per.append({"target": t, "complete": False, "error": err or "no measurement"})
            continue
        row, x = _in_window(t, err, p, lines[t], window, plan, sample_rows, merged)
        per.append(row)
        pooled.extend(x.tolist())
        summary_rows.append({**p["summary"], **{k: row[k] for k in ("n", "p50_ns", "p99_ns", "p999_ns", "cycles_per_s",
                                                                   "goodput_mbit", "hdr_p99_ns", "hdr_p999_ns")}})
    summary, agg = _aggregate(per, pooled, merged, window, alone_p50.get(label), clients)
    first = next(p["summary"] for _, _, p in found if p is not None)
    summary.update({k: first.get(k) for k in ("payload", "transport", "tokens", "request_bytes", "reply_bytes", "k")},
                   complete=all(x["complete"] for x in per), target="all", clients=clients,
                   offered_per_s=first.get("offered_per_s"), cycles_per_s=agg["cycles_per_s"],
                   goodput_mbit=agg["goodput_mbit"], hdr_p99_ns=agg["hdr_p99_ns"],
                   hdr_p999_ns=agg["hdr_p999_ns"],
                   late_sends=sum(int(x.get("late_sends") or 0) for x in per) if first.get("offered_per_s") else None)
    summary_rows.append(summary)
    return {"payload": label, "tokens": first.get("tokens"), "plan": plan, "summary": summary,
            "completed_cycles": sum(int(x.get("n") or 0) for x in per), "targets": per, "aggregate": agg,
            "hdr": merged.encode().decode(), "error": None if summary["complete"] else "a target failed",
            "started_unix": min((p.get("started_unix") or 0 for _, _, p in found if p is not None), default=None)}


def aggregate(alone: dict[str, Any] | None, targets: list[tuple[int, Path, str | None]],
              clients: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The M phase per payload, over the targets' common window (common_window: every target
    in its timed cycles; the cycles of the others' head and tail are left out: `warmup` = 2,
    phase `outside`): the pooled round trips' summary (the per-target hop at M), a row per
    target (its cycles in the window: n, tails, rate, goodput), and the aggregate. Returns
    (payload entries, sample rows, summary rows)."""

    # the reference's payloads by the label their M-target counterparts carry ("T3" -> "T3@4")
    alone_p50 = {clients_label(p["payload"], clients): p["summary"].get("p50_ns") for p in (alone or {}).get("payloads", [])}
    reports = [(t, folder, err, _read_report(folder)) for t, folder, err in targets]
    order: list[str] = []
    for _, _, _, rep in reports:
        for p in (rep or {}).get("payloads", []):
            if p["payload"] not in order:
                order.append(p["payload"])
    entries: list[dict] = []
    sample_rows: list[dict] = []
    summary_rows: list[dict] = []
    samples_by_target = {t: _read_csv(folder / R.SAMPLES_FILE) for t, folder, _, _ in reports}
    for label in order:
        entry = _payload_entry(label, reports, samples_by_target, alone_p50, clients, sample_rows, summary_rows)
        if entry is not None:
            entries.append(entry)
    return entries, sample_rows, summary_rows


def write_run(folder: Path, alone: dict[str, Any] | None, alone_dir: Path | None, entries: list[dict],
              sample_rows: list[dict], summary_rows: list[dict], header: dict[str, Any], clients: dict[str, Any],
              status: str, error: str | None) -> None:
    """The run's folder: both phases as one run (RUN_RECORD; its CSVs checked when read)."""
    rows_alone = [{**r, "target": ""} for r in _read_csv(alone_dir / R.SAMPLES_FILE)] if alone_dir else []
    summ_alone = list((alone or {}).get("payloads", []))
    gpu = False
    codec = any(p["plan"].get("codec") for p in summ_alone + entries)
    doc = {**header, "status": status, "error": error, "finished_utc": R.utc_iso(), "clients": clients,
           "payloads": summ_alone + entries}
    draft = any("drafter" in p["plan"] for p in summ_alone + entries)  # the drafter's stage columns
    R.ResultFolder(folder).write_run(doc, {
        R.SAMPLES_FILE: R.csv_text(COL.sample_columns(gpu, codec, True, draft=draft), rows_alone + sample_rows),
        R.SUMMARY_FILE: R.csv_text(COL.summary_columns(gpu, codec, True, draft=draft),
                                   [p["summary"] for p in summ_alone] + summary_rows)})


def _reference(runner: Callable[[list[TargetJob]], dict[int | None, str | None]], job: TargetJob,
               say: Callable[[str], None]) -> dict[str, Any]:
    """Phase 1: one target alone, the reference the M phase is judged against."""
    say(f"phase 1: one target alone (the reference), CPU {job.cpu if job.cpu is not None else 'any'}")
    err = runner([job])
    alone = _read_report(job.folder)
    if alone is None:
        raise HopbenchError(f"the reference target measured nothing: {err.get(None)}")
    return alone


@dataclasses.dataclass(frozen=True)
class ClientsOptions:
    """How run_clients runs its phases: without `reference` only the M phase (a sweep's M = 1
    cells are its reference); `extra` is recorded at the top of report.json (a sweep cell's
    identity); `runner` runs the target jobs (default: one spawned process each on this host;
    the Ray fan-in: one per node); `progress`: the reference and target 1 print a long
    plan's progress; `say`/`warn` print its lines and its notes."""

    reference: bool = True
    extra: dict[str, Any] | None = None
    runner: Callable[[list[TargetJob]], dict[int | None, str | None]] | None = None
    progress: bool = False
    say: Callable[[str], None] = print
    warn: Callable[[str], None] = print


def admitted(host: str, port: int, timeouts: tuple[float, float], secret: str | None, asked: tuple[int, str],
             cpu: str | None, warn: Callable[[str], None]) -> tuple[dict[str, Any], str | None, list[Any]]:
    """Before any target runs: the server asked (over one short session) whether it serves
    `asked` (the count, its flag) sessions at once, and each target's CPUs planned (a note
    where they must share). The server's environment and software, and the CPUs."""
    count, flag = asked
    limit, server_env, software = server_limit(host, port, timeouts[0], secret, timeouts[1])
    if count > limit:
        raise ConfigError(f"{flag} {count}: the server at {host}:{port} serves {limit} session(s) at once "
                          "(its --max-sessions); nothing was measured")
    cpus, note = cpu_plan(cpu, count)
    if note:
        warn(note)
    return server_env, software, cpus


def run_clients(host: str, port: int, payloads: list[Payload], cfg: RunConfig, folder: Callable[[], Path], *,
                secret: str | None = None, cpu: str | None = None,
                options: ClientsOptions = ClientsOptions()) -> dict[str, Any]:
    """Both phases (alone, then cfg.clients at once) and the run's folder, made by `folder()`
    once the server has said it serves M sessions at once; its `clients` record
    (ClientsOptions: which phases, who runs the targets, what is said)."""
    runner = options.runner or run_targets
    reference, extra, progress, say = options.reference, options.extra, options.progress, options.say
    m = cfg.clients
    server_env, software, cpus = admitted(host, port, (cfg.timeout_s, cfg.connect_timeout_s), secret, (m, "--clients"),
                                         cpu, options.warn)
    top = folder()
    sub = top / TARGETS_DIR
    sub.mkdir()
    group = uuid.uuid4().hex[:16]
    alone_dir = sub / ALONE if reference else None
    alone = _reference(runner, TargetJob(host, port, payloads, dataclasses.replace(cfg, clients=1), alone_dir, secret,
                                         cpus[0], None, None, progress), say) if alone_dir else None
    say(f"{'phase 2: ' if reference else ''}{m} targets at once, started together (group {group})")
    many = [dataclasses.replace(p, label=clients_label(p.label, m)) for p in payloads]
    jobs = [TargetJob(host, port, many, cfg, sub / f"t{i + 1}", secret, cpus[i], group, i + 1, progress and i == 0)
            for i in range(m)]
    try:
        errors, interrupted = runner(jobs), False
    except KeyboardInterrupt:  # the run keeps what it measured: the reference and the targets' partial folders
        errors, interrupted = {j.target: "interrupted" for j in jobs}, True
    entries, sample_rows, summary_rows = aggregate(alone, [(j.target or 0, j.folder, errors.get(j.target))
                                                           for j in jobs], m)
    record = {"targets": m, "group": group, "cpus": cpus, "reference": f"{TARGETS_DIR}/{ALONE}" if reference else None,
              "folders": [f"{TARGETS_DIR}/t{i + 1}" for i in range(m)],
              "errors": {str(t): e for t, e in errors.items() if e}, "loop": "open" if cfg.mps else "closed"}
    first = next((r for r in [alone] + [_read_report(j.folder) for j in jobs] if r is not None), None)
    if first is None:
        raise HopbenchError(f"no target measured anything: {'; '.join(f'{t}: {e}' for t, e in errors.items())}")
    header = {k: v for k, v in first.items() if k not in ("payloads", "files", "status", "error", "finished_utc")}
    header.update(server_env=server_env, server_software=software, config=cfg.to_dict(), **(extra or {}))
    failed = [t for t, e in errors.items() if e]
    status = ("incomplete" if interrupted else
              "complete" if not failed and (alone or {}).get("status", "complete") == "complete" else "error")
    write_run(top, alone, alone_dir, entries, sample_rows, summary_rows, header, record, status,
              "interrupted (Ctrl-C) while the targets ran" if interrupted else
              f"target(s) {', '.join(map(str, failed))} failed: see clients.errors" if failed
              else (alone or {}).get("error"))
    if interrupted:
        raise KeyboardInterrupt
    return {**record, "folder": top, "payloads": entries}


def result_table(entries: list[dict], say: Callable[[str], None]) -> None:
    """Per payload: each target, then the aggregate (printed and in --json)."""
    say(f"{'payload':>9} {'target':>6} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'cycles/s':>9} "
        f"{'Mbit/s':>8}  note")
    for e in entries:
        for t in e["targets"]:
            if t.get("p50_ns") is None:
                say(f"{e['payload']:>9} {t['target']:>6}  failed: {t.get('error')}")
                continue
            late = f"late sends {t['late_sends']}" if t.get("late_sends") is not None else ""
            late += _batched(t)
            say(f"{e['payload']:>9} {t['target']:>6} {t['n']:>6} {t['p50_ns'] / 1e6:8.3f} {t['p99_ns'] / 1e6:8.3f} "
                f"{t['p999_ns'] / 1e6:9.3f} {t['cycles_per_s'] or 0:9.1f} {t['goodput_mbit'] or 0:8.1f}  {late}")
        a, s = e["aggregate"], e["summary"]
        if s.get("p50_ns") is None:
            continue
        incast = f"incast {a['incast']:.2f}x (alone p50 {a['alone_p50_ns'] / 1e6:.3f} ms)" if a.get("incast") else ""
        jain = f"Jain {a['jain']:.3f}" if a.get("jain") is not None else ""
        batched = [t for t in e["targets"] if t.get("queue_p50_ns") is not None]
        mean = _batched({k: float(np.mean([t[k] for t in batched])) for k in ("queue_p50_ns", "batch_rows_p50")},
                        "mean of the targets' ") if batched else ""
        say(f"{e['payload']:>9} {'all':>6} {s['n']:>6} {s['p50_ns'] / 1e6:8.3f} {s['p99_ns'] / 1e6:8.3f} "
            f"{s['p999_ns'] / 1e6:9.3f} {a['cycles_per_s'] or 0:9.1f} {a['goodput_mbit'] or 0:8.1f}  {jain}  {incast}"
            f"{mean}")


def _batched(t: dict[str, Any], whose: str = "") -> str:
    """A drafter payload's batching, per target (its whole run's p50s): did the drafter batch?"""
    if t.get("queue_p50_ns") is None or t.get("batch_rows_p50") is None:
        return ""
    return f"  {whose}batch p50 {t['batch_rows_p50']:.0f} rows, queue p50 {t['queue_p50_ns'] / 1e6:.3f} ms"


def json_record(record: dict[str, Any]) -> dict[str, Any]:
    """`--json`'s targets[] and aggregate per payload (docs/RESULTS.md "Several targets")."""
    out = []
    for e in record["payloads"]:
        out.append({"payload": e["payload"], "targets": [
            {"target": t["target"], "p50_ms": _ms(t.get("p50_ns")), "p99_ms": _ms(t.get("p99_ns")),
             "p999_ms": _ms(t.get("p999_ns")), "cycles": t.get("n"), "goodput_mbit": t.get("goodput_mbit"),
             "cycles_per_s": t.get("cycles_per_s"), "late_sends": t.get("late_sends"), "error": t.get("error")}
            for t in e["targets"]], "aggregate": {**e["aggregate"], "p50_ms": _ms(e["summary"].get("p50_ns"))}})
    return {"targets": record["targets"], "loop": record["loop"], "payloads": out}


def _ms(ns: Any) -> float | None:
    return None if ns is None else float(ns) / 1e6


__all__ = ["ClientsOptions", "admitted", "aggregate", "cpu_plan", "json_record", "result_table", "run_clients", "run_targets"]
