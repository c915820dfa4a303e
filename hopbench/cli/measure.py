"""The measuring commands: serve, run, spec, fanin, spec-rungs, spec-summary, sweep, matrix."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer

from hopbench import results as R
from hopbench.cli.app import app
from hopbench.cli.options import (
    DRAFTER_PRESETS,
    LOOP_HELP,
    OPT_HELP,
    TRANSPORT_HELP,
    JsonOpt,
    LiveBar,
    Loop,
    LoopOpt,
    Poll,
    PortOpt,
    ShapeOpt,
    _address,
    _pin,
    _shape,
    parse_link,
)
from hopbench.cli.respell import Respelled
from hopbench.config import DEFAULT_PORT, parse_int_list, parse_spec
from hopbench.core.transport import split_options
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import MAX_CYCLES, MAX_MESSAGE_BYTES, TIMEOUT_S, DrafterInfo


@app.command()
def serve(
    bind: Annotated[str, typer.Option(help="HOST:PORT to listen on; 0.0.0.0 only when asked. Port 0 picks a free port and reports it.")] = f"127.0.0.1:{DEFAULT_PORT}",
    port: PortOpt = None,
    once: Annotated[bool, typer.Option(help="Exit after one session.")] = False,
    max_request_bytes: Annotated[int, typer.Option(help="Largest request a client may plan.")] = MAX_MESSAGE_BYTES,
    max_cycles: Annotated[int, typer.Option(help="Most round trips per plan (untimed and warm-up included).")] = MAX_CYCLES,
    idle_timeout: Annotated[float, typer.Option(help="Drop a client silent this many seconds.")] = 60.0,
    handshake_timeout: Annotated[float, typer.Option(help="A client must finish its handshake within this many seconds.")] = TIMEOUT_S,
    poll: Annotated[Poll, typer.Option(help="Receive path during a session: block, busy-poll, or auto (ucx busy-polls, tcp/zmq block).")] = Poll.auto,
    opt: Annotated[Optional[list[str]], typer.Option(help=OPT_HELP)] = None,
    secret: Annotated[Optional[str], typer.Option(envvar="HOPBENCH_SECRET", help="Require clients to prove this shared secret (HMAC challenge-response).")] = None,
    cpu: Annotated[Optional[str], typer.Option(help="Pin the server (and its threads) to these CPUs, e.g. 0 or 0-1.")] = None,
    session_cpus: Annotated[Optional[str], typer.Option(help="Serve each plan on a CPU of its own from these (the least used), e.g. 1-13; accepting and handshakes keep the server's other CPUs (--cpu), so hostile or idle connections never share a CPU with a measurement.")] = None,
    gpu: Annotated[bool, typer.Option(help="Create the CUDA context at start (before UCX's) for clients that plan --memory cuda; otherwise it is made on the first such plan.")] = False,
    loop: LoopOpt = Loop.auto,
    max_sessions: Annotated[int, typer.Option(min=1, help="Sessions served at once (a drafter shared by several targets); one more client is refused at once. 1 = one after another, like iperf3 -s.")] = 16,
    max_memory: Annotated[Optional[int], typer.Option(help="Request + reply bytes of the plans served at once, across sessions (default: one largest plan's).")] = None,
    drafter: Annotated[Optional[str], typer.Option(help=f"Run a drafter model of this shape on the plans that ask for it (run --remote-drafter): a preset ({DRAFTER_PRESETS}) or the drafter's config.json; random weights unless --drafter-weights (docs/DRAFTER.md; hopbench\\[drafter]).", rich_help_panel="Drafter")] = None,
    drafter_weights: Annotated[Optional[Path], typer.Option(help="The drafter's real weights (.safetensors), their shapes checked against the shape.", rich_help_panel="Drafter")] = None,
    drafter_device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where torch sees a GPU).", rich_help_panel="Drafter")] = None,
    batch_window_us: Annotated[float, typer.Option(min=0, help="A session's rows wait this long for the other sessions' to share one forward.", rich_help_panel="Drafter")] = 0.0,
    max_batch: Annotated[int, typer.Option(min=1, help="The most sessions' rows in one forward.", rich_help_panel="Drafter")] = 8,
    context: Annotated[int, typer.Option(help="Context tokens each session's drafter forward attends over: a KV cache per session (--max-sessions of them, allocated at start), read by every forward; 0: none.", rich_help_panel="Drafter")] = 4096,
):
    """Serve clients until Ctrl-C: up to --max-sessions at once (1: one after another, like iperf3 -s)."""
    from hopbench.core import protocol as P
    from hopbench.core.server import Server, ServerConfig

    _pin(cpu)
    cpus = None
    if session_cpus:
        from hopbench.core.placement import SessionCpus, split_control

        control, data = split_control(session_cpus)
        cpus = SessionCpus(data, control)
    if gpu:
        from hopbench.core import gpu as gpumod

        gpu_info = gpumod.device_info()
    host, port = _address(bind, port, 0)
    settings = split_options(opt)
    batcher = _drafter(drafter, drafter_weights, drafter_device, batch_window_us, (max_batch, max_sessions),
                       context) if drafter else None
    cfg = ServerConfig(host=host, port=port, once=once, idle_timeout_s=idle_timeout, poll=poll.value,
                       handshake_timeout_s=handshake_timeout,
                       caps=P.Caps(max_request_bytes=max_request_bytes, max_reply_bytes=max_request_bytes,
                                   max_cycles=max_cycles), transport_settings=settings, secret=secret or None,
                       loop=loop.value, max_sessions=max_sessions, max_memory_bytes=max_memory, session_cpus=cpus,
                       drafter=batcher)
    server = Server(cfg, log=lambda line: print(line, flush=True))
    print(f"hopbench server listening on {server.address[0]}:{server.address[1]}", flush=True)
    if batcher is not None:
        info = DrafterInfo.from_dict(server.env["drafter"])
        print(info.line(), flush=True)
        if (note := info.cpu_note()) is not None:
            print(note, flush=True)
    if gpu:
        print(f"GPU memory on {gpu_info['name']} (device {gpu_info['device']}, {gpu_info['library']})", flush=True)
    server.serve_forever()


def _drafter(shape: str, weights: Path | None, device: str | None, window_us: float, most: tuple[int, int],
             context: int) -> Any:
    """The server's drafter model behind its batcher (`most`: the sessions a forward batches,
    the sessions served at once, each with a context cache), or a one-line error."""
    from hopbench.core.batcher import Batcher
    from hopbench.models import drafter as DM

    if device not in (None, "cuda", "cpu"):
        raise ConfigError(f"--drafter-device {device}: cuda or cpu")
    if context < 0:
        raise ConfigError(f"--context {context}: a number of tokens >= 0 (0: no context)")
    model = DM.Model(DM.parse_shape(shape), weights=weights, device=device, context=context, sessions=max(most))
    return Batcher(model, window_us / 1e6, most[0])


def run_request(p: dict[str, Any]) -> Any:
    """`hopbench run`'s parameters (by name, as typer hands them over) as the RunRequest it
    runs, used by the command and by the reproduce line's round-trip test: a parameter named
    as one of the request's fields is that field (an Enum its value); each grouped option
    (GROUPED) sets the fields its spec names; the peer is the address."""
    from hopbench.orchestration import runjob

    fields = {f.name for f in dataclasses.fields(runjob.RunRequest)}
    kw = {RENAMED.get(k, k): v.value if isinstance(v, Enum) else v for k, v in p.items() if RENAMED.get(k, k) in fields}
    for option, parse in GROUPED.items():
        kw.update(parse(p[option]))
    kw.update(zip(("host", "port"), _address(p["peer"], p["port"])))
    return runjob.RunRequest(**{**kw, "opt": tuple(p["opt"] or ()), "secret": p["secret"] or None})


def _spec_link(link: str | None) -> dict[str, Any]:
    """spec's --link [NAME][,rate=MBIT] (no interface: spec checks no route)."""
    fields = _link_fields(link)
    if fields["interface"] is not None:
        raise ConfigError(f"spec --link {link}: NAME[,rate=MBIT] (spec checks no interface)")
    return {"rung": fields["rung"], "rate_mbit": fields["rate"]}


def _link_fields(text: str | None) -> dict[str, Any]:
    """--link [NAME][,rate=MBIT][,interface=IF] as the request's fields."""
    name, rate, interface = parse_link(text)
    return {"rung": name, "rate": rate, "interface": interface}


def _payload_fields(text: str) -> dict[str, Any]:
    """--payload DESIGN[,from=FILE] as the request's fields."""
    design, kw = parse_spec(text, "--payload", {"from": "FILE"})
    return {"design": design, "payload_from": kw.get("from")}


def _memory_fields(text: str) -> dict[str, Any]:
    """--memory's one spec, host | cuda | CLIENT:SERVER, with ,staged or ,direct: both ends'
    memory and the GPU path."""
    spec, _, path = text.partition(",")
    client, _, server = spec.partition(":")
    if {client, server or client} - {"host", "cuda"} or path not in ("", "staged", "direct"):
        raise ConfigError(f"--memory {text}: host or cuda, or CLIENT:SERVER (e.g. cuda:host), then ,staged or ,direct")
    return {"memory": (client, server or client), "gpu_path": path or "staged"}


def _mps_fields(text: str | None) -> dict[str, Any]:
    """--mps RATE[:poisson]: the open loop's rate and arrivals."""
    if text is None:
        return {"mps": None, "arrivals": "fixed"}
    rate, _, arrivals = text.partition(":")
    try:
        value = float(rate)
    except ValueError:
        raise ConfigError(f"--mps {text}: RATE[:poisson], cycles per second per target") from None
    return {"mps": value, "arrivals": arrivals or "fixed"}


def _spec_stream(stream: str) -> dict[str, Any]:
    """spec's --stream, the same spec as run's without forward=, times=, target= and early=
    (spec's forward is its verify work)."""
    fields = _stream_fields(stream)
    if fields["forward_ms"] is not None or fields["layer_times"] is not None or fields["target"] != "clock" \
            or fields["early"] != "off":
        raise ConfigError(f"spec --stream {stream}: the forward is the verify work (--verify-work); give "
                          "layers[:LAYERS][,cost=MS]")
    del fields["target"], fields["early"]
    return fields


def _stream_fields(text: str) -> dict[str, Any]:
    """--stream's one spec as the request's fields."""
    from hopbench.workload.stream import parse_args

    st = parse_args(text)
    return {"stream": st.mode, "layers": st.layers, "forward_ms": st.forward_ms, "stream_cost_ms": st.cost_ms or 0.0,
            "layer_times": Path(st.times) if st.times is not None else None, "target": st.target or "clock",
            "early": st.early or "off"}


#: run's grouped options (a kind's settings in one spec, as --codec zstd:3): each parses its
#: text into the request's fields it names
GROUPED: dict[str, Callable[[Any], dict[str, Any]]] = {
    "memory": _memory_fields, "mps": _mps_fields, "link": _link_fields, "payload": _payload_fields,
    "stream": _stream_fields}
#: run's parameters that typer spells otherwise than the request's field
RENAMED = {"bytes_": "bytes", "timeout": "timeout_s"}


@app.command(cls=Respelled)
def run(
    peer: Annotated[str, typer.Option(help="HOST[:PORT] of a `hopbench serve` (port 5201 when omitted; [IPv6]:PORT).", rich_help_panel="Connection")],
    port: Annotated[Optional[int], typer.Option("--port", "-p", min=1, max=65535, help="The server's port; overrides the one in --peer (iperf3's -p).", rich_help_panel="Connection")] = None,
    transport: Annotated[str, typer.Option(help=TRANSPORT_HELP, rich_help_panel="Connection")] = "tcp",
    tokens: Annotated[Optional[str], typer.Option(help="Accepted tokens per cycle, e.g. 1,2,3 (61,440 B each).", rich_help_panel="Payload")] = None,
    bytes_: Annotated[Optional[str], typer.Option("--bytes", help="Request sizes: a list, 'grid' (config's log grid) or log:LO:HI:N.", rich_help_panel="Payload")] = None,
    k: Annotated[Optional[int], typer.Option(help="Draft depth K (ids in the reply); default from configs/shape.toml.", rich_help_panel="Payload")] = None,
    reply_bytes: Annotated[Optional[str], typer.Option(help="Reply size: default K x id bytes; 'same' for symmetric (echo-sized) replies, or a number.", rich_help_panel="Payload")] = None,
    cycles: Annotated[Optional[int], typer.Option(help="Timed cycles per payload (default 1000; 100 with --stream, whose cycles follow a real-time forward).", rich_help_panel="Timing")] = None,
    time_s: Annotated[Optional[float], typer.Option("--time", "-t", min=0.01, help="Measure about this many seconds per payload instead of --cycles (iperf3's -t; a 20-cycle probe per payload sets the count).", rich_help_panel="Timing")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warm-up cycles per payload (run, recorded, excluded; default 100, 10 with --stream).", rich_help_panel="Timing")] = None,
    verify: Annotated[bool, typer.Option(help="Server checks a CRC-32 of every request body (the bytes; spec's --verify-work is the target's forward).", rich_help_panel="Payload")] = False,
    gap_ms: Annotated[float, typer.Option(help="Think time between cycles in ms (a decode cycle leaves ~75-90 ms).", rich_help_panel="Timing")] = 0.0,
    poll: Annotated[Poll, typer.Option(help="Receive path: block, busy-poll, or auto (ucx busy-polls, tcp/zmq block; a --remote-drafter payload busy-polls on a client of 4+ CPUs).", rich_help_panel="Connection")] = Poll.auto,
    timeout: Annotated[float, typer.Option(help="Seconds any blocking call may wait.", rich_help_panel="Connection")] = TIMEOUT_S,
    out: Annotated[Optional[Path], typer.Option(help="Result folder (must not exist).", rich_help_panel="Output")] = None,
    name: Annotated[str, typer.Option(help="Suffix of the result folder name.", rich_help_panel="Output")] = "run",
    results_dir: Annotated[Path, typer.Option(help="Where result folders go.", rich_help_panel="Output")] = Path("results"),
    shape: Annotated[Optional[Path], typer.Option(help="Shape config (default configs/shape.toml).", rich_help_panel="Output")] = None,
    opt: Annotated[Optional[list[str]], typer.Option(help=OPT_HELP, rich_help_panel="Connection")] = None,
    secret: Annotated[Optional[str], typer.Option(envvar="HOPBENCH_SECRET", help="Shared secret for a server started with --secret.", rich_help_panel="Connection")] = None,
    link: Annotated[Optional[str], typer.Option(help="The link: [NAME][,rate=MBIT][,interface=IF]. NAME: its name in the results (default 'run'), e.g. 1gbe-lab; rate: its nominal rate in Mbit/s, checked against the interface's speed and recorded (fit compares beta with it); interface: warn unless the route to the peer leaves by it.", rich_help_panel="Connection")] = None,
    strict: Annotated[bool, typer.Option(help="Refuse to measure when the pre-flight checks warn.", rich_help_panel="Output")] = False,
    cpu: Annotated[Optional[str], typer.Option(help="Pin the client (and its threads) to these CPUs, e.g. 0 or 0-1.", rich_help_panel="Connection")] = None,
    floor: Annotated[bool, typer.Option(help="Also measure the instrument's floor: a 64 B round trip of the same transport on loopback.", rich_help_panel="Output")] = True,
    memory: Annotated[str, typer.Option(help="Where the payload lives: host, or cuda (GPU; needs the gpu extra), on both ends, or CLIENT:SERVER (cuda:host); with cuda, ,direct has UCX move GPU memory (default ,staged: pinned D2H/H2D copies, any transport).", rich_help_panel="GPU")] = "host",
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document on stdout at the end (the table goes to stderr; docs/RESULTS.md).", rich_help_panel="Output")] = False,
    loop: Annotated[Loop, typer.Option(help=LOOP_HELP, rich_help_panel="Connection")] = Loop.auto,
    codec: Annotated[str, typer.Option(help="Payload codec(s), a list measured side by side in one session: none, zstd[:LEVEL], lz4, blosc2[:FILTER+CODEC[:LEVEL]], fp8, int8 (docs/CODECS.md).", rich_help_panel="Payload")] = "none",
    agreement: Annotated[bool, typer.Option(help="Before the run, measure each lossy codec's effect on a real network's predictions (the shipped proxy: hopbench codecs --agreement); report.json carries it, verdict and report put it beside each codec's call.", rich_help_panel="Payload")] = False,
    agreement_from: Annotated[Optional[Path], typer.Option(help="The same from a saved record (hopbench codecs --agreement --save FILE, e.g. on the user's drafter).", rich_help_panel="Payload")] = None,
    clients: Annotated[int, typer.Option(help="Targets at once against one server (one process and session each, pinned round robin over --cpu, plans started together), after one target alone as the reference (docs/RESULTS.md).", rich_help_panel="Load")] = 1,
    mps: Annotated[Optional[str], typer.Option(help="Open loop: RATE[:poisson], cycles per second per target (sockperf's --mps) at fixed intervals or Poisson arrivals, latency from each send's intended time (wrk2); default closed loop.", rich_help_panel="Load")] = None,
    payload: Annotated[str, typer.Option("--payload", help="The payload: DESIGN[,from=FILE]. DESIGN: taps (the aux layers' hidden states, 5 x hidden per position) or projected (the drafter's fc run on the target: one hidden-wide row, 12,288 B, per position; docs/STREAM.md); from: the hidden states a codec encodes, a .safetensors (FILE or FILE:TENSOR) or .npy file of \\[tokens, layers, hidden] (default synthetic).", rich_help_panel="Payload")] = "taps",
    stream: Annotated[str, typer.Option(help="off, or layers[:LAYERS][,forward=MS][,cost=MS][,times=FILE][,target=WHO][,early=WHAT]: each aux layer's K + 1 rows sent while the target's verify forward computes (when its layer ends), the accept count at the forward's end; measures the exposed hop (docs/STREAM.md). LAYERS: the target's layer count (78, GLM-5.2's); forward: the verify forward's length (the shape's cycle - t_draft, 73.46); cost: the extraction cost a forward; times: a per-layer profile (each layer's end in ms, one a line); target: who produces the chunks, clock (the forward's schedule, default) or gpu[:piecewise|full|eager] (a target-shaped stack on this host's GPU runs each verify forward and each tap's rows go as they land, its extraction cost measured: \"A real producer\"; cpu: its stand-in); early: with --remote-drafter, what of the drafter's forward starts on the landed taps: off, fc (each tap's slice of fc) or all (the whole forward once the last tap is in).", rich_help_panel="Stream")] = "off",
    remote_drafter: Annotated[bool, typer.Option(help="Each token payload also runs the server's drafter model (`serve --drafter SHAPE`): the hop with its forward in it, its draft_ns per cycle, beside the hop without it (docs/DRAFTER.md).", rich_help_panel="Drafter")] = False,
):
    """Measure the hop against a server: one row per payload, files in results/."""
    _pin(cpu)
    from hopbench.orchestration import runjob

    req = run_request(locals())
    say = functools.partial(print, file=sys.stderr) if json_out else print
    console = runjob.RunConsole(say, lambda text: typer.secho(f"warning: {text}", fg="yellow", err=True))
    with _kept_on_interrupt():
        folder = runjob.run(req, console)
    if json_out:
        print(runjob.result_document(folder))


@app.command(cls=Respelled)
def spec(
    peer: Annotated[Optional[str], typer.Option(help="HOST[:PORT] of a `hopbench serve` (port 5201 when omitted): the drafter (not needed for --modes local).")] = None,
    port: PortOpt = None,
    modes: Annotated[str, typer.Option(help="Modes measured side by side: local, sync, overlap, stream (the aux layers streamed during the verify, docs/STREAM.md).")] = "local,sync,overlap",
    transport: Annotated[str, typer.Option(help=TRANSPORT_HELP)] = "tcp",
    k: Annotated[int, typer.Option(help="Draft depth K (the study's optimum: 2).")] = 2,
    accept: Annotated[str, typer.Option(help="Acceptance model: per-position probabilities (K values), geometric:A or hist:PATH. Default: the study's 2.149 tokens/cycle at K=2.")] = "0.74,0.5527",
    verify_work: Annotated[str, typer.Option(help="Target's verify work: sleep:MS, spin:MS, file:PATH or gpu-read:BYTES. Default: the study's 89.34 - 15.88 ms (the forward).")] = "sleep:73.46",
    draft_local: Annotated[str, typer.Option(help="Draft work when co-located (mode local).")] = "sleep:15.88",
    draft_remote: Annotated[str, typer.Option(help="The remote drafter's own work per draft: a work model (sleep:MS, spin:MS, file:PATH, gpu-read:BYTES, batch:A+B; batch:FOLDER fits A + B to a hopbench drafter folder's forwards of 1..M targets), or model: the server's drafter model (serve --drafter), used unasked where the server runs one.")] = "sleep:15.88",
    fanout: Annotated[int, typer.Option(help="Overlap: outcomes the drafter pre-drafts while the target verifies.")] = 2,
    cycles: Annotated[int, typer.Option(help="Timed cycles per mode per repeat.")] = 100,
    warmup: Annotated[int, typer.Option(help="Warm-up cycles per mode per repeat.")] = 5,
    repeats: Annotated[int, typer.Option(help="Repeats (the unit of the intervals).")] = 5,
    time_scale: Annotated[float, typer.Option(help="Multiply every modelled duration (recorded), e.g. 0.2 for a quick look.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the acceptance draws and the mode order (0 = draw one, recorded).")] = 0,
    opt: Annotated[Optional[list[str]], typer.Option(help=OPT_HELP)] = None,
    secret: Annotated[Optional[str], typer.Option(envvar="HOPBENCH_SECRET", help="Shared secret of the server.")] = None,
    poll: Annotated[Poll, typer.Option(help="Receive path: block, busy-poll, or auto.")] = Poll.auto,
    cpu: Annotated[Optional[str], typer.Option(help="Pin the target to these CPUs.")] = None,
    link: Annotated[Optional[str], typer.Option(help="The link: [NAME][,rate=MBIT]: its name in the results and its nominal rate (Mbit/s), recorded.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Result folder (must not exist).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where result folders go.")] = Path("results"),
    codec: Annotated[str, typer.Option(help="The hidden states cross encoded with this codec, inside the hop (docs/CODECS.md): none, zstd[:LEVEL], lz4, blosc2[:...], fp8, int8.")] = "none",
    payload_from: Annotated[Optional[str], typer.Option(help="Hidden states a codec encodes (.safetensors / .npy); default synthetic.")] = None,
    targets: Annotated[Optional[str], typer.Option(help="Several targets against one batching drafter: a list of target counts M (e.g. 1,2,4), each M target processes at once; prints per-target and aggregate tok/s and the largest M at which every target still beats co-located (docs/SPEC.md).")] = None,
    batch_window_ms: Annotated[float, typer.Option(help="--targets: drafts arriving within this window of the first run as one batch (with --draft-remote batch:A+B).")] = 2.0,
    max_batch: Annotated[int, typer.Option(help="--targets: the most drafts in one batch (0: every target).")] = 0,
    stream: Annotated[str, typer.Option(help="layers[:LAYERS][,cost=MS]: add mode stream (each aux layer's K + 1 rows sent as its layer ends within the verify, the accept count at its end; the remote drafter starts on the accept; docs/STREAM.md). LAYERS: the target's layer count (78, GLM-5.2's); cost: the extraction cost a forward (`run --stream layers --target gpu` measures it).")] = "off",
    json_out: Annotated[bool, typer.Option("--json", help="--targets: the run's record as one JSON document on stdout (the lines go to stderr).")] = False,
    shape: ShapeOpt = None,
):
    """Run the speculative decode loop itself over the link: local vs sync vs overlap tok/s (docs/SPEC.md)."""
    if not targets:
        _pin(cpu)
    from hopbench.orchestration.spec import SpecConfig, run_spec_cli

    sh = _shape(shape).shape
    st = _spec_stream(stream)
    chosen = tuple(m for m in modes.split(",") if m)
    cfg = SpecConfig(bytes_per_token=sh.bytes_per_token, id_bytes=sh.id_bytes,
                     modes=chosen + (("stream",) if st["stream"] == "layers" and "stream" not in chosen else ()),
                     taps=tuple(sh.aux_layers), layers=st["layers"], stream_cost_ms=st["stream_cost_ms"],
                     transport=transport, k=k, accept=accept,
                     verify=verify_work, draft_local=draft_local, draft_remote=draft_remote, fanout=fanout, cycles=cycles,
                     warmup=warmup, repeats=repeats, seed=seed, time_scale=time_scale, poll=poll.value,
                     transport_settings=split_options(opt), **_spec_link(link), codec=codec,
                     payload_from=payload_from, hidden=sh.hidden, batch_window_ms=batch_window_ms, max_batch=max_batch)
    host, port = _address(peer, port) if peer else (None, None)
    with _kept_on_interrupt():
        if targets:
            _spec_targets(host, port, cfg, targets, out, results_dir, secret, cpu, json_out)
            return
        run_spec_cli(host, port, cfg, out, results_dir, secret=secret or None)


@contextlib.contextmanager
def _kept_on_interrupt() -> Iterator[None]:
    """Ctrl-C: exit 130 with the notes naming what was kept (runner.naming_what_was_kept)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        print(f"interrupted: {'; '.join(getattr(exc, '__notes__', []))}", file=sys.stderr)
        raise typer.Exit(130) from None


def _spec_targets(host: str | None, port: int | None, cfg: Any, targets: str, out: Path | None, results_dir: Path,
                  secret: str | None, cpu: str | None, json_out: bool) -> None:
    import json

    from hopbench.config import parse_int_list
    from hopbench.orchestration import spectargets as SPT
    from hopbench.orchestration.runner import naming_what_was_kept

    if host is None or port is None:
        raise ConfigError("--targets needs --peer (a hopbench serve --max-sessions M to be the drafter)")
    R.refuse_existing(out)
    say = functools.partial(print, file=sys.stderr) if json_out else print
    made: list[Path] = []

    def make() -> Path:
        made.append(R.new_folder(results_dir, "spec-targets", out))
        say(f"hopbench spec --targets {targets} -> {made[0]}")
        return made[0]
    cfg = cfg.check()
    if cfg.draft_remote_from:
        say(f"--draft-remote {cfg.draft_remote}: {cfg.draft_remote_from}")
    with naming_what_was_kept(made):
        folder = SPT.run_spec_targets(host, port, cfg, parse_int_list(targets, "--targets"), make,
                                     secret=secret or None, cpu=cpu, say=say,
                                     warn=lambda text: typer.secho(f"warning: {text}", fg="yellow", err=True))
    doc = R.ResultFolder(folder).read().record
    for line in SPT.summary_lines(doc):
        say(line)
    say(f"results: {folder}")
    if json_out:
        print(json.dumps(doc, indent=1))


@app.command()
def fanin(
    ray_address: Annotated[str, typer.Option("--ray", help="The Ray cluster: ADDRESS (head:6379) or auto.")],
    server: Annotated[str, typer.Option(help="The node (its address, as `hopbench matrix` names it) that serves: the drafter.")],
    targets: Annotated[int, typer.Option(help="Targets at once, one per other node (after the first alone, the reference).")] = 2,
    tokens: Annotated[Optional[str], typer.Option(help="Accepted tokens per cycle, e.g. 1,3.")] = "1,3",
    bytes_: Annotated[Optional[str], typer.Option("--bytes", help="Request sizes in bytes.")] = None,
    transport: Annotated[str, typer.Option(help=TRANSPORT_HELP)] = "tcp",
    cycles: Annotated[int, typer.Option(help="Timed cycles per payload per target.")] = 500,
    time_s: Annotated[Optional[float], typer.Option("--time", "-t", min=0.01, help="About this many seconds per payload instead of --cycles (every target the same time: the better measure of sharing).")] = None,
    warmup: Annotated[int, typer.Option(help="Warm-up cycles per payload.")] = 50,
    wait_nodes: Annotated[int, typer.Option(help="Wait (up to 2 minutes) until the cluster has this many alive nodes.")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="Result folder (must not exist).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where result folders go.")] = Path("results"),
    json_out: JsonOpt = False,
):
    """Targets on several Ray nodes against one server node, started together (docs/MATRIX.md "Fan-in")."""
    from hopbench.orchestration import clients as CL
    from hopbench.orchestration import fanin as FI
    from hopbench.orchestration import matrix as M
    from hopbench.orchestration import runjob
    from hopbench.orchestration.runner import naming_what_was_kept

    R.refuse_existing(out)
    say = functools.partial(print, file=sys.stderr) if json_out else print

    def plan(host: str, port: int) -> Any:
        return runjob.plan(runjob.RunRequest(host=host, port=port, transport=transport, tokens=tokens, bytes=bytes_,
                                             cycles=cycles, time_s=time_s, warmup=warmup, clients=targets))
    agents = M.RayAgents(ray_address, wait_nodes=wait_nodes)
    made: list[Path] = []

    def make() -> Path:
        made.append(R.new_folder(results_dir, "fanin", out))
        return made[0]
    try:
        with naming_what_was_kept(made):
            record = FI.run_fanin(agents, server, targets, plan, make, say=say,
                                  warn=lambda text: typer.secho(f"warning: {text}", fg="yellow", err=True))
    finally:
        agents.close()
    CL.result_table(record["payloads"], say)
    say(f"results: {record['folder']}")
    if json_out:
        print(runjob.result_document(record["folder"]))


@app.command("spec-rungs")
def spec_rungs(config: Annotated[Path, typer.Argument(help="Spec config (configs/spec.toml).")] = Path("configs/spec.toml"),
               results_dir: Annotated[Path, typer.Option(help="Where result folders go.")] = Path("results")):
    """`hopbench spec` on each emulated rung of a config (namespaces + tbf), then the plots."""
    from hopbench.analysis import spec as A
    from hopbench.orchestration.spec import run_spec_rungs

    parent = run_spec_rungs(config, results_dir, _shape(None).shape)
    folders = R.result_folders(parent)
    for f in folders:
        print(f"== {f.name}")
        report, res = A.analyse(f)
        print(A.format_table(report, res))
    try:
        from hopbench.analysis import plot as PL

        print("plots: " + ", ".join(str(p) for p in PL.write_spec(parent, folders)))
    except HopbenchError as exc:
        print(f"no plots: {exc}")
    print(f"results: {parent}")


@app.command("spec-summary")
def spec_summary(results: Annotated[Path, typer.Argument(help="A hopbench spec result folder.")]):
    """Tokens/s per mode of a `hopbench spec` folder, with arithmetic and projection."""
    from hopbench.analysis import spec as A

    report, res = A.analyse(results)
    print(A.format_table(report, res))


@app.command()
def sweep(
    config: Annotated[Path, typer.Argument(help="Sweep config (configs/sweep.toml).")] = Path("configs/sweep.toml"),
    quick: Annotated[bool, typer.Option(help="The \\[quick] profile: a smaller grid, under 2 minutes.")] = False,
    rungs: Annotated[Optional[str], typer.Option(help="Only these rungs (comma-separated names from configs/rungs/).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Sweep folder (resumed when it holds an unfinished sweep).")] = None,
    new: Annotated[bool, typer.Option(help="Start afresh even if an unfinished sweep of this config exists.")] = False,
    results_dir: Annotated[Path, typer.Option(help="Where sweep folders go.")] = Path("results"),
    analyse: Annotated[bool, typer.Option(help="Run fit, verdict and plot on the result at the end.")] = True,
    strict: Annotated[bool, typer.Option(help="Refuse to measure when the pre-flight checks warn.")] = False,
    shape: Annotated[Optional[Path], typer.Option(help="Shape config (default configs/shape.toml).")] = None,
    skip_missing: Annotated[bool, typer.Option(help="Measure without the transports that are not installed here (otherwise the pre-flight refuses).")] = False,
):
    """Measure rungs x transports x payloads, interleaved and repeated; resumable (run the same command again)."""
    from hopbench.config_sweep import load_sweep
    from hopbench.orchestration.sweep import SweepOptions, run_sweep
    from hopbench.shape import load_shape

    scfg = load_shape(shape)
    cfg = load_sweep(config, quick=quick)
    only = [r for r in rungs.split(",") if r] if rungs else None
    bar = LiveBar() if sys.stderr.isatty() else None
    try:
        folder = run_sweep(cfg, scfg.shape, results_root=results_dir, out=out,
                           options=SweepOptions(resume=not new, only_rungs=only, strict=strict, analyse=analyse,
                                                skip_missing=skip_missing, forward_ms=scfg.cycle_ms - scfg.t_draft_ms),
                           on_progress=bar.update if bar else None)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if bar:
            bar.stop()
    print(f"sweep results: {folder}")
    if analyse:
        from hopbench.analysis import commands as analysis

        analysis.report_all(folder, scfg)
        print(f"report: {analysis.write_report(folder, scfg)}")


@app.command()
def matrix(
    ray_address: Annotated[str, typer.Option("--ray", help="The Ray cluster: ADDRESS (head:6379) or auto (the one this node is in).")],
    pairs: Annotated[str, typer.Option(help="unordered (each pair once, the first node as client) or ordered (both directions).")] = "unordered",
    concurrency: Annotated[int, typer.Option(help="Pairs measured at once within a round of disjoint pairs (0: the whole round; 1: strictly one pair at a time).")] = 0,
    interface: Annotated[Optional[str], typer.Option(help="Measure over this interface on every node (IFNAME), or per node: ADDR=IFNAME,... (default: the address Ray uses).")] = None,
    tokens: Annotated[str, typer.Option(help="Accepted tokens per cycle, e.g. 1,3 (61,440 B each).")] = "1,3",
    bytes_: Annotated[Optional[str], typer.Option("--bytes", help="Extra request sizes in bytes (default 64: with T1 and T3, three sizes for the alpha-beta fit; 'none' for none).")] = "64",
    transports: Annotated[str, typer.Option(help="Transports, comma-separated.")] = "tcp",
    repeats: Annotated[int, typer.Option(help="Repeats (each pair's cells interleaved within each).")] = 3,
    cycles: Annotated[int, typer.Option(help="Timed cycles per cell.")] = 200,
    warmup: Annotated[int, typer.Option(help="Warm-up cycles per cell.")] = 20,
    quick: Annotated[bool, typer.Option(help="2 repeats x 60 cycles: a first look in well under 3 minutes on 4 nodes.")] = False,
    wait_nodes: Annotated[int, typer.Option(help="Wait (up to 2 minutes) until the cluster has this many alive nodes.")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="The matrix folder (resumed when it holds an unfinished matrix of this configuration).")] = None,
    new: Annotated[bool, typer.Option(help="Start afresh even if an unfinished matrix of this configuration exists.")] = False,
    results_dir: Annotated[Path, typer.Option(help="Where matrix folders go.")] = Path("results"),
    opt: Annotated[Optional[list[str]], typer.Option(help=OPT_HELP)] = None,
    poll: Annotated[Poll, typer.Option(help="Receive path on every node.")] = Poll.auto,
    loop: LoopOpt = Loop.auto,
    shape: ShapeOpt = None,
    codec: Annotated[str, typer.Option(help="Payload codec(s) measured beside the raw bytes (docs/CODECS.md), e.g. none,fp8.")] = "none",
    json_out: JsonOpt = False,
):
    """Every pair of a Ray cluster's nodes: the hop per pair, outliers named with a likely cause, heatmaps (docs/MATRIX.md)."""
    from hopbench.analysis import commands as analysis
    from hopbench.orchestration import matrix as M
    from hopbench.orchestration.sweep.run import progress

    if pairs not in ("ordered", "unordered"):
        raise ConfigError(f"--pairs {pairs!r}: expected ordered or unordered")
    s = _shape(shape)
    settings = split_options(opt)
    argv = sys.argv[sys.argv.index("matrix") + 1:] if "matrix" in sys.argv else []
    cfg = M.checked(M.MatrixConfig(
        **M.shape_fields(s), tokens=tuple(parse_int_list(tokens, "--tokens")),
        transports=tuple(t for t in transports.split(",") if t),
        bytes=tuple(parse_int_list(bytes_, "--bytes")) if bytes_ and bytes_ != "none" else (),
        repeats=2 if quick else repeats, cycles=60 if quick else cycles, warmup=10 if quick else warmup,
        ordered=pairs == "ordered", concurrency=concurrency, poll=poll.value, command=M.command_line(argv),
        transport_settings=settings, codecs=tuple(c.strip() for c in codec.split(",") if c.strip()) or ("none",)))
    folder = M.open_folder(out, new, results_dir, cfg)
    say = functools.partial(print, file=sys.stderr) if json_out else print
    agents = M.RayAgents(ray_address, M.parse_interfaces(interface), settings, poll.value, loop.value,
                         wait_nodes=wait_nodes)
    bar = LiveBar() if sys.stderr.isatty() else None
    try:
        M.run_matrix(agents, cfg, folder, log=say, on_progress=bar.update if bar else progress)
    except KeyboardInterrupt:
        print(f"interrupted: finished cells are kept in {folder}; run the same command again to resume", file=sys.stderr)
        raise typer.Exit(130) from None
    finally:
        if bar:
            bar.stop()
        agents.close()
    doc = analysis.matrix_report(folder, cfg.transports[0], s, say)
    if json_out:
        import json as _json

        print(_json.dumps(doc, indent=1))
