"""The client's side of a plan, one path per plan kind, as the server has its serving paths
(hopbench.core.serving): chosen once by `kinds.client_path(plan)`, run over the plan's data
route, resolved once (`DataPath`: the transport and its channel). iperf3's `sp->snd`.

Each path has three steps, called by `Session.measure` in this order:
- `prepare(run)`: everything untimed before the PLAN crosses, the rules of its kind checked
  (a random body and its CRC-32, a codec's bodies and their CRCs, GPU buffers); returns the
  plan to send (it may now carry its `payload_crc32`);
- `cycles(data, run)`: the timed loop over the data channel; the round trips completed are
  in `run.progress.done`, also when it raises;
- `after(data, run)`: what follows the last reply (the reply's tail, the server's stage
  times).

The paths: HostRoundTrip, GpuStaged, GpuDirect, CodecRoundTrip and StreamedRoundTrip, each
a ClientPath reading one PlanRun (the plan, its measurement, transport and clock); the
drafter kinds' paths are in hopbench.core.drafting, the spec kind's in hopbench.core.kinds.spec.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np

from hopbench.columns import PRODUCER_STAGE_COLUMNS
from hopbench.core import protocol as P
from hopbench.core.inputs import HiddenSource, Producer, Schedule
from hopbench.core.timing import (
    LoopHooks,
    LoopPolicy,
    Pacing,
    Progress,
    StreamHooks,
    produced_cycles,
    run_cycles,
    streamed_cycles,
)
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ConfigError, ProtocolError


@dataclass
class DataPath:
    """A plan's data route, resolved once per plan: its transport, the channel (the control
    connection itself for a transport that runs on it) and the server's channel info."""

    transport: Transport
    channel: Channel
    server_info: dict[str, Any]


@dataclass
class PlanRun:
    """One plan's run as its path sees it: the plan, where its samples and stages go, and the
    loop's settings."""

    plan: P.Plan
    m: Any  # hopbench.core.client.Measurement
    transport: Transport
    settings: dict[str, Any]  # this transport's client settings
    clock: Callable[[], int]
    gap_s: float
    loop: str
    share_cpu: bool
    source: HiddenSource | None = None  # a codec plan's hidden states (hopbench.workload.hidden.Source)
    schedule: np.ndarray | None = None  # open loop: each cycle's intended send time
    spec: Any = None  # a spec plan's target inputs (hopbench.core.spec.SpecInputs)
    progress: Progress = field(default_factory=Progress)
    loop_info: dict[str, str] = field(default_factory=dict)  # which timed loop ran (hopbench.core.native)

    @property
    def ids(self) -> P.ReplyIds:
        return P.ReplyIds(self.plan.k, self.plan.id_bytes)

    def loop_args(self, loop: str | None = None, lag: np.ndarray | None = None) -> dict[str, Any]:
        """run_cycles' clock, pacing (this run's think time, or its open-loop schedule with
        `lag`), loop policy (`loop`: this path's own choice, else the run's) and progress."""
        return {"clock": self.clock, "pacing": Pacing(self.gap_s, schedule=self.schedule, lag=lag),
                "loop": LoopPolicy(loop or self.loop, self.share_cpu, self.loop_info), "progress": self.progress}


class ClientPath:
    name = "?"
    #: the host buffer the last reply lands in (an abort from the server is read from it)
    reply_host: Any = None

    def abort_bytes(self, plan: P.Plan) -> int:
        """The size of the message the server expects next: this end's abort is cut to it."""
        return plan.request_frame_bytes

    def prepare(self, run: PlanRun) -> P.Plan:
        return run.plan

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        raise NotImplementedError

    def after(self, data: DataPath, run: PlanRun) -> None:
        """After the last reply: its zero tail checked, then the arrays the plan's kind declares
        (Plan.tails) received into the stages."""
        check_tail(self.reply_host, run.plan)
        stages = run.m.stages
        stages.update(tail_stages(P.recv_tails(data.channel, run.plan)))
        if "server_h2d_ns" in stages and "transfer_ns" in stages:
            stages["wire_ns"] = stages["transfer_ns"] - stages["server_h2d_ns"] - stages["server_d2h_ns"]


#: a tail of several columns -> its stages, one per column
TAIL_COLUMNS = {P.SERVER_STAGES.name: ("server_h2d_ns", "server_d2h_ns"),
                P.DRAFT_TAIL.name: ("draft_ns", "queue_ns", "batch_rows", "early_ns", "stage_ns", "back_ns", "server_ns")}


def tail_stages(tails: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The received tails as per-cycle stage columns."""
    out: dict[str, np.ndarray] = {}
    for name, a in tails.items():
        if a.ndim == 1:
            out[name] = a
        else:
            out.update({col: a[:, j].copy() for j, col in enumerate(TAIL_COLUMNS[name])})
    return out


def check_tail(reply: Any, plan: P.Plan) -> None:
    """The bytes of a reply after the K ids are zero (docs/PROTOCOL.md); checked on the last
    reply, after the loop, so it costs nothing per cycle."""
    tail = np.frombuffer(memoryview(reply).cast("B"), dtype=np.uint8)[plan.k * plan.id_bytes:]
    if tail.size and tail.any():
        raise ProtocolError(f"the server's reply carries non-zero bytes after the {plan.k} ids "
                            f"(first at offset {plan.k * plan.id_bytes + int(np.argmax(tail != 0))})")


def _verify_body(run: PlanRun) -> tuple[P.Plan, bytes | None]:
    """With verify: a random body, fixed for the plan, and the plan carrying its CRC-32."""
    if not run.plan.verify:
        return run.plan, None
    body = os.urandom(run.plan.request_bytes - P.SEQ_BYTES)
    return dataclasses.replace(run.plan, payload_crc32=zlib.crc32(body)), body


class HostRoundTrip(ClientPath):
    """Host memory, raw payloads: the timed loop, compiled where it applies; open loop when
    the run has a schedule (each send's lag behind its intended time is `send_lag_ns`)."""

    name = "host round trip"

    def prepare(self, run: PlanRun) -> P.Plan:
        plan, self.body = _verify_body(run)
        return plan

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        chan, plan = data.channel, run.plan
        request, self.reply_host = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        if self.body is not None:
            memoryview(request).cast("B")[P.SEQ_BYTES:] = self.body
        lag = None
        if run.schedule is not None:
            lag = run.m.stages["send_lag_ns"] = np.zeros(plan.total, dtype=np.int64)
            run.m.stages["intended_ns"] = run.schedule
        return run_cycles(chan, request, self.reply_host, run.ids, run.m.samples_ns, **run.loop_args(lag=lag))


class _Gpu(ClientPath):
    """CUDA memory at this end (or at the server's only: then this end is host memory and the
    server's copy times follow the last reply)."""

    def prepare(self, run: PlanRun) -> P.Plan:
        from hopbench.core import gpu

        plan, self.body = _verify_body(run)
        gpu.check_choice((plan.client_memory, plan.server_memory), plan.gpu_path, run.transport, run.settings)
        self.bufs = None
        if plan.client_memory == "cuda":  # the CUDA context before UCX's
            run.m.gpu_info = gpu.device_info()
            request = gpu.Staging(plan.request_bytes)
            self.bufs = (request, gpu.Staging(plan.reply_bytes, request.stream))
            request.fill_random(0)
            if self.body is not None:
                request.host[P.SEQ_BYTES:] = np.frombuffer(self.body, dtype=np.uint8)
                request.h2d()
        return plan

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        if self.bufs is None:  # only the server's end is on the GPU: this end is host memory
            host = HostRoundTrip()
            host.body = self.body
            done = host.cycles(data, run)
            self.reply_host = host.reply_host
            return done
        request, reply = self.bufs
        self.reply_host = reply.host
        return self._loop(data, run, request, reply)

    def _loop(self, data: DataPath, run: PlanRun, request: Any, reply: Any) -> int:
        raise NotImplementedError


class GpuStaged(_Gpu):
    """The copies are a channel wrapper (pinned host buffers), timed with the same clock."""

    name = "GPU staged"

    def _loop(self, data: DataPath, run: PlanRun, request: Any, reply: Any) -> int:
        from hopbench.core.gpu import CLIENT_STAGES, StagedClientChannel

        stages = np.zeros((run.plan.total, len(CLIENT_STAGES)), dtype=np.int64)
        run.m.stages.update({name: stages[:, j] for j, name in enumerate(CLIENT_STAGES)})
        staged = StagedClientChannel(data.channel, request, reply, stages, run.clock)
        return run_cycles(staged, request.host, reply.host, run.ids, run.m.samples_ns, **run.loop_args())


class GpuDirect(_Gpu):
    """The transport moves device memory itself; the seq is stamped on the device untimed."""

    name = "GPU direct"

    def _loop(self, data: DataPath, run: PlanRun, request: Any, reply: Any) -> int:
        return run_cycles(data.channel, request.host, reply.host, run.ids, run.m.samples_ns,
                          hooks=LoopHooks(send_buf=request.device, recv_buf=reply.device,
                                          stamp=partial(request.h2d, 0, P.SEQ_BYTES), settle=reply.d2h),
                          **run.loop_args())


def request_bodies(source: HiddenSource, request_bytes: int, total: int) -> list[np.ndarray]:
    """A codec plan's request bodies (request_bytes - 8 each, after the seq): for a token
    payload (request_bytes = T tokens) body i is the start of tokens i*T .. (i+1)*T - 1, whole
    tokens apart (docs/CODECS.md); another size, byte windows end to end."""
    body_bytes = request_bytes - P.SEQ_BYTES
    per_token = source.bits.shape[1] * 2
    tokens = next((n // per_token for n in (request_bytes, body_bytes) if n % per_token == 0), None)
    return source.bodies(body_bytes, tokens, min(total, -(-source.tokens // (tokens or 1))))


class CodecRoundTrip(ClientPath):
    """The request bodies cross encoded (docs/CODECS.md): windows of the run's hidden states,
    encoded inside the timed hop; the server's decode times follow the last reply."""

    name = "codec round trip"

    def prepare(self, run: PlanRun) -> P.Plan:
        from hopbench.core import codec_wire, codecs

        plan, m, source = run.plan, run.m, run.source
        if source is None:
            raise ConfigError("a codec plan needs its hidden states (hopbench.workload.hidden.Source)")
        codec = codecs.parse(plan.codec or "none", plan.codec_group)
        bodies = request_bodies(source, plan.request_bytes, plan.total)
        self.crcs = codec_wire.expected_crcs(codec, bodies) if plan.verify else [0] * len(bodies)
        if plan.verify:
            plan = dataclasses.replace(plan, payload_crc32=self.crcs[0])
        self.where, self.bodies = codec, bodies
        if plan.client_memory == "cuda":  # the states are born on the GPU: cast there, only the codes cross
            self._on_gpu(plan, codec, m)
        m.codec_info = {"codec": codec.name, "library": self.where.library, "lossless": codec.lossless,
                        "kernel": getattr(self.where, "kernel", "library"), "source": source.record,
                        "bodies": len(self.bodies)}
        if not codec.lossless:  # what the lossy codec does to these states (computed untimed, on the CPU codec)
            m.codec_info["error"] = codecs.reconstruction_error(codec, bodies)
        return plan

    def _on_gpu(self, plan: P.Plan, codec: Any, m: Any) -> None:
        from hopbench.core import gpu, gpucodec

        if codec.lossless and plan.server_memory != "cuda":
            raise ConfigError(f"--codec {codec.name} from CUDA memory: nvCOMP's bitstream needs nvCOMP at both "
                              "ends (--memory cuda for both); fp8 and int8 cross between GPU and CPU ends")
        self.where = gpucodec.for_memory(codec, "cuda")  # fp8/int8: the CPU codec's bytes, so the same CRCs
        m.gpu_info = gpu.device_info()
        self.bodies = [gpu.load().asarray(b) for b in self.bodies]

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        from hopbench.core import codec_wire

        plan, m = run.plan, run.m
        self.stages = codec_wire.CodecStages(np.zeros(plan.total, dtype=np.int64), np.zeros(plan.total, dtype=np.int64))
        m.stages["encode_ns"], m.stages["wire_bytes"] = self.stages.encode_ns, self.stages.wire_bytes
        wrapped = codec_wire.CodecClientChannel(data.channel, self.where, self.bodies, self.crcs, self.stages, run.clock)
        request, self.reply_host = data.channel.alloc(plan.request_bytes), data.channel.alloc(plan.reply_bytes)
        return run_cycles(wrapped, request, self.reply_host, run.ids, m.samples_ns, **run.loop_args("python"))

    def after(self, data: DataPath, run: PlanRun) -> None:
        super().after(data, run)  # the server's decode times follow the last reply
        run.m.stages["codec_wire_ns"] = run.m.samples_ns - self.stages.encode_ns - run.m.stages["decode_ns"]


class _RawChunks:
    """A streamed plan's chunks from host memory: one buffer, its running counter first."""

    def __init__(self, chan: Any, size: int) -> None:
        self.chan, self.buf = chan, chan.alloc(size)

    def ready(self, i: int, j: int, counter: int) -> None:
        P.SEQ.pack_into(self.buf, 0, counter)

    def go(self, i: int, j: int) -> None:
        self.chan.send(self.buf)


class _CodecChunks(_RawChunks):
    """Each chunk encoded on its own as its layer ends (the encode timed: it delays the chunk;
    its ns and wire bytes recorded per cycle), crossing as a codec frame whose seq is the
    running counter."""

    def __init__(self, chan: Any, codec: Any, bodies: list[list[np.ndarray]], m: Any, total: int,
                 clock: Callable[[], int]) -> None:
        from hopbench.core import codecs

        self.chan, self.codec, self.bodies, self.clock = chan, codec, bodies, clock
        self.encode = m.stages["encode_ns"] = np.zeros(total, dtype=np.int64)
        self.wire = m.stages["wire_bytes"] = np.zeros(total, dtype=np.int64)
        self.header = bytearray(codecs.FRAME_BYTES)
        self.counter = 0

    def ready(self, i: int, j: int, counter: int) -> None:
        self.counter = counter

    def go(self, i: int, j: int) -> None:
        from hopbench.core import codec_wire

        ns, n = codec_wire.send_frame(self.chan, self.codec, self.bodies[i % len(self.bodies)][j], self.counter, 0,
                                      self.header, self.clock)
        self.encode[i] += ns
        self.wire[i] += n


class _StagedChunks(_RawChunks):
    """The rows on the GPU, staged: as its layer ends a chunk's rows are copied down into
    pinned memory (timed: the copy delays the chunk; each cycle's copies summed in d2h_ns)
    and the pinned chunk is sent."""

    def __init__(self, chan: Any, bufs: Any, m: Any, total: int, clock: Callable[[], int]) -> None:
        self.chan, self.bufs, self.clock = chan, bufs, clock
        self.d2h = m.stages["d2h_ns"] = np.zeros(total, dtype=np.int64)

    def ready(self, i: int, j: int, counter: int) -> None:
        P.SEQ.pack_into(self.bufs.host(j), 0, counter)

    def go(self, i: int, j: int) -> None:
        t = self.clock()
        self.bufs.down(j)
        self.d2h[i] += self.clock() - t
        self.chan.send(self.bufs.host(j))


class _DirectChunks(_RawChunks):
    """The rows on the GPU, direct: the counter is stamped onto the device before the layer
    ends (untimed) and the transport is handed the device slice."""

    def __init__(self, chan: Any, bufs: Any) -> None:
        self.chan, self.bufs = chan, bufs

    def ready(self, i: int, j: int, counter: int) -> None:
        P.SEQ.pack_into(self.bufs.host(j), 0, counter)
        self.bufs.stamp(j)

    def go(self, i: int, j: int) -> None:
        self.chan.send(self.bufs.device(j))


class _RawBody:
    """A streamed plan's body in host memory, raw: its chunks from one buffer, the reply
    received into host memory. The bodies below vary what `chunks` and `reply` build."""

    def __init__(self, run: PlanRun) -> None:
        self.reply_host: Any = None

    def chunks(self, chan: Any, run: PlanRun, size: int) -> _RawChunks:
        return _RawChunks(chan, size)

    def reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        """The reply's receive (inside the hop) and what follows the sample, untimed."""
        host = self.reply_host = chan.alloc(run.plan.reply_bytes)
        return (lambda i: chan.recv_into(host)), (lambda: None)


class _CodecBody(_RawBody):
    """Windows of the run's hidden states, K + 1 tokens each, split by aux layer (chunk j
    holds layer j's K + 1 rows), each chunk encoded on its own in the hop."""

    def __init__(self, run: PlanRun) -> None:
        from hopbench.core import codecs

        super().__init__(run)
        plan, source = run.plan, run.source
        assert plan.stream is not None
        chunks, size = plan.stream.chunks, plan.stream.chunk_bytes
        if source is None:
            raise ConfigError("a codec plan needs its hidden states (hopbench.workload.hidden.Source)")
        tokens, width = size // (source.width * 2), source.width
        if source.layers != chunks or tokens * width * 2 != size:
            raise ConfigError(f"streamed chunks of {size:,} B do not split {source.label}'s tokens of {source.layers} "
                              f"layers x {width} values by layer")
        assert plan.codec is not None
        self.codec = codecs.parse(plan.codec, plan.codec_group)
        self.bodies: list[list[np.ndarray]] = []  # per body of the source, its chunks
        for body in source.bodies(tokens * chunks * width * 2, tokens, min(plan.total, -(-source.tokens // tokens))):
            rows = body.view(np.uint16).reshape(tokens, chunks, width)
            self.bodies.append([np.ascontiguousarray(rows[:, j, :]).view(np.uint8).reshape(-1) for j in range(chunks)])
        run.m.codec_info = {"codec": self.codec.name, "library": self.codec.library, "lossless": self.codec.lossless,
                            "kernel": "library", "source": source.record, "bodies": len(self.bodies)}
        if not self.codec.lossless:
            run.m.codec_info["error"] = codecs.reconstruction_error(self.codec, [c for b in self.bodies for c in b])

    def chunks(self, chan: Any, run: PlanRun, size: int) -> _RawChunks:
        return _CodecChunks(chan, self.codec, self.bodies, run.m, run.plan.total, run.clock)


class _GpuBody(_RawBody):
    """CUDA memory at one end or both: the choice checked against the transport and, where
    this end's memory is CUDA, the rows' device and pinned buffers; an end in host memory
    sends and receives as the raw body does. Staged and direct differ in `_chunks`/`_reply`."""

    def __init__(self, run: PlanRun) -> None:
        from hopbench.core import gpu

        super().__init__(run)
        plan = run.plan
        assert plan.stream is not None
        gpu.check_choice((plan.client_memory, plan.server_memory), plan.gpu_path, run.transport, run.settings)
        self.gpu: Any = None  # hopbench.core.gpu.ChunkStaging where this end's memory is CUDA
        if plan.client_memory == "cuda":
            run.m.gpu_info = gpu.device_info()
            self.gpu = gpu.ChunkStaging(plan.stream.chunks, plan.stream.chunk_bytes, plan.reply_bytes)

    def chunks(self, chan: Any, run: PlanRun, size: int) -> _RawChunks:
        return super().chunks(chan, run, size) if self.gpu is None else self._chunks(chan, run)

    def reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        if self.gpu is None:
            return super().reply(chan, run)
        self.reply_host = self.gpu.reply.host
        return self._reply(chan, run)

    def _chunks(self, chan: Any, run: PlanRun) -> _RawChunks:
        raise NotImplementedError

    def _reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        raise NotImplementedError


class _StagedBody(_GpuBody):
    """Staged: the rows copied down into pinned memory as each layer ends, the reply's ids
    copied up to the GPU inside the hop (timed as h2d_ns)."""

    def _chunks(self, chan: Any, run: PlanRun) -> _RawChunks:
        return _StagedChunks(chan, self.gpu, run.m, run.plan.total, run.clock)

    def _reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        gpu, clock = self.gpu, run.clock
        h2d = run.m.stages["h2d_ns"] = np.zeros(run.plan.total, dtype=np.int64)

        def staged(i: int) -> None:
            chan.recv_into(gpu.reply.host)
            t = clock()
            gpu.reply.h2d()
            h2d[i] = clock() - t
        return staged, (lambda: None)


class _DirectBody(_GpuBody):
    """Direct: the transport is handed the device slices; the reply lands on the device and
    its ids go back to the host after the sample (untimed) to be checked."""

    def _chunks(self, chan: Any, run: PlanRun) -> _RawChunks:
        return _DirectChunks(chan, self.gpu)

    def _reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        reply = self.gpu.reply
        return (lambda i: chan.recv_into(reply.device)), reply.d2h


#: a streamed plan's bodies, keyed by Plan.body (a codec's chunks are host memory: a streamed
#: plan in CUDA memory sends raw chunks, which the plan's check says before this is reached)
_STREAM_BODIES: dict[str, Callable[[PlanRun], _RawBody]] = {
    "raw": _RawBody, "codec": _CodecBody, "staged": _StagedBody, "direct": _DirectBody}


class StreamedRoundTrip(ClientPath):
    """The streamed hop (docs/STREAM.md): each cycle the forward's clock starts at t0, chunk j
    goes at t0 + its ready time, the accept count (the end message) at t0 + the forward's end
    (+ the extraction cost), and the sample is the **exposed hop**: ids back - that time.
    Recorded per cycle: the chunks' worst send lag, the end message's, and the server's hold
    (its receipt of the end message - of the last chunk, its own clock). The chunks come from
    host memory, raw or each encoded by a codec, or from GPU memory (`--memory cuda`: staged,
    the rows copied down as each layer ends and the reply's ids up inside the hop; or direct)."""

    name = "streamed round trip"

    def __init__(self, sched: Schedule) -> None:
        self.sched = sched  # hopbench.workload.stream.Schedule, or a Producer (--target gpu)
        self.pending = 0  # the size of the next message the server expects (an abort is cut to it)
        self.body: _RawBody  # how the chunks and the reply live (prepare chooses it)

    def abort_bytes(self, plan: P.Plan) -> int:
        return self.pending or plan.request_frame_bytes

    def ids(self, run: PlanRun) -> P.ReplyIds:
        """How the replies' ids are checked (the protocol's ids)."""
        return run.ids

    def prepare(self, run: PlanRun) -> P.Plan:
        """The plan's body, chosen once (_STREAM_BODIES, keyed by Plan.body), readies what the
        chunks and the reply need before the channel (GPU memory: the CUDA context before UCX's)."""
        self.body = _STREAM_BODIES[run.plan.body](run)
        return run.plan

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        plan, chan, m = run.plan, data.channel, run.m
        assert plan.stream is not None
        chunks, size = plan.stream.chunks, plan.stream.chunk_bytes
        if isinstance(self.sched, Producer):  # a real producer (--target gpu): its taps, not a clock
            return self._produced(data, run, self.sched)
        sched = self.sched
        if len(sched.ready_ns) != chunks:
            raise ConfigError(f"the schedule has {len(sched.ready_ns)} chunks, the plan {chunks}")
        out = self.body.chunks(chan, run, size)
        lag = m.stages["send_lag_ns"] = np.zeros(plan.total, dtype=np.int64)
        end_lag = m.stages["end_lag_ns"] = np.zeros(plan.total, dtype=np.int64)
        run.loop_info["loop"] = "python (a streamed plan: its sends follow the forward's schedule)"
        samples = m.samples_ns[:plan.total]
        hooks = self._hooks(chan, run, out.ready, out.go)
        return streamed_cycles(hooks, sched.ready_ns, sched.end_ns, size, samples, (lag, end_lag),
                               run.clock, run.progress, run.gap_s)

    def _hooks(self, chan: Any, run: PlanRun, ready: Callable[[int, int, int], None],
               go: Callable[[int, int], None]) -> StreamHooks:
        """A streamed cycle's steps around its chunks (`ready`, `go`): the end message, the
        reply's receive (the body's) and its check, and the size of what is in flight."""
        end = chan.alloc(P.STREAM_END_BYTES)
        receive, settle = self.body.reply(chan, run)
        self.reply_host = self.body.reply_host

        def send_end(i: int) -> None:
            P.STREAM_END.pack_into(end, 0, i, 0, 0)
            self.pending = P.STREAM_END_BYTES
            chan.send(end)

        def pending(n: int) -> None:
            self.pending = n

        return StreamHooks(ready, go, send_end, receive, settle, self.ids(run).checker(self.reply_host), pending)

    def _produced(self, data: DataPath, run: PlanRun, producer: Producer) -> int:
        """The streamed cycles with a real producer: each chunk is its tap's rows as they
        landed in host memory (the running counter stamped over the first 8 bytes), sent at
        once; the end message when the host sees the forward end."""
        plan, chan, m = run.plan, data.channel, run.m
        assert plan.stream is not None
        chunks, size = plan.stream.chunks, plan.stream.chunk_bytes
        if type(self.body) is not _RawBody:
            raise ConfigError("--target gpu streams the producer's rows from host memory, raw: not with --codec or "
                              "--memory cuda")
        if producer.chunk_bytes != size:
            raise ConfigError(f"the producer's taps are {producer.chunk_bytes:,} B, the plan's chunks {size:,} B")
        stages = {name: np.zeros(plan.total, dtype=np.int64) for name in PRODUCER_STAGE_COLUMNS}
        m.stages.update(stages)
        run.loop_info["loop"] = "python (a streamed plan: its sends follow the target's forward on the device)"
        got: list[Any] = [None]

        def ready(i: int, j: int, counter: int) -> None:
            buf = got[0] = producer.tap(j)
            P.SEQ.pack_into(buf, 0, counter)

        hooks = self._hooks(chan, run, ready, lambda i, j: chan.send(got[0]))
        return produced_cycles(hooks, producer, chunks, size, m.samples_ns[:plan.total], stages, run.clock,
                               run.progress, run.gap_s)


__all__ = ["ClientPath", "CodecRoundTrip", "DataPath", "GpuDirect", "GpuStaged", "HostRoundTrip", "PlanRun",
           "StreamedRoundTrip",
           "check_tail", "tail_stages"]
