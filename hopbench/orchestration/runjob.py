"""What `hopbench run` does between its flags and run_session: the request as given, the
checks before anything is measured, the plan (payloads by hopbench.shape.payloads, the one
plan path), the table printed as payloads finish, and the errors that name what was kept.
The CLI only builds a RunRequest and calls `run`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hopbench import results as R
from hopbench.config import parse_int_list
from hopbench.core.transport import get_transport, split_options
from hopbench.errors import ConfigError
from hopbench.estimate import DRIFT_MIN_REL, DRIFT_P, pct
from hopbench.records import (
    ARRIVALS,
    DESIGNS,
    PROJECTED,
    TAPS,
    TIMEOUT_S,
    DrafterInfo,
    Payload,
    RunConfig,
    StreamSpec,
    codec_label,
    design_label,
    draft_label,
)
from hopbench.shape import DTYPE_BYTES, ShapeConfig, load_shape, parse_bytes_grid, payloads, reply_size
from hopbench.workload.stream import EARLY


@dataclass(frozen=True)
class RunRequest:
    """`hopbench run`'s flags, as given (None: the configured default)."""

    host: str
    port: int
    transport: str
    tokens: str | None = None
    bytes: str | None = None
    k: int | None = None
    reply_bytes: str | None = None
    cycles: int | None = None  # default 1000, 100 with --stream (its cycles follow a real-time forward)
    time_s: float | None = None
    warmup: int | None = None  # default 100, 10 with --stream
    verify: bool = False
    gap_ms: float = 0.0
    poll: str = "auto"
    timeout_s: float = TIMEOUT_S
    out: Path | None = None
    name: str = "run"
    results_dir: Path = Path("results")
    shape: Path | None = None
    opt: tuple[str, ...] = ()
    secret: str | None = None
    interface: str | None = None
    rate: float | None = None
    rung: str | None = None
    strict: bool = False
    cpu: str | None = None
    floor: bool = True
    memory: tuple[str, str] = ("host", "host")
    gpu_path: str = "staged"
    loop: str = "auto"
    codec: str = "none"  # a list: each payload is measured under each codec, in the same session
    payload_from: str | None = None
    clients: int = 1  # targets at once (one process and session each; hopbench.orchestration.clients)
    mps: float | None = None  # open loop: cycles per second per target (None: closed loop)
    arrivals: str = "fixed"  # open loop's schedule: fixed intervals or poisson
    stream: str = "off"  # "layers": the aux layers streamed during the verify forward (docs/STREAM.md)
    layers: int | None = None  # the target's layer count (default hopbench.workload.stream.DEFAULT_LAYERS)
    forward_ms: float | None = None  # the verify forward's length (default the shape's cycle - t_draft)
    layer_times: Path | None = None  # a per-layer profile: each layer's end (ms) within the forward
    stream_cost_ms: float = 0.0  # the extraction cost per streamed forward
    target: str = "clock"  # the chunks' producer: the clock, or a forward on this host's GPU (gpu[:GRAPHS]; cpu)
    design: str = "taps"  # the payload design (--payload): taps (5 aux layers per position) or projected (one row)
    remote_drafter: bool = False  # each token payload also runs the server's drafter model (docs/DRAFTER.md)
    early: str = "off"  # streamed to the drafter: what of its forward starts on the landed taps
    agreement: bool = False  # each lossy codec's agreement measured on the proxy before the run (docs/CODECS.md)
    agreement_from: Path | None = None  # ... or read from a saved record (codecs --agreement --save)


def check_data_path(transport: str, settings: dict[str, dict[str, Any]], memory: tuple[str, str],
                    gpu_path: str) -> None:
    """The client's side of the data path, resolved once before anything is measured: a
    missing extra (its install line), a setting the transport does not know, one this host
    cannot use (UCX_TLS=rc without RDMA), a GPU choice the transport cannot take."""
    tr = get_transport(transport)
    own = settings.get(transport, {})
    tr.check_settings(own)
    tr.check_here(own)
    if "cuda" in memory:
        from hopbench.core import gpu

        gpu.check_choice(memory, gpu_path, tr, own)
        if memory[0] == "cuda":
            gpu.load()  # a missing CuPy or device fails here, with the install line


def plan(req: RunRequest) -> tuple[list[Payload], RunConfig]:
    """The payloads and the recorded configuration of a run (defaults from the shape config)."""
    scfg: ShapeConfig = load_shape(req.shape)
    sh = scfg.shape
    k = sh.k if req.k is None else req.k
    if k < 1:
        raise ConfigError("--k must be at least 1")
    if req.port == 0:
        raise ConfigError(f"--peer {req.host}: give the server's port")
    if not 1 <= req.clients <= 1024:
        raise ConfigError(f"--clients {req.clients}: give 1 to 1024 targets")
    if req.mps is not None and not req.mps > 0:
        raise ConfigError(f"--mps {req.mps:g}: give a rate above 0 cycles per second")
    if req.arrivals not in ARRIVALS:
        raise ConfigError(f"--mps RATE:{req.arrivals}: arrivals are fixed or poisson")
    if req.mps and (req.codec.strip() not in ("", "none") or "cuda" in req.memory):
        raise ConfigError("--mps (open loop) measures raw payloads in host memory: not with --codec or --memory cuda")
    settings = split_options(list(req.opt))
    check_data_path(req.transport, settings, req.memory, req.gpu_path)
    tokens = parse_int_list(req.tokens, "--tokens") if req.tokens else []
    sizes = parse_bytes_grid(req.bytes, scfg) if req.bytes else []
    if not tokens and not sizes:
        tokens = list(scfg.tokens)
    codecs = check_codecs(req.codec, sh.hidden, req.memory)
    if req.design not in DESIGNS:
        raise ConfigError(f"--payload {req.design}: {' or '.join(DESIGNS)}")
    row = sh.hidden * DTYPE_BYTES[sh.dtype]  # one hidden-wide row: what crosses per position when projected
    per_token = row if req.design == PROJECTED else sh.bytes_per_token
    loads = [dataclasses.replace(p, label=design_label(codec_label(p.label, c), req.design), codec=c,
                                 design=req.design)
             for p in payloads(per_token, tokens, sizes, reply_size(req.reply_bytes, k, sh.id_bytes))
             for c in codecs]
    stream = _stream(req, scfg, k)
    cycles = req.cycles if req.cycles is not None else (100 if stream else 1000)
    warmup = req.warmup if req.warmup is not None else (10 if stream else 100)
    if stream is not None:
        from hopbench.orchestration.streamed import stream_payloads

        loads = stream_payloads(stream, k, row, sh.id_bytes, codecs)
    cfg = RunConfig(transport=req.transport, k=k, id_bytes=sh.id_bytes, cycles=cycles, warmup=warmup,
                    verify=req.verify, gap_ms=req.gap_ms, duration_s=req.time_s, poll=req.poll,
                    timeout_s=req.timeout_s, loop=req.loop, client_memory=req.memory[0],
                    server_memory=req.memory[1], gpu_path=req.gpu_path, transport_settings=settings,
                    rate_mbit=req.rate, rung=req.rung, bytes_per_token=per_token, tokens=() if stream else tuple(tokens),
                    bytes=tuple(sizes), reply_bytes=req.reply_bytes, cpu=req.cpu, shape_file=scfg.path,
                    codecs=tuple(codecs), payload_from=req.payload_from, hidden=sh.hidden, taps=tuple(sh.aux_layers),
                    clients=req.clients,
                    mps=req.mps, arrivals=req.arrivals, stream=stream, design=req.design,
                    drafter=req.remote_drafter, early=req.early)
    return _with_drafter(loads, req), cfg


def _with_drafter(loads: list[Payload], req: RunRequest) -> list[Payload]:
    """--remote-drafter: after each raw token payload of the aux taps, the same payload served
    by the server's drafter model (its own series, "!draft"; streamed: "!draft:EARLY"), so the
    hop with the forward in it stands beside the hop without it, in one session."""
    if req.early not in EARLY:
        raise ConfigError(f"--stream layers,early={req.early}: off, fc or all")
    if not req.remote_drafter:
        if req.early != "off":
            raise ConfigError("--stream layers,early= starts the server's drafter model on the landed taps: it needs "
                              "--remote-drafter")
        return loads
    if req.mps or "cuda" in req.memory or req.verify:
        raise ConfigError("--remote-drafter sends raw rows from host memory in a closed loop: not with --mps, "
                          "--memory cuda or --verify")
    if req.early != "off" and req.stream == "off":
        raise ConfigError("early= starts the drafter on the taps as they land: it needs --stream layers,early=...")
    out: list[Payload] = []
    for p in loads:
        out.append(p)
        if p.tokens is not None and p.codec == "none" and p.design == "taps":
            mark = ("model" if req.early == "off" else req.early) if p.stream else "model"
            out.append(dataclasses.replace(p, label=draft_label(p.label, mark), drafter=True))
    if not any(p.drafter for p in out):  # e.g. --codec fp8 alone: nothing the drafter can take
        raise ConfigError("--remote-drafter: none of this run's payloads is a drafter payload (raw token payloads "
                          "of the aux taps: the drafter takes raw rows, so not a codec's, a design's or a byte "
                          "size's); add --codec none beside the codec, or --tokens")
    return out


def _stream(req: RunRequest, scfg: ShapeConfig, k: int) -> StreamSpec | None:
    """--stream layers: each aux layer's K + 1 rows as a chunk, sent when its layer ends within
    the verify forward (hopbench.workload.stream), checked before connecting; None without it."""
    if req.stream == "off":
        if req.target != "clock":
            raise ConfigError(f"target={req.target} produces the streamed chunks: it needs --stream layers,"
                              f"target={req.target}")
        return None
    if req.stream != "layers":
        raise ConfigError(f"--stream {req.stream}: off or layers")
    if req.tokens or req.bytes or req.mps or req.time_s or req.verify or req.design != TAPS:
        raise ConfigError("--stream layers measures one streamed payload (K + 1 rows of every aux layer) beside a 64 B "
                          "round trip and the synchronous taps and projected payloads (each --codec adds both hops "
                          "under it; --clients M runs M targets at once): not with --tokens, --bytes, --mps, --time, "
                          "--verify or --payload")
    if "cuda" in req.memory and req.codec.strip() not in ("", "none"):
        raise ConfigError("--stream layers with --memory cuda streams raw chunks from and into GPU memory: not with "
                          "--codec")
    from hopbench.workload import stream as ST

    sh = scfg.shape
    forward = req.forward_ms if req.forward_ms is not None else scfg.cycle_ms - scfg.t_draft_ms
    rec = ST.record(sh.aux_layers, sh.hidden * DTYPE_BYTES[sh.dtype], k, forward, req.layers, req.layer_times,
                    req.stream_cost_ms)
    if req.target != "clock":
        from hopbench.orchestration.streamed import check_target

        rec = dataclasses.replace(rec, target=check_target(req, sh.dtype))
    # what streaming costs in bytes: K + 1 rows of every aux layer each cycle, where the hop after
    # the forward sends only the accepted tokens' (T-bar a cycle: the shape's tok/s x cycle)
    accepted = scfg.tok_s * scfg.cycle_ms / 1000.0
    return dataclasses.replace(rec, bytes_per_accepted_token={
        "accepted_per_cycle": accepted, "accepted_only": sh.bytes_per_token,
        "streamed": rec.chunks * rec.chunk_bytes / accepted})


def check_codecs(text: str, width: int, memory: tuple[str, str] = ("host", "host")) -> list[str]:
    """--codec's list, each checked and spelled one way (zstd -> zstd:1), before connecting:
    an unknown codec or option is a ConfigError with the list, a missing library its install line."""
    from hopbench.core import codecs as C

    names = [C.canonical(part.strip(), width) for part in text.split(",") if part.strip()] or ["none"]
    if len(set(names)) != len(names):
        raise ConfigError(f"--codec {text}: a codec is listed twice")
    lossless = [n for n in names if n != "none" and C.parse(n, width).lossless]
    if "cuda" in memory and lossless:
        if memory != ("cuda", "cuda"):
            raise ConfigError(f"--codec {','.join(lossless)} with CUDA memory at one end only: nvCOMP's bitstream needs "
                              "nvCOMP at both ends; fp8 and int8 cross between GPU and CPU ends")
        from hopbench.core import gpucodec

        for n in lossless:  # nvCOMP missing, or a codec it has not: one line, before connecting
            gpucodec.GpuNvcomp(C.parse(n, width))
    return names


class RunConsole:
    """The run's table, a row per payload as it finishes (on stderr with --json)."""

    STAGES = ("d2h", "server_h2d", "wire", "server_d2h", "h2d")

    def __init__(self, say: Callable[[str], None], warn: Callable[[str], None]):
        self.say, self.warn = say, warn
        self.drifted: list[str] = []  # payloads whose note says drift: the legend explains it once

    def start(self, folder: Path, req: RunRequest, n: int, note: str | None) -> None:
        if note:  # once connected (a run that cannot start says only why): advice, not an error
            self.say(f"note: {note}")
        how = f"about {req.time_s:g} s" if req.time_s else f"{req.cycles or ('100' if req.stream != 'off' else '1000')} cycles"
        load = f", open loop {req.mps:g}/s {req.arrivals} per target" if req.mps else ", closed loop"
        if req.clients > 1:
            self.say(f"hopbench run -> {folder}  ({req.transport}, {n} payloads x {how}{load}; one target alone, then "
                     f"{req.clients} at once)")
            return
        self.say(f"hopbench run -> {folder}  ({req.transport}, {n} payloads x {how}{load})")
        self.say(f"{'payload':>9} {'request B':>10} {'reply B':>8} {'n':>6} {'p50 us':>9} {'p50 CI (this run)':>19} "
                 f"{'level':>6} {'p99 us':>9}  note")

    def row(self, s: dict[str, Any]) -> None:
        note = f"drift {s['drift_rel']:+.1%}" if s.get("drift") else ""
        if note:
            self.drifted.append(s["payload"])
        stages = [(n, s.get(f"{n}_p50_ns")) for n in self.STAGES]
        if any(v is not None for _, v in stages):  # GPU staged: where the hop's time goes
            note = " ".join(f"{n} {v / 1e3:.1f}" for n, v in stages if v is not None) + (f"  {note}" if note else "")
        if s.get("ratio"):  # a codec: its two stages and what it saved on the wire
            src = " (synthetic data)" if s.get("payload_source") == "synthetic" else f" ({s.get('payload_source')})"
            err = f" rel RMS {s['rel_rms']:.4f}" if s.get("rel_rms") is not None else ""
            note = (f"encode {s['encode_p50_ns'] / 1e3:.1f} decode {s['decode_p50_ns'] / 1e3:.1f} ratio "
                    f"{s['ratio']:.2f}{err}{src}" + (f"  {note}" if note else ""))
        if s.get("late_sends") is not None:  # open loop
            note = (f"open loop {s['offered_per_s']:g}/s: late sends {s['late_sends']} of {s['n']}, send lag p99 "
                    f"{s['send_lag_p99_ns'] / 1e3:.1f} us" + (f"  {note}" if note else ""))
        if s.get("n"):
            self.say(f"{s['payload']:>9} {s['request_bytes']:>10} {s['reply_bytes']:>8} {s['n']:>6} "
                     f"{s['p50_ns'] / 1e3:9.1f} {s['p50_ci_lo_ns'] / 1e3:9.1f}-{s['p50_ci_hi_ns'] / 1e3:<9.1f} "
                     f"{pct(s['p50_ci_level']):>6} {s['p99_ns'] / 1e3:9.1f}  {note}")

    def end(self, folder: Path, transport: str, floor: dict[str, Any] | None) -> None:
        if floor:
            f = floor
            self.say(f"instrument floor ({transport}, 64 B on loopback, same code path): p50 {f['p50_ns'] / 1e3:.1f} "
                     f"us [{f['p50_ci_lo_ns'] / 1e3:.1f}-{f['p50_ci_hi_ns'] / 1e3:.1f}, within-run "
                     f"{pct(f['p50_ci_level'])}, n = {f['n']}]; a hop near it measures the host, not the link")
        self.say("CI = order statistics over this run's cycles: the run-to-run spread is not in it (repeat runs, or a "
                 "sweep, to measure that)")
        if self.drifted:
            self.say(f"drift X% ({', '.join(self.drifted)}): the median of the last third of the payload's cycles "
                     f"against the first third's moved by X% (Mann-Whitney p < {DRIFT_P}, more than "
                     f"{DRIFT_MIN_REL:.0%}): the hop changed during the run (a warm-up ramp, or the host's load "
                     "changed), so its p50 and CI describe a moving target: measure it again, longer or pinned")
        self.say(f"results: {folder}")


def _preflight(req: RunRequest, console: RunConsole) -> Any:
    """The pre-flight checks, their warnings said (--strict refuses on one), and an --out
    that exists refused: before anything is measured."""
    from hopbench.orchestration.doctor import preflight

    pre = preflight(req.host, req.interface, req.rate)
    for finding in pre.warnings:
        console.warn(finding.message)
    if req.strict and pre.warnings:
        raise ConfigError(f"pre-flight checks warned ({len(pre.warnings)}); --strict refuses to measure")
    R.refuse_existing(req.out)
    return pre


def _progress(loads: list[Payload], cfg: RunConfig, clients: int, console: RunConsole) -> Any:
    """A run on a real-time schedule of over 30 s says so before measuring (as iperf3 says
    -t) and prints each payload's progress: the callback, or None."""
    from hopbench.orchestration.runner import PROGRESS_EVERY_S, progress_line

    scheduled = scheduled_s(loads, cfg)
    if scheduled <= 30:
        return None
    console.say(f"this run follows a real-time schedule (the streamed forward, --gap-ms or --mps): about "
                f"{scheduled:.0f} s of it{' per target' if clients > 1 else ''}; a payload's progress prints "
                f"every {PROGRESS_EVERY_S:.0f} s{' (target 1 for all)' if clients > 1 else ''}, its row as it "
                "ends (Ctrl-C keeps what was measured)")
    return lambda *a: console.say(progress_line(*a))


def run(req: RunRequest, console: RunConsole) -> Path:
    """Check, plan, measure; the folder written. An error after the folder exists names it
    (what was measured is kept, status error); KeyboardInterrupt carries it as a note."""
    from hopbench.orchestration.calibrate import placement_note
    from hopbench.orchestration.runner import RunIdentity, SessionHooks, naming_what_was_kept, run_session

    loads, cfg = plan(req)
    source = None
    if any(p.codec != "none" for p in loads):  # the hidden states, read and checked before connecting
        from hopbench.workload.hidden import source_for

        source = source_for(req.payload_from, len(cfg.taps), cfg.hidden)
    pre = _preflight(req, console)
    progress = _progress(loads, cfg, req.clients, console)
    made: list[Path] = []

    def make_folder() -> Path:
        made.append(R.new_folder(req.results_dir, req.name, req.out))
        console.start(made[0], req, len(loads), None if req.cpu else placement_note(req.host))
        return made[0]

    carried = _agreement(req, loads, console)
    if req.clients > 1:
        return _run_clients(req, console, loads, cfg, make_folder, made, progress is not None, carried)
    extra: dict[str, Any] = {"doctor": pre.to_dict(), **carried}
    from hopbench.orchestration.streamed import stream_model

    model = stream_model(cfg, console) if cfg.stream else None
    if model is not None:
        extra["stream_model"] = model.to_dict()
    rows: list[dict[str, Any]] = []

    def on_payload(summary: dict[str, Any]) -> None:
        rows.append(summary)
        console.row(summary)

    with naming_what_was_kept(made):
        w = run_session(req.host, req.port, loads, cfg, folder=make_folder, secret=req.secret,
                        identity=RunIdentity(extra=extra), floor=req.floor, source=source,
                        hooks=SessionHooks(on_payload, console.warn, progress, console.say))
    _after(cfg, w.header, model, rows, loads, console)
    console.end(made[0], req.transport, w.header.get("floor"))
    return made[0]


def _after(cfg: RunConfig, header: dict[str, Any], model: Any, rows: list[dict[str, Any]], loads: list[Payload],
           console: RunConsole) -> None:
    """What a run says after its table: the streamed hop against its model (and its real
    producer's against the clock's), the wire's share, the drafter's ledger."""
    from hopbench.orchestration.streamed import producer_lines, stream_lines

    if cfg.stream:
        if cfg.stream.target != "clock":  # the stream record as the producer measured it
            cfg = RunConfig.from_dict(header["config"])
            producer_lines(cfg, rows, loads, console.say)
        stream_lines(cfg, model, rows, loads, console)
    elif cfg.rate_mbit:
        wire_lines(cfg.rate_mbit, rows, console)
    if cfg.drafter:
        drafter_lines(DrafterInfo.from_env(header.get("server_env")), rows, console)


def _agreement(req: RunRequest, loads: list[Payload], console: RunConsole) -> dict[str, Any]:
    """The header's `agreement` (run --agreement / --agreement-from: docs/CODECS.md), or none."""
    from hopbench.orchestration.agreement import for_run, headline_lines

    if (req.agreement or req.agreement_from) and all(p.codec == "none" for p in loads):
        raise ConfigError("--agreement and --agreement-from judge a lossy codec: give --codec (e.g. none,fp8)")
    codecs = list(dict.fromkeys(p.codec for p in loads))
    record = for_run(req.agreement, req.agreement_from, codecs, console.say)
    if not record:
        return {}
    source = f"from {req.agreement_from}" if req.agreement_from else f"measured on {record.get('label', 'the proxy')}"
    for line in headline_lines(record, codecs):
        console.say(f"agreement ({source}): {line}")
    return {"agreement": record}


def drafter_lines(info: DrafterInfo | None, rows: list[dict[str, Any]], console: RunConsole) -> None:
    """After a --remote-drafter run: each drafter payload's forward (draft_ns, the drafter's own
    time), against its weight-read floor, and the hop without it beside the same payload's hop
    to the plain echo server path, measured in this session."""
    if not info:
        console.warn("--remote-drafter: the server announced no drafter model")
        return
    console.say(info.line())
    if (note := info.cpu_note()) is not None:
        console.say(note)
    by = {r["payload"]: r for r in rows}
    for r in rows:
        if r.get("draft_p50_ns") is None:
            continue
        plain = by.get(r["payload"].split("!draft")[0])
        early = f", early work {r['early_p50_ns'] / 1e6:.3f} ms" if r.get("early_p50_ns") else ""
        # a stage's interval is the same order statistics over the same timed cycles as the hop's
        level = f", within-run {pct(r['p50_ci_level'])}, n = {r['n']}" if r.get("p50_ci_level") else ""
        console.say(f"  {r['payload']}: the forward p50 {r['draft_p50_ns'] / 1e6:.3f} ms "
                    f"[{r['draft_p50_ci_lo_ns'] / 1e6:.3f}-{r['draft_p50_ci_hi_ns'] / 1e6:.3f}{level}] "
                    f"({r.get('draft_floor_ratio') or 0:.2f}x its floor){early}; the hop with it {r['p50_ns'] / 1e6:.3f} ms, "
                    f"without it {r['hop_ex_draft_p50_ns'] / 1e6:.3f} ms"
                    + (f" (the same payload's echo hop: {plain['p50_ns'] / 1e6:.3f} ms)" if plain else ""))
        if plain and r.get("server_p50_ns"):
            console.say("    " + ledger_line(r, plain))


def ledger_line(r: dict[str, Any], plain: dict[str, Any]) -> str:
    """A drafter payload's hop as its parts (analysis.drafter.ledger); with / (echo +
    forward), the served path's own overhead."""
    from hopbench.analysis.drafter import ledger

    p = ledger(r, plain)
    return (f"ledger (p50s of {r['n']} and {plain['n']} timed cycles, ms; their intervals above): echo {p['echo']:.3f} "
            f"+ queue {p['queue']:.3f} + stage {p['stage']:.3f} + forward "
            f"{p['forward']:.3f} + ids back {p['back']:.3f} + the server's rest {p['rest']:.3f} + left {p['left']:+.3f} "
            f"({p['left'] / p['hop']:+.1%} of the hop) = the hop {p['hop']:.3f}; with / (echo + forward) "
            f"{p['hop'] / (p['echo'] + p['forward']):.3f}")


#: a hop this far over its wire time, where the wire time is not negligible, is said to be
WIRE_OVER = 1.5
WIRE_SIGNIFICANT_MS = 0.2


def wire_lines(rate_mbit: float, rows: list[dict[str, Any]], console: RunConsole) -> None:
    """--rate: each payload's hop p50 against the time its request and reply occupy a link of
    that rate (Ethernet framing charged); a warning where the hop is well over it, as the
    streamed path warns when model and measurement part."""
    from hopbench.workload.stream import wire_s

    for r in rows:
        if not r.get("n") or "!draft" in r["payload"]:
            continue
        wire = (wire_s(r["request_bytes"], rate_mbit) + wire_s(r["reply_bytes"], rate_mbit)) * 1e3
        hop = r["p50_ns"] / 1e6
        line = (f"{r['payload']}: hop p50 {hop:.3f} ms (n = {r['n']}) against its wire time {wire:.3f} ms at "
                f"{rate_mbit:g} Mbit/s ({hop / wire:.2f}x)")
        if wire >= WIRE_SIGNIFICANT_MS and hop > WIRE_OVER * wire:
            console.warn(f"{line}: more than {WIRE_OVER:g}x, so the link runs below its --link rate=, or the host or the path "
                         "adds time the rate does not explain (a loaded host, a shaper's queue); check with "
                         "`hopbench doctor`")
        elif wire >= WIRE_SIGNIFICANT_MS and hop < wire:
            console.warn(f"{line}: faster than the rate allows, so the path is not a link of {rate_mbit:g} Mbit/s "
                         "(loopback, or a faster link than --link ,rate= says)")
        else:
            console.say(line)


def scheduled_s(loads: list[Payload], cfg: RunConfig) -> float:
    """The seconds a run's real-time schedule takes at least: each streamed cycle its forward
    (+ extraction cost), each cycle its think time, an open loop's cycles at their rate."""
    per = cfg.cycles + cfg.warmup + 1
    total = 0.0
    for p in loads:
        cycle_s = cfg.gap_ms / 1000.0
        if p.stream and cfg.stream is not None:
            cycle_s += (cfg.stream.forward_ms + cfg.stream.cost_ms) / 1000.0
        if cfg.mps:
            cycle_s = max(cycle_s, 1.0 / cfg.mps)
        total += per * cycle_s
    return total


def _run_clients(req: RunRequest, console: RunConsole, loads: list[Payload], cfg: RunConfig,
                 make_folder: Callable[[], Path], made: list[Path], progress: bool, extra: dict[str, Any]) -> Path:
    """--clients M: the reference alone, then M targets at once (hopbench.orchestration.clients);
    `progress`: the reference and target 1 print a long plan's progress."""
    from hopbench.orchestration import clients as CL
    from hopbench.orchestration.runner import naming_what_was_kept

    with naming_what_was_kept(made):
        record = CL.run_clients(req.host, req.port, loads, cfg, make_folder, secret=req.secret, cpu=req.cpu,
                                options=CL.ClientsOptions(extra=extra, progress=progress, say=console.say,
                                                          warn=console.warn))
    folder: Path = record["folder"]
    CL.result_table(record["payloads"], console.say)
    if record["errors"]:
        console.warn(f"{len(record['errors'])} target(s) failed (the others went on): "
                     + "; ".join(f"target {t}: {e}" for t, e in record["errors"].items()))
    console.say(f"{'closed' if record['loop'] == 'closed' else 'open'} loop; the 'all' row pools every target's "
                "round trips (the per-target hop at M); incast = its p50 over the reference's p50 alone")
    console.say(f"results: {folder}")
    return folder


def result_document(folder: Path) -> str:
    """`hopbench run --json`: the folder and its report, one JSON document."""
    top = R.ResultFolder(folder).read().record
    doc: dict[str, Any] = R.document("run-result", {"folder": str(folder), "report": top})
    if top.get("clients"):  # several targets: targets[] and aggregate per payload, as printed
        from hopbench.orchestration.clients import json_record

        doc["clients"] = json_record({**top["clients"], "payloads": [p for p in top["payloads"] if "targets" in p]})
    return json.dumps(doc, indent=1)


__all__ = ["RunConsole", "RunRequest", "check_data_path", "plan", "result_document", "run"]
