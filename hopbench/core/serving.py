"""The server's serving paths: one per plan kind, chosen once per plan (iperf3's
`sp->snd`): HostEcho, GpuStaged, GpuDirect, CodecEcho and StreamDrafter, each a ServingPath
(the drafter kinds' paths are in hopbench.core.drafting, the spec kind's both ends in
hopbench.core.kinds.spec; ServerConfig
is the server's settings, read through a PlanContext). Each checks a plan against
the server's own settings before ACCEPT (`check`) and serves its round trips (`serve`).

A path holds no state: everything it reads arrives in a frozen `PlanContext` (the
server's configuration and environment, this session's client environment), so sessions
served at once share nothing mutable. A fault on the data stream ends the session with
`Ended` after telling the client (an abort in reply-sized messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np

from hopbench.core import native
from hopbench.core import protocol as P
from hopbench.core.batcher import Batcher
from hopbench.core.placement import SessionCpus
from hopbench.core.timing import LoopHooks, LoopPolicy, Progress, echo_cycles
from hopbench.core.transport import Channel, Transport
from hopbench.errors import HopbenchError, ProtocolError
from hopbench.records import TIMEOUT_S


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    caps: P.Caps = field(default_factory=P.Caps)
    idle_timeout_s: float = 60.0  # a connected client silent this long is dropped
    handshake_timeout_s: float = TIMEOUT_S
    data_accept_timeout_s: float = TIMEOUT_S
    poll: str = "auto"
    transport_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    once: bool = False
    secret: str | None = None  # shared secret for the HMAC challenge-response (--secret)
    loop: str = "auto"  # the echo loop: auto (compiled where it applies), native, python
    #: sessions served at once (each in its own thread; the compiled loops release the GIL);
    #: 1 = one at a time, the others told "busy"
    max_sessions: int = 1
    #: request + reply bytes of the plans served at once, across sessions (None: one
    #: largest plan's, max_request_bytes + max_reply_bytes)
    max_memory_bytes: int | None = None
    #: --session-cpus: each plan served on a CPU of its own (hopbench.core.placement.SessionCpus)
    session_cpus: SessionCpus | None = None
    #: --drafter: the server's drafter model behind its batcher (hopbench.core.batcher.Batcher)
    drafter: Batcher | None = None


class Ended(HopbenchError):
    """The session ends; the client has been told already (REFUSE or a data-stream abort)."""


@dataclass(frozen=True)
class PlanContext:
    """What a serving path may read: the server's settings and environment, this session's
    client environment, the control channel, the server's clock and log."""

    config: ServerConfig
    env: dict[str, Any]
    client_env: dict[str, Any] | None
    control: Channel
    clock: Callable[[], int]
    log: Callable[[str], None]
    #: the loop announced in ACCEPT; the host path refuses to run another
    loop: str = ""
    #: the server's StartGroups (plans started together; a batching drafter's batches), or None
    groups: Any = None
    #: the cycles the plan's loop served, also when it raised (the session's statistics)
    progress: Progress = field(default_factory=Progress)

    @property
    def share_cpu(self) -> bool:
        """The client may run on this plan's CPUs: a busy loop then yields now and then."""
        return native.may_share_cpu(self.env, self.client_env)

    @property
    def drafter(self) -> Batcher:
        """The server's drafter, for a plan its check let through (checks refuse a drafter plan
        on a server without one: NO_DRAFTER)."""
        if self.config.drafter is None:
            raise AssertionError("a drafter plan passed its check on a server without a drafter")
        return self.config.drafter

    def settings(self, plan: P.Plan) -> dict[str, Any]:
        """The server's own settings for the plan's transport (never the client's)."""
        return self.config.transport_settings.get(plan.transport, {})


def abort(chan: Channel, reason: str, plan: P.Plan) -> None:
    """End the plan and the session, telling the client on the data stream."""
    try:
        P.send_abort(chan, reason, plan.reply_bytes)
    except HopbenchError:
        pass
    raise Ended(reason)


def bad_request(ctx: PlanContext, chan: Channel, request: Any, seq: int, plan: P.Plan, why: str | None = None) -> None:
    """A message out of place (a request whose seq is not the expected one; `why` says what
    else was wrong): the client's abort (the plan ends, the session goes on), or a protocol
    fault (the server aborts on the data stream and ends the session)."""
    if P.is_abort(request):
        try:
            reason = P.read_abort(chan, request)
        except ProtocolError as exc:  # a frame other than ERROR: answered padded, as every abort is
            abort(chan, str(exc), plan)
        ctx.log(f"client aborted plan at seq {seq}: {reason[:200]}")
        return
    abort(chan, why or f"request carries seq {P.SEQ.unpack_from(request, 0)[0]}, expected {seq}", plan)


class ServingPath:
    """One plan kind's serving: `check` (the REFUSE line, or None; what it parses it keeps),
    then `serve` on the same instance (path_for makes one per plan)."""

    name = "?"
    codec: Any = None  # a codec-carrying plan's codec, parsed by check()
    #: why the compiled echo loop cannot serve this kind (None: it can)
    python_only: str | None = "this plan needs the Python loop (GPU memory or the spec loop)"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        """Why the server cannot serve this plan (a REFUSE line), or None."""
        return None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        """The plan's round trips on the data channel; returns the cycles served."""
        raise NotImplementedError

    def parse_codec(self, plan: P.Plan) -> Any:
        """A codec-carrying plan's codec, parsed once (by check(), a ConfigError there is the
        REFUSE line): serve uses self.codec."""
        from hopbench.core import codecs

        self.codec = codecs.parse(str(plan.codec), plan.codec_group)
        return self.codec


class HostEcho(ServingPath):
    """Host memory: the echo loop, compiled where it applies (hopbench.core.native)."""

    name = "host echo"
    python_only = None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        request, reply = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        ran = native.choose(chan, ctx.config.loop)[1]
        if ctx.loop and ran.kind != native.LoopChoice.parse(ctx.loop).kind:  # what ACCEPT said runs: the client records it
            abort(chan, f"the server announced the {ctx.loop} loop but can run only {ran}", plan)
        return echo_cycles(chan, request, reply, P.ReplyIds(plan.k, plan.id_bytes), plan.total,
                           crc=plan.payload_crc32 if plan.verify else None,
                           on_bad_seq=lambda seq: bad_request(ctx, chan, request, seq, plan),
                           loop=LoopPolicy(ctx.config.loop, ctx.share_cpu), progress=ctx.progress)


class _Gpu(ServingPath):
    """The drafter's side with GPU memory, through the same echo loop: requests end in,
    replies start in, device buffers; the next reply's ids are written into the device
    buffer (a small host->device copy) after each packing, as a drafter would produce them."""

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        from hopbench.core import gpu

        try:
            gpu.check_choice((plan.server_memory,), plan.gpu_path, transport, ctx.settings(plan))
            gpu.load()
        except HopbenchError as exc:
            return f"server cannot hold the payload in CUDA memory: {exc}"
        return None

    @staticmethod
    def buffers(plan: P.Plan) -> tuple[Any, Any]:
        from hopbench.core.gpu import Staging

        req = Staging(plan.request_bytes)
        rep = Staging(plan.reply_bytes, req.stream)
        req.fill_random(1)
        return req, rep


class GpuStaged(_Gpu):
    """A channel wrapper receives into pinned memory (the loop checks seq and CRC there) and
    around each send copies the request host->device and the reply device->host, timed with
    the server's clock; their int64 (total x 2) array follows the last reply."""

    name = "GPU staged"

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        from hopbench.core.gpu import StagedServerChannel

        req, rep = self.buffers(plan)
        timings = np.zeros((plan.total, 2), dtype=np.int64)
        staged = StagedServerChannel(chan, req, rep, timings, ctx.clock)
        done = echo_cycles(staged, req.host, rep.host, P.ReplyIds(plan.k, plan.id_bytes), plan.total,
                           crc=plan.payload_crc32 if plan.verify else None,
                           on_bad_seq=lambda seq: bad_request(ctx, chan, req.host, seq, plan),
                           hooks=LoopHooks(after_pack=partial(rep.h2d, 0, plan.k * plan.id_bytes)), progress=ctx.progress)
        if done == plan.total:
            P.send_tails(chan, plan, {"server_stages": timings})
        return done


class GpuDirect(_Gpu):
    """The transport receives into and sends from the device buffers; the seq check (an
    8-byte copy to host) runs after the reply is sent, off the client's critical path."""

    name = "GPU direct"

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        req, rep = self.buffers(plan)
        crc = plan.payload_crc32 if plan.verify else None

        def bad_seq(seq: int) -> None:
            req.d2h()  # the whole message: it may be the client's abort
            bad_request(ctx, chan, req.host, seq, plan)

        def bad_crc(seq: int) -> None:
            abort(chan, f"request {seq} failed its CRC-32 check (checked after the reply was sent)", plan)

        return echo_cycles(chan, req.host, rep.host, P.ReplyIds(plan.k, plan.id_bytes), plan.total, crc=crc,
                           on_bad_seq=bad_seq, progress=ctx.progress,
                           hooks=LoopHooks(recv_buf=req.device, send_buf=rep.device, on_bad_crc=bad_crc,
                                           fetch=partial(req.d2h, 0, None if crc is not None else P.SEQ_BYTES),
                                           after_pack=partial(rep.h2d, 0, plan.k * plan.id_bytes), check_late=True))


class CodecEcho(ServingPath):
    """A codec plan (hopbench.core.codecs): a channel wrapper receives each frame and decodes
    it into the request buffer, timed with the server's clock, before the echo loop checks
    seq and (with --verify) the decoded body's CRC; the decode times, an int64 per round
    trip, follow the last reply. A frame that does not decode aborts the plan; the client's
    abort ends the plan and the session goes on."""

    name = "codec echo"
    python_only = "a codec plan decodes in Python (the codec's library)"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:

        try:
            codec = self.parse_codec(plan)
            if plan.server_memory == "cuda":
                from hopbench.core import gpucodec

                if codec.lossless and plan.client_memory != "cuda":
                    return (f"server cannot decode this plan: --codec {codec.name} into CUDA memory needs nvCOMP at "
                            "both ends")
                gpucodec.for_memory(codec, "cuda")
        except HopbenchError as exc:
            return f"server cannot decode this plan: {exc}"
        return None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        from hopbench.core import codec_wire

        request, reply = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        reply_ids = P.ReplyIds(plan.k, plan.id_bytes)
        decode_ns = np.zeros(plan.total, dtype=np.int64)
        codec: Any = self.codec
        device_body = None
        if plan.server_memory == "cuda":  # decoded on the drafter's GPU, into its device buffer
            from hopbench.core import gpu, gpucodec

            codec = gpucodec.for_memory(codec, "cuda")
            device_body = gpu.load().empty(plan.request_bytes - P.SEQ_BYTES, dtype="uint8")
        wrapped = codec_wire.CodecServerChannel(
            chan, codec, plan.request_bytes - P.SEQ_BYTES, decode_ns, ctx.clock, plan.verify,
            lambda seq: reply_ids.pack(reply, seq, corrupt=True), device_body)
        try:
            done = echo_cycles(wrapped, request, reply, reply_ids, plan.total,
                               on_bad_seq=lambda seq: bad_request(ctx, chan, request, seq, plan), loop="python",
                               progress=ctx.progress)
        except codec_wire.ClientAborted as exc:
            ctx.log(f"client aborted plan at seq {exc.seq}: {str(exc)[:200]}")
            return exc.seq
        except ProtocolError as exc:
            abort(chan, str(exc), plan)
        if done == plan.total:
            P.send_tails(chan, plan, {"decode_ns": decode_ns})
        return done


class _ChunksIn:
    """A streamed plan's chunks as the drafter receives them: into host memory, raw (each's
    first 8 bytes its running counter). `take(chan, seq, j)` returns the counter it carried;
    `bad` is the message to read a client's abort from. Each body of a streamed plan
    (_STREAM_IN, keyed by Plan.body) says why the server cannot take it (`refusal`) and builds
    its receiver, the reply's host buffer and the reply's send (`make`)."""

    def __init__(self, chan: Channel, size: int) -> None:
        self.buf = self.bad = chan.alloc(size)

    @classmethod
    def refusal(cls, path: "StreamDrafter", plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        return None

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["_ChunksIn", Any, Any]:
        assert plan.stream is not None
        return _ChunksIn(chan, plan.stream.chunk_bytes), chan.alloc(plan.reply_bytes), (lambda host, seq: chan.send(host))

    def take(self, chan: Channel, seq: int, j: int) -> int:
        chan.recv_into(self.buf)
        return int(P.SEQ.unpack_from(self.buf, 0)[0])


class _FramesIn(_ChunksIn):
    """Each chunk a codec frame whose seq is the running counter, decoded as it lands (each
    cycle's decode ns summed)."""

    def __init__(self, codec: Any, size: int, total: int, clock: Callable[[], int]) -> None:
        from hopbench.core import codec_wire

        self.frames = codec_wire.FrameReceiver(codec, size, clock)
        self.buf = self.bad = np.zeros(size, dtype=np.uint8)
        self.decode = np.zeros(total, dtype=np.int64)

    def take(self, chan: Channel, seq: int, j: int) -> int:
        got, _, ns = self.frames.recv(chan, self.buf, seq)
        self.decode[seq] += ns
        return got

    @classmethod
    def refusal(cls, path: "StreamDrafter", plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        try:
            path.parse_codec(plan)
        except HopbenchError as exc:
            return f"server cannot decode this plan: {exc}"
        return None

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["_ChunksIn", Any, Any]:
        assert plan.stream is not None
        frames = _FramesIn(path.codec, plan.stream.chunk_bytes, plan.total, ctx.clock)
        return frames, chan.alloc(plan.reply_bytes), (lambda host, seq: chan.send(host))


class _StagedIn(_ChunksIn):
    """GPU memory, staged: each chunk lands in pinned memory and is copied up to the device
    at once (each cycle's copies summed: the server's h2d)."""

    def __init__(self, bufs: Any, timings: Any, clock: Callable[[], int]) -> None:
        self.bufs, self.timings, self.clock = bufs, timings, clock

    def take(self, chan: Channel, seq: int, j: int) -> int:
        self.bad = host = self.bufs.host(j)
        chan.recv_into(host)
        t = self.clock()
        self.bufs.up(j)
        self.timings[seq, 0] += self.clock() - t
        return int(P.SEQ.unpack_from(host, 0)[0])

    @classmethod
    def refusal(cls, path: "StreamDrafter", plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        """CUDA memory at the client only: this end's chunks are raw host memory."""
        return _Gpu.check(path, plan, ctx, transport) if plan.server_memory == "cuda" else None

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["_ChunksIn", Any, Any]:
        """GPU memory writes the drafter's ids on the device, then sends them (staged: copied
        down, timed as the server's d2h)."""
        if plan.server_memory != "cuda":
            return _ChunksIn.make(path, chan, plan, ctx, timings)
        rep, ids, bufs = cls._staging(plan)

        def staged(host: Any, seq: int) -> None:
            rep.h2d(0, ids)  # the drafter's ids, as it would produce them on its GPU (untimed)
            t = ctx.clock()
            rep.d2h()
            timings[seq, 1] = ctx.clock() - t
            chan.send(rep.host)
        return _StagedIn(bufs, timings, ctx.clock), rep.host, staged

    @staticmethod
    def _staging(plan: P.Plan) -> tuple[Any, int, Any]:
        """The chunks' and the reply's device and pinned buffers, and the ids' bytes."""
        from hopbench.core.gpu import ChunkStaging

        assert plan.stream is not None
        bufs = ChunkStaging(plan.stream.chunks, plan.stream.chunk_bytes, plan.reply_bytes, seed=1)
        return bufs.reply, plan.k * plan.id_bytes, bufs


class _DirectIn(_StagedIn):
    """GPU memory, direct: the transport receives each chunk into the device; its counter is
    copied back to be checked (the whole chunk when it is wrong: it may be the client's abort).
    The reply's ids are written on the device and sent from there."""

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["_ChunksIn", Any, Any]:
        if plan.server_memory != "cuda":
            return _ChunksIn.make(path, chan, plan, ctx, timings)
        rep, ids, bufs = cls._staging(plan)

        def direct(host: Any, seq: int) -> None:
            rep.h2d(0, ids)
            chan.send(rep.device)
        return _DirectIn(bufs), rep.host, direct

    def __init__(self, bufs: Any) -> None:
        self.bufs = bufs

    def take(self, chan: Channel, seq: int, j: int) -> int:
        self.bad = host = self.bufs.host(j)
        chan.recv_into(self.bufs.device(j))
        self.bufs.fetch_counter(j)
        got = int(P.SEQ.unpack_from(host, 0)[0])
        if P.is_abort(host):
            self.bufs.rows.d2h(j * self.bufs.size, (j + 1) * self.bufs.size)
        return got


#: a streamed plan's bodies at the drafter, keyed by Plan.body (as kinds.KINDS is by kind)
_STREAM_IN: dict[str, type[_ChunksIn]] = {"raw": _ChunksIn, "codec": _FramesIn, "staged": _StagedIn,
                                          "direct": _DirectIn}


class StreamDrafter(_Gpu):
    """A streamed plan (docs/PROTOCOL.md "Streamed plans"): per cycle the chunks (raw: each's
    first 8 bytes the running chunk counter, seq x chunks + j; with a codec: each a codec frame
    whose seq is that counter, decoded here), then the 16-byte end message with the seq; the
    reply's ids go once both are in. The server's clock stamps the last chunk's and the end
    message's arrivals; after the last reply, per cycle the ns between them (how long the
    drafter held every chunk before the accept count came) follow as int64s, with a codec then
    each cycle's decode ns (its chunks' together), and with a staged GPU drafter its copy ns
    (chunks up, the reply's ids down: int64 total x 2)."""

    name = "stream drafter"
    python_only = "a streamed plan's chunks and accept count are read in Python"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        return _STREAM_IN[plan.body].refusal(self, plan, ctx, transport)

    def _incoming(self, chan: Channel, plan: P.Plan, ctx: PlanContext, timings: Any) -> tuple[_ChunksIn, Any, Any]:
        """How the chunks land (chosen once, by the plan's body), the reply's host buffer, and its send."""
        return _STREAM_IN[plan.body].make(self, chan, plan, ctx, timings)

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        return self.run_stream(chan, plan, ctx)

    def run_stream(self, chan: Channel, plan: P.Plan, ctx: PlanContext, on_chunk: Callable[..., None] | None = None,
                   on_end: Callable[[int, int, Any], None] | None = None, tails: dict[str, Any] | None = None) -> int:
        """The streamed cycles; `on_chunk(seq, j, body)` sees each chunk as it lands and
        `on_end(seq, accepted, reply)` writes the reply's ids (default: the protocol's ids);
        `tails`: the kind's own tails beside the stream's."""
        from hopbench.core import codec_wire

        assert plan.stream is not None
        chunks = plan.stream.chunks
        timings = np.zeros((plan.total, 2), dtype=np.int64)
        incoming, reply, send_reply = self._incoming(chan, plan, ctx, timings)
        end, hold = chan.alloc(P.STREAM_END_BYTES), np.zeros(plan.total, dtype=np.int64)
        ids = P.ReplyIds(plan.k, plan.id_bytes)
        seq = 0
        try:
            for seq in range(plan.total):
                for j in range(chunks):
                    got = incoming.take(chan, seq, j)
                    if got != seq * chunks + j:
                        bad_request(ctx, chan, incoming.bad, seq, plan, f"chunk {j} of cycle {seq} carries counter "
                                                                        f"{got}, expected {seq * chunks + j}")
                        return seq
                    if on_chunk is not None:
                        on_chunk(seq, j, incoming.buf)
                last = ctx.clock()
                chan.recv_into(end)
                hold[seq] = ctx.clock() - last
                if P.STREAM_END.unpack_from(end, 0)[0] != seq:
                    bad_request(ctx, chan, end, seq, plan, f"the end message of cycle {seq} carries seq "
                                                           f"{P.STREAM_END.unpack_from(end, 0)[0]}")
                    return seq
                if on_end is None:
                    ids.pack(reply, seq)
                else:
                    on_end(seq, P.STREAM_END.unpack_from(end, 0)[1], reply)
                send_reply(reply, seq)
            seq = plan.total
        except codec_wire.ClientAborted as exc:
            ctx.log(f"client aborted plan at seq {exc.seq}: {str(exc)[:200]}")
            return exc.seq
        except ProtocolError as exc:
            if self.codec is None:
                raise
            abort(chan, str(exc), plan)
        finally:
            ctx.progress.done = seq
        P.send_tails(chan, plan, {"server_hold_ns": hold, "server_stages": timings,
                                  "decode_ns": incoming.decode if isinstance(incoming, _FramesIn) else None,
                                  **(tails or {})})
        return plan.total
