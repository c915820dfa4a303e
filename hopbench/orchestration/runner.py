"""`hopbench run`: one session against a server, one plan per payload, results written
after every payload so an interrupted run keeps what it measured."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from hopbench import columns as COL
from hopbench import results as R
from hopbench.core import env as envmod
from hopbench.core import protocol as P
from hopbench.core.client import Measurement, Session
from hopbench.errors import ConfigError, DiskFull, HopbenchError, Refused
from hopbench.orchestration.stats import summarize
from hopbench.records import DrafterInfo, Payload, RunConfig


@contextlib.contextmanager
def naming_what_was_kept(made: list[Path]) -> Iterator[None]:
    """An error once the result folder exists names it (what was measured is kept, status
    error); an interrupt carries it as a note (status incomplete), or says nothing was measured."""
    try:
        yield
    except KeyboardInterrupt as exc:
        exc.add_note(f"what was measured is in {made[0]} (status incomplete)" if made else "nothing was measured")
        raise
    except HopbenchError as exc:
        if made and (made[0] / R.RUN_FILE).exists():
            raise type(exc)(f"{exc} (measured so far kept in {made[0]}, status error)") from None
        if made:
            raise type(exc)(f"{exc} (nothing was written whole in {made[0]})") from None
        raise


#: seconds between a long plan's progress lines
PROGRESS_EVERY_S = 10.0

#: what a progress report gets: the payload's label, cycles done, cycles in all, seconds so far
ProgressReport = Callable[[str, int, int, float], None]


@contextlib.contextmanager
def reporting_progress(session: Session, label: str, total: int, report: ProgressReport | None,
                       every_s: float | None = None) -> Iterator[None]:
    """While one plan runs: every `every_s` seconds, `report` gets how many of its cycles have
    completed (its samples are written in order, none zero). A timer thread, not a
    synchronisation: it reads the measurement and never touches the channel, so a plan shorter
    than `every_s` reports nothing. For runs whose cycles follow a real-time schedule (a
    streamed forward, --gap-ms, --mps), as iperf3 reports each interval."""
    if report is None:
        yield
        return
    stop = threading.Event()
    start = time.monotonic()
    every = every_s or PROGRESS_EVERY_S

    def tick() -> None:
        while not stop.wait(every):
            m = session.measured
            if m is not None:
                report(label, int(np.count_nonzero(m.samples_ns)), total, time.monotonic() - start)

    t = threading.Thread(target=tick, name="hopbench-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def progress_line(label: str, done: int, total: int, elapsed_s: float) -> str:
    """One progress report as a line: cycles done of all (warm-up included), time so far and
    the time left at the rate so far."""
    left = f", about {elapsed_s / done * (total - done):.0f} s left" if done else ""
    return f"  {label}: {done}/{total} cycles (warm-up included) in {elapsed_s:.0f} s{left}"


def load_summary(m: Measurement, gap_s: float) -> dict[str, Any]:
    """A target's rate and goodput over its timed cycles (closed loop: the round trips and
    think times back to back; open loop: the schedule's span), its tails from an HdrHistogram
    (`hdr`: its encoded text, mergeable), and for open loop its late sends (the previous reply
    not back by a send's intended time) and the sends' lag behind their schedule."""
    from hopbench.orchestration.stats import hdr_histogram, hdr_tails

    first, last = 1 + m.plan.warmup, max(1 + m.plan.warmup, m.completed)
    timed = m.samples_ns[first:last]
    h = hdr_histogram(timed)
    out: dict[str, Any] = {**hdr_tails(h), "hdr": h.encode().decode()}
    if not timed.size:
        return out
    if "intended_ns" in m.stages:
        sched = m.stages["intended_ns"]
        span = float(sched[last - 1] - sched[first] + timed[-1])
        lag = m.stages["send_lag_ns"][first:last]
        out.update(late_sends=int(np.sum(m.samples_ns[first - 1:last - 1] > np.diff(sched[first - 1:last]))),
                   send_lag_p50_ns=float(np.median(lag)), send_lag_p99_ns=float(np.percentile(lag, 99)))
    else:
        span = float(timed.sum()) + timed.size * gap_s * 1e9
    out["cycles_per_s"] = timed.size / (span / 1e9) if span > 0 else None
    out["goodput_mbit"] = out["cycles_per_s"] * m.plan.request_bytes * 8 / 1e6 if out["cycles_per_s"] else None
    return out


@contextlib.contextmanager
def saving_status(save: Callable[[str], None], doc: dict[str, Any]) -> Iterator[list[str]]:
    """The body's outcome saved when it ends, however it ends: `complete` (or what the body
    put in status[0]), `incomplete` on Ctrl-C, `error` otherwise (doc["error"] says which)."""
    status = ["complete"]
    try:
        yield status
    except BaseException as exc:
        status[0] = "incomplete" if isinstance(exc, KeyboardInterrupt) else "error"
        doc["error"] = str(exc) or exc.__class__.__name__
        raise
    finally:
        save(status[0])


def payload_rows(m: Measurement, payload: Payload, target: int | None = None) -> tuple[list[dict], dict]:
    plan = m.plan
    base = {"payload": payload.label, "transport": plan.transport, "tokens": payload.tokens,
            "request_bytes": plan.request_bytes, "reply_bytes": plan.reply_bytes}
    if target is not None:
        base["target"] = target
    if plan.uses_gpu:
        base.update(client_memory=plan.client_memory, server_memory=plan.server_memory, gpu_path=plan.gpu_path)
    if m.codec_info:
        src = m.codec_info["source"]
        base.update(codec=m.codec_info["codec"],
                    payload_source="synthetic" if src.get("synthetic") else Path(str(src.get("file"))).name)
        err = m.codec_info.get("error") or {}
    rows = []
    first_timed = 1 + plan.warmup
    streamed = plan.stream is not None  # its send lags are a stage (summarised), not open loop's load columns
    stage_items = [(name, m.stages[name]) for name in COL.STAGE_COLUMNS + COL.CODEC_STAGE_COLUMNS + ["wire_bytes"]
                   + (COL.STREAM_STAGE_COLUMNS if streamed else []) + COL.DRAFT_STAGE_COLUMNS if name in m.stages]
    load_items = [(name, m.stages[name]) for name in ("intended_ns", "send_lag_ns")
                  if name in m.stages and not streamed]
    for seq in range(m.completed):
        phase = "untimed" if seq == 0 else ("warmup" if seq < first_timed else "timed")
        row = {**base, "seq": seq, "phase": phase, "warmup": int(seq < first_timed), "rtt_ns": int(m.samples_ns[seq])}
        for name, arr in stage_items + load_items:
            row[name] = int(arr[seq])
        rows.append(row)
    summary = {**base, "k": plan.k, **summarize(m.timed),
               "complete": m.error is None and m.completed == plan.total}
    if m.codec_info:  # a lossy codec's reconstruction error on the bodies it sent (empty: lossless)
        summary.update(rel_rms=err.get("rel_rms"), cosine_min=err.get("cosine_min"))
    last = max(first_timed, m.completed)
    for name, arr in stage_items:  # per-stage medians with their order-statistic CI
        if name == "wire_bytes":  # what crossed per cycle: its mean, and the codec's ratio
            mean = float(np.mean(arr[first_timed:last])) if last > first_timed else None
            summary["wire_bytes_mean"] = mean
            summary["ratio"] = (plan.request_bytes - P.SEQ_BYTES) / (mean - P.CODEC_FRAME_BYTES) if mean else None
            continue
        st = summarize(arr[first_timed:last])
        for key, stat in zip(COL.stage_summary_keys(name), ("p50_ns", "p50_ci_lo_ns", "p50_ci_hi_ns")):
            summary[key] = st.get(stat)
    return rows, summary


class RunWriter:
    """Accumulates measurements and rewrites the three files atomically after each one."""

    def __init__(self, folder: Path, header: dict[str, Any], target: int | None = None,
                 load: dict[str, Any] | None = None):
        self.folder = folder
        self.header = header
        self.target = target  # one of several targets at once (its number, 1..M)
        self.load = load  # several targets or open loop: {"clients": M, "offered_per_s": rate or None}
        self.full = False  # a write found the disk full: the folder keeps its last whole files, marked error
        self.samples: list[dict] = []
        self.summaries: list[dict] = []
        self.payloads: list[dict] = []

    def add(self, m: Measurement, payload: Payload, probe: dict | None = None) -> dict:
        rows, summary = payload_rows(m, payload, self.target)
        hdr = None
        if self.load is not None:
            extra = load_summary(m, m.plan.gap_ms / 1000.0)
            hdr = extra.pop("hdr")
            summary.update(self.load, **extra)
        drafter = DrafterInfo.from_env(self.header.get("server_env"))
        if drafter and "draft_ns" in m.stages and summary.get("draft_p50_ns"):  # the forward against its floor
            summary["draft_floor_ratio"] = summary["draft_p50_ns"] / max(1, drafter.read_floor_ns)
        self.samples.extend(rows)
        self.summaries.append(summary)
        self.payloads.append({"payload": payload.label, "tokens": payload.tokens, "plan": m.plan.to_wire(),
                              "completed_cycles": m.completed, "error": m.error, "started_unix": m.started_unix,
                              "data_channel": m.data_info, "server_channel": m.server_info, "summary": summary,
                              **({"gpu": m.gpu_info} if m.gpu_info else {}),
                              **({"codec": m.codec_info} if m.codec_info else {}),
                              **({"design": payload.design} if payload.design != "taps" else {}),
                              **({"stream_from": "target"} if payload.produced else {}),
                              **({"drafter": drafter.to_dict()} if drafter and "draft_ns" in m.stages else {}),
                              **({"hdr": hdr} if hdr else {}),
                              **({"duration_probe": probe} if probe else {})})
        return summary

    def write(self, status: str, error: str | None = None) -> None:
        from hopbench.core.placement import affinity

        if self.full:  # the write that found the disk full marked the folder; the rest would fail alike
            return

        self.header["client_affinity"] = affinity()  # per thread, once the transports' threads exist
        report = {**self.header, "status": status, "error": error, "finished_utc": R.utc_iso(),
                  "payloads": self.payloads}
        gpu = any("gpu_path" in s for s in self.summaries)  # GPU columns only where a plan used GPU memory
        codec = any("codec" in s for s in self.summaries)  # codec columns only where a plan used a codec
        load = self.load is not None
        stream = any("stream" in p["plan"] for p in self.payloads)  # stage columns only where a plan streamed
        draft = any("drafter" in p["plan"] for p in self.payloads)  # the drafter's columns where it ran
        try:
            R.ResultFolder(self.folder).write_run(report, {
                R.SAMPLES_FILE: R.csv_text(COL.sample_columns(gpu, codec, load, stream, draft), self.samples),
                R.SUMMARY_FILE: R.csv_text(COL.summary_columns(gpu, codec, load, stream, draft), self.summaries)})
        except DiskFull:
            self.full = True
            raise


def measure_floor(transport: str, k: int, id_bytes: int, cycles: int, poll: str,
                  transport_settings: dict | None = None) -> dict:
    """The instrument's own floor: the smallest round trip of the same transport and code
    path on loopback (a private server process started through the library: no secret,
    whatever HOPBENCH_SECRET says; a 64 B request)."""
    import numpy as np

    from hopbench.core.server import ServerConfig
    from hopbench.estimate import median_interval
    from hopbench.orchestration.serverproc import ServerProcess

    cfg = ServerConfig(host="127.0.0.1", port=0, once=True, poll=poll, transport_settings=transport_settings or {})
    with ServerProcess(cfg) as srv:
        with Session("127.0.0.1", srv.address[1], poll=poll, transport_settings=transport_settings or {}) as s:
            m = s.measure(P.Plan(transport, 64, k * id_bytes, k, id_bytes, cycles, max(10, cycles // 10)))
            s.bye()
    x = np.sort(m.timed)
    lo, hi, level = median_interval(x)
    return {"transport": transport, "where": "loopback", "request_bytes": 64, "reply_bytes": k * id_bytes,
            "n": int(x.size), "p50_ns": float(np.median(x)), "p50_ci_lo_ns": lo, "p50_ci_hi_ns": hi,
            "p50_ci_level": level, "poll": poll}


def check_caps(caps: dict | None, plans: list[tuple[str, P.Plan]]) -> None:
    """Every plan against the caps the server announced, before anything is measured."""
    if not caps:
        return
    c = P.Caps(**{k: v for k, v in caps.items() if k in ("max_request_bytes", "max_reply_bytes", "max_cycles")})
    bad = [(label, reason) for label, plan in plans if (reason := c.check(plan))]
    can = caps.get("codecs")
    if isinstance(can, list):  # a server that announces its codecs (older ones do not)
        from hopbench.core.codecs import INSTALL

        bad += [(label, f"the server cannot decode codec {name!r} (it has {', '.join(can)}); on the server's host: "
                        f"{INSTALL}") for label, plan in plans
                if (name := (plan.codec or "none").partition(":")[0]) not in can]
    if bad:
        lines = "; ".join(f"{label}: {reason}" for label, reason in bad[:4]) + (" ..." if len(bad) > 4 else "")
        raise Refused(f"the server's caps refuse {len(bad)} of {len(plans)} payloads, so nothing was measured: {lines}")


PROBE_CYCLES = 20  # a duration run's probe per payload: its median sets the timed cycle count


def duration_cycles(session: Session, plan: P.Plan, cfg: RunConfig, source: Any = None) -> tuple[int, dict]:
    """Timed cycles that take about cfg.duration_s at this payload (iperf3's -t): a probe of
    PROBE_CYCLES (its samples not kept: more warm-up) gives the cycle time, gap included;
    clamped to at least 10 and to the server's max_cycles cap. Returns the count and what
    sized it (recorded as the payload's `duration_probe`)."""
    import math

    cap = int((session.server_hello.get("caps") or {}).get("max_cycles") or 10**9) - plan.warmup - 1
    if cfg.mps:  # open loop: the schedule sets the time, no probe needed
        return max(10, min(cap, math.ceil((cfg.duration_s or 0) * cfg.mps))), {"cycles": 0, "per_cycle_s": 1 / cfg.mps,
                                                                               "cap": cap}
    probe = session.measure(dataclasses.replace(plan, cycles=PROBE_CYCLES), gap_s=cfg.gap_ms / 1000.0, source=source)
    p50_ns = float(np.median(probe.timed))
    per_cycle_s = p50_ns / 1e9 + cfg.gap_ms / 1000.0
    cycles = max(10, min(cap, math.ceil((cfg.duration_s or 0) / per_cycle_s)))
    return cycles, {"cycles": PROBE_CYCLES, "p50_ns": p50_ns, "per_cycle_s": per_cycle_s, "cap": cap}


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is among several: the start group of its cfg.clients targets (every plan's
    ACCEPT waits for all of them), this target's number, and `extra`, recorded at the top of
    report.json (a sweep cell's identity)."""

    group: str | None = None
    target: int | None = None
    extra: dict[str, Any] | None = None


@dataclass(frozen=True)
class SessionHooks:
    """What a run tells its caller as it goes: `on_payload(summary)` as each payload ends,
    `on_warning(note)` for each of its notes, `on_progress` a long plan's cycles as they
    complete (reporting_progress)."""

    on_payload: Callable[[dict], None] | None = None
    on_warning: Callable[[str], None] | None = None
    on_progress: ProgressReport | None = None
    on_note: Callable[[str], None] | None = None  # what the run does before it measures (--target's build)


@dataclass
class RunInputs:
    """What a session's payloads are made from, besides their plans: a codec's hidden states
    (hopbench.workload.hidden.Source) and a real producer of the streamed chunks (--target)."""

    source: Any = None
    producer: Any = None


def run_session(
    host: str, port: int, payloads: list[Payload], cfg: RunConfig, *, folder: Path | Callable[[], Path],
    identity: RunIdentity = RunIdentity(), hooks: SessionHooks = SessionHooks(), secret: str | None = None,
    floor: bool = False, source: Any = None,
) -> RunWriter:
    """Measure every payload in one session and write the result folder.

    `folder` may be a callable that creates it: it is called only once the server has
    answered and accepted the whole plan list, so a run that never connects (or that the
    server's caps refuse) leaves nothing on disk. Errors propagate after the files are
    written (status "incomplete" / "error").

    Several targets at once (hopbench.orchestration.clients): `identity` names this one
    (RunIdentity); cfg.mps paces each target's sends (open loop). `hooks`: what the caller is
    told as the run goes (SessionHooks)."""
    if source is None and any(p.codec != "none" for p in payloads):  # read and checked before connecting
        from hopbench.workload.hidden import source_for

        source = source_for(cfg.payload_from, len(cfg.taps), cfg.hidden)
    producer = None
    if cfg.stream is not None and cfg.stream.target != "clock":  # built and measured before connecting
        from hopbench.orchestration.streamed import build

        producer, cfg = build(cfg, hooks.on_note or (lambda line: None))
    client_env = envmod.collect(peer_host=host)
    with Session(host, port, timeout_s=cfg.timeout_s, connect_timeout_s=cfg.connect_timeout_s, poll=cfg.poll,
                 transport_settings=cfg.transport_settings, client_env=client_env, secret=secret,
                 loop=cfg.loop) as session:
        return _measure_payloads(session, f"{host}:{port}", payloads, cfg, folder, client_env,
                                 RunInputs(source, producer), identity, hooks, floor)


def check_drafter(info: DrafterInfo | None, cfg: RunConfig) -> None:
    """--remote-drafter against the server's drafter model, before anything is measured: one
    line where there is none, or where its rows are not this run's tokens."""
    if not info:
        raise ConfigError("--remote-drafter: the server runs no drafter model (start it with `hopbench serve "
                          "--drafter SHAPE`)")
    if cfg.early == "all" and (info.shape.get("needs_tokens") or info.shape.get("block_size")):
        why = "is conditioned on the bonus token too" if info.shape.get("needs_tokens") else \
            f"drafts a block over every accepted row (block_size {info.shape['block_size']})"
        raise ConfigError(f"--stream layers,early=all: the server's {info.name} drafter {why}, so its forward cannot "
                          "start before the accept count; use early=fc or off")
    row = info.row_bytes
    if cfg.bytes_per_token != row:
        raise ConfigError(f"--remote-drafter: the server's {info.name} drafter takes rows of {row:,} B "
                          f"({row // 2} BF16 values), this run's shape sends {cfg.bytes_per_token:,} B a "
                          "token: give --shape the drafter's shape (configs/shape-tiny.toml for the tiny preset)")


def _plan_for(cfg: RunConfig, p: Payload, group: str | None, cycles: int | None = None) -> P.Plan:
    """A payload's plan as the run's config asks for it (`cycles`: a --time run's count)."""
    coded = p.codec != "none"
    return P.Plan(transport=cfg.transport, request_bytes=p.request_bytes, reply_bytes=p.reply_bytes, k=cfg.k,
                  id_bytes=cfg.id_bytes, cycles=cycles or cfg.cycles, warmup=cfg.warmup, verify=cfg.verify,
                  gap_ms=cfg.gap_ms, transport_settings=cfg.settings_for(), client_memory=cfg.client_memory,
                  server_memory=cfg.server_memory, gpu_path=cfg.gpu_path, codec=p.codec if coded else None,
                  codec_group=cfg.hidden if coded else 0,
                  group=P.GroupPlan(group, cfg.clients) if group else None,
                  # the chunks of the run's schedule; its floor's are smaller
                  stream=P.StreamPlan(cfg.stream.chunks, p.request_bytes // cfg.stream.chunks)
                  if p.stream and cfg.stream else None,
                  drafter=P.DrafterPlan(cfg.early) if cfg.drafter and p.drafter else None)


def _stream_schedule(cfg: RunConfig, folder: Path) -> Any:
    """The forward's timeline every clock-driven streamed cycle follows (hopbench.workload.stream),
    None without a stream; a real producer's profile written beside the results, for
    --stream layers,times=FILE on a host without its GPU."""
    if cfg.stream is None:
        return None
    from hopbench.workload.stream import from_record

    if cfg.stream.producer:
        from hopbench.orchestration.streamed import write_layer_times

        write_layer_times(folder, cfg.stream.producer)
    return from_record(cfg.stream)


def _measure_one(session: Session, p: Payload, planned: tuple[P.Plan, Any], cfg: RunConfig, source: Any, stream: Any,
                 target: int | None, writer: "RunWriter", hooks: SessionHooks) -> None:
    """One payload's plan (`planned`: it and the --time probe that sized it) measured and
    written as it ends (what it measured before a failure too), its warnings and summary
    handed to the hooks. `stream`: a streamed payload's schedule or real producer."""
    plan, probe = planned
    schedule = None
    if cfg.mps:  # open loop: this target's intended send times
        from hopbench.core.timing import open_schedule

        schedule = open_schedule(plan.total, cfg.mps, cfg.arrivals, cfg.seed + (target or 0))
    try:
        with reporting_progress(session, p.label, plan.total, hooks.on_progress):
            m = session.measure(plan, gap_s=cfg.gap_ms / 1000.0, source=source, schedule=schedule, stream=stream)
    except BaseException:
        if session.measured is not None:  # what this plan measured before it stopped
            writer.add(session.measured, p, probe)
        raise
    summary = writer.add(m, p, probe)
    writer.write("running")
    for note in m.data_info.get("warnings") or []:
        if hooks.on_warning:
            hooks.on_warning(note)
    if hooks.on_payload:
        hooks.on_payload(summary)


def _measure_payloads(session: Session, peer: str, payloads: list[Payload], cfg: RunConfig, folder: Any,
                      client_env: dict[str, Any], inputs: RunInputs, identity: RunIdentity, hooks: SessionHooks,
                      floor: bool) -> "RunWriter":
    """run_session's measuring, over its open session: each payload's plan, written as it ends."""
    group, target = identity.group, identity.target
    source = inputs.source

    def plan_for(p: Payload, cycles: int | None = None) -> P.Plan:
        return _plan_for(cfg, p, group, cycles)

    check_caps(session.server_hello.get("caps"), [(p.label, plan_for(p)) for p in payloads])
    if cfg.drafter:
        check_drafter(session.drafter, cfg)
    folder = folder() if callable(folder) else folder
    stream_schedule = _stream_schedule(cfg, folder)
    header = R.RunReport(peer=peer, config=cfg.to_dict(), client_env=client_env,
                         server_env=session.server_env, server_software=session.server_hello.get("software"),
                         server_caps=session.server_hello.get("caps"), extra=identity.extra or {}).to_dict()
    load = {"clients": cfg.clients, "offered_per_s": cfg.mps} if cfg.clients > 1 or cfg.mps or target else None
    writer = RunWriter(folder, header, target, load)
    status, error = "complete", None
    try:
        for p in payloads:
            cycles, probe = duration_cycles(session, plan_for(p), cfg, source) if cfg.duration_s else (None, None)
            stream = (inputs.producer if p.produced else stream_schedule) if p.stream else None
            _measure_one(session, p, (plan_for(p, cycles), probe), cfg, source, stream, target, writer, hooks)
        session.bye()
        if floor:
            writer.header["floor"] = measure_floor(cfg.transport, cfg.k, cfg.id_bytes, min(cfg.cycles, 2000), cfg.poll,
                                                   cfg.transport_settings)
    except BaseException as exc:
        status = "incomplete" if isinstance(exc, KeyboardInterrupt) else "error"
        error = str(exc) or exc.__class__.__name__
        raise
    finally:
        writer.write(status, error)
    return writer
