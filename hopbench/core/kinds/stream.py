"""The streamed exchange's two ends (docs/STREAM.md): the client's StreamedRoundTrip sends
each cycle's chunks on the forward's schedule (or as a real producer's taps land), the end
message at the forward's end, and times the exposed hop; the server's StreamDrafter takes
the chunks and the end message and replies. Each body of Plan.body has its two halves here:
the chunks' sender and the reply's receive (RawBody, CodecBody, StagedBody, DirectBody) and
the chunks' receiver, REFUSE line and reply's send (ChunksIn, FramesIn, StagedIn, DirectIn);
the kinds' BODIES table (hopbench.core.kinds) pairs them."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from hopbench.columns import PRODUCER_STAGE_COLUMNS
from hopbench.core import protocol as P
from hopbench.core.client_paths import ClientPath, DataPath, PlanRun
from hopbench.core.inputs import Producer, Schedule
from hopbench.core.serving import GpuServing, PlanContext, abort, bad_request
from hopbench.core.timing import StreamHooks, produced_cycles, streamed_cycles
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ConfigError, HopbenchError, ProtocolError

# ---- the client's end: the chunks' senders and each body's half ---------------------------------


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


class RawBody:
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


class CodecBody(RawBody):
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


class _GpuBody(RawBody):
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


class StagedBody(_GpuBody):
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


class DirectBody(_GpuBody):
    """Direct: the transport is handed the device slices; the reply lands on the device and
    its ids go back to the host after the sample (untimed) to be checked."""

    def _chunks(self, chan: Any, run: PlanRun) -> _RawChunks:
        return _DirectChunks(chan, self.gpu)

    def _reply(self, chan: Any, run: PlanRun) -> tuple[Callable[[int], None], Callable[[], None]]:
        reply = self.gpu.reply
        return (lambda i: chan.recv_into(reply.device)), reply.d2h


class StreamedRoundTrip(ClientPath):
    """The streamed hop (docs/STREAM.md): each cycle the forward's clock starts at t0, chunk j
    goes at t0 + its ready time, the accept count (the end message) at t0 + the forward's end
    (+ the extraction cost), and the sample is the **exposed hop**: ids back - that time.
    Recorded per cycle: the chunks' worst send lag, the end message's, and the server's hold
    (its receipt of the end message - of the last chunk, its own clock). The chunks come from
    host memory, raw or each encoded by a codec, or from GPU memory (`--memory cuda`: staged,
    the rows copied down as each layer ends and the reply's ids up inside the hop; or direct)."""

    name = "streamed round trip"

    def __init__(self, sched: Schedule, body: Callable[[PlanRun], RawBody] = RawBody) -> None:
        self.sched = sched  # hopbench.workload.stream.Schedule, or a Producer (--target gpu)
        self.body_of = body  # the plan's body (hopbench.core.kinds.BODIES: its chunks_out)
        self.pending = 0  # the size of the next message the server expects (an abort is cut to it)
        self.body: RawBody  # how the chunks and the reply live (prepare chooses it)

    def abort_bytes(self, plan: P.Plan) -> int:
        return self.pending or plan.request_frame_bytes

    def ids(self, run: PlanRun) -> P.ReplyIds:
        """How the replies' ids are checked (the protocol's ids)."""
        return run.ids

    def prepare(self, run: PlanRun) -> P.Plan:
        """The plan's body, chosen once (kinds.BODIES, keyed by Plan.body), readies what the
        chunks and the reply need before the channel (GPU memory: the CUDA context before UCX's)."""
        self.body = self.body_of(run)
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
        if type(self.body) is not RawBody:
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


# ---- the server's end: each body's half and the stream drafter ------------------------------


class ChunksIn:
    """A streamed plan's chunks as the drafter receives them: into host memory, raw (each's
    first 8 bytes its running counter). `take(chan, seq, j)` returns the counter it carried;
    `bad` is the message to read a client's abort from. Each body of a streamed plan
    (kinds.BODIES, keyed by Plan.body) says why the server cannot take it (`refusal`) and builds
    its receiver, the reply's host buffer and the reply's send (`make`)."""

    def __init__(self, chan: Channel, size: int) -> None:
        self.buf = self.bad = chan.alloc(size)

    @classmethod
    def refusal(cls, path: "StreamDrafter", plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        return None

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["ChunksIn", Any, Any]:
        assert plan.stream is not None
        return ChunksIn(chan, plan.stream.chunk_bytes), chan.alloc(plan.reply_bytes), (lambda host, seq: chan.send(host))

    def take(self, chan: Channel, seq: int, j: int) -> int:
        chan.recv_into(self.buf)
        return int(P.SEQ.unpack_from(self.buf, 0)[0])


class FramesIn(ChunksIn):
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
             timings: Any) -> tuple["ChunksIn", Any, Any]:
        assert plan.stream is not None
        frames = FramesIn(path.codec, plan.stream.chunk_bytes, plan.total, ctx.clock)
        return frames, chan.alloc(plan.reply_bytes), (lambda host, seq: chan.send(host))


class StagedIn(ChunksIn):
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
        return GpuServing.check(path, plan, ctx, transport) if plan.server_memory == "cuda" else None

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["ChunksIn", Any, Any]:
        """GPU memory writes the drafter's ids on the device, then sends them (staged: copied
        down, timed as the server's d2h)."""
        if plan.server_memory != "cuda":
            return ChunksIn.make(path, chan, plan, ctx, timings)
        rep, ids, bufs = cls._staging(plan)

        def staged(host: Any, seq: int) -> None:
            rep.h2d(0, ids)  # the drafter's ids, as it would produce them on its GPU (untimed)
            t = ctx.clock()
            rep.d2h()
            timings[seq, 1] = ctx.clock() - t
            chan.send(rep.host)
        return StagedIn(bufs, timings, ctx.clock), rep.host, staged

    @staticmethod
    def _staging(plan: P.Plan) -> tuple[Any, int, Any]:
        """The chunks' and the reply's device and pinned buffers, and the ids' bytes."""
        from hopbench.core.gpu import ChunkStaging

        assert plan.stream is not None
        bufs = ChunkStaging(plan.stream.chunks, plan.stream.chunk_bytes, plan.reply_bytes, seed=1)
        return bufs.reply, plan.k * plan.id_bytes, bufs


class DirectIn(StagedIn):
    """GPU memory, direct: the transport receives each chunk into the device; its counter is
    copied back to be checked (the whole chunk when it is wrong: it may be the client's abort).
    The reply's ids are written on the device and sent from there."""

    @classmethod
    def make(cls, path: "StreamDrafter", chan: Channel, plan: P.Plan, ctx: PlanContext,
             timings: Any) -> tuple["ChunksIn", Any, Any]:
        if plan.server_memory != "cuda":
            return ChunksIn.make(path, chan, plan, ctx, timings)
        rep, ids, bufs = cls._staging(plan)

        def direct(host: Any, seq: int) -> None:
            rep.h2d(0, ids)
            chan.send(rep.device)
        return DirectIn(bufs), rep.host, direct

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


class StreamDrafter(GpuServing):
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

    def __init__(self, incoming: type[ChunksIn] = ChunksIn) -> None:
        self.incoming = incoming  # the plan's body at this end (hopbench.core.kinds.BODIES: its chunks_in)

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        return self.incoming.refusal(self, plan, ctx, transport)

    def _incoming(self, chan: Channel, plan: P.Plan, ctx: PlanContext, timings: Any) -> tuple[ChunksIn, Any, Any]:
        """How the chunks land (chosen once, by the plan's body), the reply's host buffer, and its send."""
        return self.incoming.make(self, chan, plan, ctx, timings)

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
                                  "decode_ns": incoming.decode if isinstance(incoming, FramesIn) else None,
                                  **(tails or {})})
        return plan.total


__all__ = ["ChunksIn", "CodecBody", "DirectBody", "DirectIn", "FramesIn", "RawBody", "StagedBody", "StagedIn",
           "StreamDrafter", "StreamedRoundTrip"]
