"""The round trip's two ends (one request, one reply per cycle), for each body of
Plan.body: raw host memory (HostRoundTrip, HostEcho: the timed loops, compiled where they
apply), a codec's frames (CodecRoundTrip, CodecEcho), CUDA memory staged through pinned
buffers (StagedRoundTrip, StagedEcho) or handed to the transport (DirectRoundTrip,
DirectEcho). Which pair serves a plan is the kinds' BODIES table (hopbench.core.kinds)."""

from __future__ import annotations

import dataclasses
import os
import zlib
from functools import partial
from typing import Any, Callable

import numpy as np

from hopbench.core import native
from hopbench.core import protocol as P
from hopbench.core.client_paths import ClientPath, DataPath, PlanRun
from hopbench.core.inputs import HiddenSource
from hopbench.core.serving import GpuServing, PlanContext, ServingPath, abort, bad_request
from hopbench.core.timing import LoopHooks, LoopPolicy, echo_cycles, run_cycles
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ConfigError, HopbenchError, ProtocolError

# ---- the client's end ---------------------------------------------------------------------------


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


class _GpuRoundTrip(ClientPath):
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


class StagedRoundTrip(_GpuRoundTrip):
    """The copies are a channel wrapper (pinned host buffers), timed with the same clock."""

    name = "GPU staged"

    def _loop(self, data: DataPath, run: PlanRun, request: Any, reply: Any) -> int:
        from hopbench.core.gpu import CLIENT_STAGES, StagedClientChannel

        stages = np.zeros((run.plan.total, len(CLIENT_STAGES)), dtype=np.int64)
        run.m.stages.update({name: stages[:, j] for j, name in enumerate(CLIENT_STAGES)})
        staged = StagedClientChannel(data.channel, request, reply, stages, run.clock)
        return run_cycles(staged, request.host, reply.host, run.ids, run.m.samples_ns, **run.loop_args())


class DirectRoundTrip(_GpuRoundTrip):
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



# ---- the server's end ---------------------------------------------------------------------------


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


class StagedEcho(GpuServing):
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


class DirectEcho(GpuServing):
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



def staged_client(plan: P.Plan) -> ClientPath:
    """CUDA memory at one end or both, staged: this end's path (host memory where only the
    server's is CUDA)."""
    return StagedRoundTrip()


def direct_client(plan: P.Plan) -> ClientPath:
    """Direct: the device buffers handed to the transport where this end's memory is CUDA,
    else staged (host memory at this end: only the server's copies)."""
    return DirectRoundTrip() if plan.client_memory == "cuda" else StagedRoundTrip()


def gpu_serving(direct: bool) -> Callable[[P.Plan], ServingPath]:
    """The server's end of a GPU body: host echo where its memory is the host's."""
    def make(plan: P.Plan) -> ServingPath:
        if plan.server_memory != "cuda":
            return HostEcho()
        return DirectEcho() if direct else StagedEcho()
    return make


__all__ = ["CodecEcho", "CodecRoundTrip", "DirectEcho", "DirectRoundTrip", "HostEcho", "HostRoundTrip", "StagedEcho",
           "StagedRoundTrip", "direct_client", "gpu_serving", "request_bodies", "staged_client"]
