"""The spec kind's two ends (docs/SPEC.md): the target's path (`SpecTarget`, a ClientPath that
`Session.measure` runs like every other) and the drafter's (`SpecDrafter`, a ServingPath).
Both loops are in hopbench.core.timing (spec_target_cycles, spec_drafter_cycles); a mode is
a strategy object here, picked once per plan (SpecTarget.steps, DRAFTER_STEPS), that says what
the loop does at each step: the verify (a work model, or the forward that streams its taps),
what follows the header (the hidden states, or nothing where they went during the forward),
and for the drafter whether the header's outcome was drafted while the target verified.

The acceptance and work models, the plan's info and the wire's structs are in
hopbench.core.spec.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.client_paths import ClientPath, DataPath, PlanRun, tail_stages
from hopbench.core.inputs import HiddenSource, Schedule
from hopbench.core.serving import PlanContext, ServingPath, abort, bad_request
from hopbench.core.spec import (
    BATCH_MASK,
    BATCH_SHIFT,
    CYCLE_COLUMNS,
    HEADER,
    HIT,
    STREAM_COUNTER,
    TAIL,
    SpecInputs,
    SpecPlanInfo,
    Work,
    parse_work,
    spec_info_from_wire,
)
from hopbench.core.timing import Progress, spec_drafter_cycles, spec_target_cycles, wait_until
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ConfigError, HopbenchError, ProtocolError

# ---- the target's steps, one class per mode -----------------------------------------------------


class TargetSteps:
    """A mode's target steps: `verify(seq, t0)` (the work model, by default) and `draft(seq,
    accepted)`, both timed; then, untimed, `drafted()` (the drafter's (draft_ns, hit, batch)
    from the reply's tail, or None where the draft ran here) and `check(seq)` (its ids)."""

    reply: Any = None  # the host buffer the reply lands in (None: no network)

    def __init__(self, verify: Work | None, clock: Callable[[], int]) -> None:
        self.work, self.clock = verify, clock

    def verify(self, seq: int, t0: int) -> None:
        assert self.work is not None
        self.work.run(self.clock)

    def draft(self, seq: int, accepted: int) -> None:
        raise NotImplementedError

    def drafted(self) -> tuple[int, int, int] | None:
        return None  # the draft ran here: its time is the wait itself

    def check(self, seq: int) -> None:
        pass


class LocalTarget(TargetSteps):
    """local: verify, then draft on the target itself; no network (the study's baseline)."""

    def __init__(self, verify: Work, local_draft: Work, clock: Callable[[], int]) -> None:
        super().__init__(verify, clock)
        self.local_draft = local_draft

    def draft(self, seq: int, accepted: int) -> None:
        self.local_draft.run(self.clock)


class HopTarget(TargetSteps):
    """sync and overlap: the header (seq, tokens, accepted), then the hidden states of the
    cycle's tokens (raw, or `send_states(seq, tokens)`: a codec's frame, encoded inside the
    hop), then the drafter's K ids and tail (its draft time and flags)."""

    def __init__(self, channel: Channel, info: SpecPlanInfo, verify: Work | None, ids: P.ReplyIds,
                 clock: Callable[[], int], send_states: Callable[[int, int], None] | None = None) -> None:
        super().__init__(verify, clock)
        self.channel, self.info = channel, info
        self.header = bytearray(HEADER.size)
        payload = bytearray(info.request_bytes)
        self.views = [memoryview(payload)[: t * info.bytes_per_token] for t in range(info.k + 2)]
        self.reply = bytearray(info.reply_bytes)
        self.checker = ids.checker(self.reply)
        self.span = info.k * info.id_bytes
        self.send_states = send_states or (lambda seq, tokens: channel.send(self.views[tokens]))

    def draft(self, seq: int, accepted: int) -> None:
        HEADER.pack_into(self.header, 0, seq, accepted + 1, accepted)
        self.channel.send(self.header)
        self.states(seq, accepted + 1)
        self.channel.recv_into(self.reply)

    def drafted(self) -> tuple[int, int, int] | None:
        draft_ns, flags = TAIL.unpack_from(self.reply, self.span)
        return int(draft_ns), int(flags & HIT), int((flags >> BATCH_SHIFT) & BATCH_MASK)

    def states(self, seq: int, tokens: int) -> None:
        self.send_states(seq, tokens)

    def check(self, seq: int) -> None:
        self.checker(seq)


class StreamTarget(HopTarget):
    """stream: the forward's schedule replaces the verify; chunk j (aux layer j's K + 1 rows,
    the running counter first, or `send_chunk(seq, j)`: a codec's frame) goes at its layer's
    end, the header at the forward's end, and nothing after it."""

    def __init__(self, channel: Channel, info: SpecPlanInfo, schedule: Schedule, ids: P.ReplyIds,
                 clock: Callable[[], int], send_chunk: Callable[[int, int], None] | None = None) -> None:
        super().__init__(channel, info, None, ids, clock)
        self.schedule, self.chunk = schedule, bytearray(info.chunk_bytes)
        self.send_chunk = send_chunk or self._raw_chunk

    def _raw_chunk(self, seq: int, j: int) -> None:
        STREAM_COUNTER.pack_into(self.chunk, 0, seq * self.info.chunks + j)
        self.channel.send(self.chunk)

    def verify(self, seq: int, t0: int) -> None:
        for j in range(self.info.chunks):
            wait_until(self.clock, t0 + self.schedule.ready_ns[j])
            self.send_chunk(seq, j)
        wait_until(self.clock, t0 + self.schedule.end_ns)

    def states(self, seq: int, tokens: int) -> None:
        pass  # the hidden states went during the forward


def target_rows(steps: TargetSteps, info: SpecPlanInfo, outcomes: np.ndarray, clock: Callable[[], int],
                progress: Progress | None = None) -> np.ndarray:
    """The target's loop over `steps`: a (total x len(CYCLE_COLUMNS)) int64 array, filled as
    far as the loop got (also when it raises)."""
    rows = np.zeros((info.total, len(CYCLE_COLUMNS)), dtype=np.int64)
    spec_target_cycles(steps, outcomes, rows, 1 + info.warmup, clock, progress or Progress())
    return rows


def _codec_senders(plan: P.Plan, info: SpecPlanInfo, source: HiddenSource | None,
                   clock: Callable[[], int]) -> Callable[[Channel], tuple[Any, Any]]:
    """A codec plan's senders over a data channel: a cycle's hidden states (windows of
    `source`, T tokens each) and, in mode stream, chunk j (aux layer j's K + 1 rows), each
    encoded inside the hop as a frame of its own."""
    from hopbench.core import codec_wire, codecs

    if source is None:
        raise ConfigError("a codec plan needs its hidden states (hopbench.workload.hidden.Source)")
    codec = codecs.parse(plan.codec or "none", plan.codec_group)
    by_tokens = {t: source.bodies(t * info.bytes_per_token, t, max(1, source.tokens // t)) for t in range(1, info.k + 2)}
    layered = [b.view(np.uint16).reshape(info.k + 1, max(1, info.chunks), -1) for b in by_tokens[info.k + 1]]
    chunks = [[np.ascontiguousarray(b[:, j, :]).view(np.uint8).reshape(-1) for j in range(info.chunks)] for b in layered]
    header = bytearray(codecs.FRAME_BYTES)
    codecs.steady_heap()

    def over(data: Channel) -> tuple[Any, Any]:
        def send_states(seq: int, tokens: int) -> None:
            bodies = by_tokens[tokens]
            codec_wire.send_frame(data, codec, bodies[seq % len(bodies)], seq, 0, header, clock)

        def send_chunk(seq: int, j: int) -> None:
            codec_wire.send_frame(data, codec, chunks[seq % len(chunks)][j], seq * info.chunks + j, 0, header, clock)
        return send_states, (send_chunk if info.chunks else None)
    return over


class SpecTarget(ClientPath):
    """The target's side of a spec plan (run.spec: its info, acceptance outcomes and verify
    work; `stream`: mode stream's forward schedule). Its per-cycle rows land in the
    measurement's stages, one per CYCLE_COLUMNS; its samples are the waits (header sent to
    ids back)."""

    name = "spec target"

    def __init__(self, stream: Schedule | None = None) -> None:
        self.stream = stream
        self.senders: Callable[[Channel], tuple[Any, Any]] | None = None

    @staticmethod
    def inputs(run: PlanRun) -> SpecInputs:
        if run.spec is None:
            raise ConfigError("a spec plan needs its target's inputs (hopbench.core.spec.SpecInputs)")
        spec: SpecInputs = run.spec
        return spec

    def prepare(self, run: PlanRun) -> P.Plan:
        info = self.inputs(run).info
        if info.mode == "stream" and self.stream is None:
            raise ConfigError("mode stream needs the forward's schedule (hopbench.workload.stream.schedule)")
        if run.plan.codec:  # its senders built (and its source checked) before the PLAN crosses
            self.senders = _codec_senders(run.plan, info, run.source, run.clock)
        return run.plan

    def abort_bytes(self, plan: P.Plan) -> int:
        return HEADER.size

    def steps(self, data: DataPath, run: PlanRun) -> HopTarget:
        """The plan's mode as the target's steps (overlap's target sends as sync does)."""
        s = self.inputs(run)
        send_states, send_chunk = self.senders(data.channel) if self.senders else (None, None)
        if s.info.mode == "stream":
            assert self.stream is not None
            return StreamTarget(data.channel, s.info, self.stream, run.ids, run.clock, send_chunk)
        return HopTarget(data.channel, s.info, s.verify, run.ids, run.clock, send_states)

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        s, steps = self.inputs(run), self.steps(data, run)
        self.reply_host = steps.reply
        rows = np.zeros((s.info.total, len(CYCLE_COLUMNS)), dtype=np.int64)
        try:
            return spec_target_cycles(steps, s.outcomes, rows, 1 + s.info.warmup, run.clock, run.progress)
        finally:
            run.m.stages.update({c: rows[:, i] for i, c in enumerate(CYCLE_COLUMNS)})
            run.m.samples_ns[:] = rows[:, CYCLE_COLUMNS.index("wait_ns")]

    def after(self, data: DataPath, run: PlanRun) -> None:
        """The reply's tail is the drafter's time and flags (no zero check); then the tails the
        plan declares."""
        run.m.stages.update(tail_stages(P.recv_tails(data.channel, run.plan)))


# ---- the drafter's steps, one class per mode --------------------------------------------------


class SyncDrafter:
    """sync: the header, then the hidden states, the draft, the reply (its ids, the draft's
    time and flags: the batch it ran in)."""

    def __init__(self, channel: Channel, info: SpecPlanInfo, draft: Work, ids: P.ReplyIds,
                 on_bad_seq: Callable[[int, Any], None], clock: Callable[[], int],
                 recv_states: Callable[[int, Any], None] | None = None) -> None:
        self.channel, self.info, self.work, self.ids, self.on_bad_seq, self.clock = \
            channel, info, draft, ids, on_bad_seq, clock
        self.header = bytearray(HEADER.size)
        payload = bytearray(info.request_bytes)
        self.views = [memoryview(payload)[: t * info.bytes_per_token] for t in range(info.k + 2)]
        self.recv_states = recv_states or (lambda tokens, view: channel.recv_into(view))
        self.reply = bytearray(info.reply_bytes)
        self.span = info.k * info.id_bytes

    def intake(self, seq: int) -> tuple[int, int] | None:
        """The cycle's header: (tokens, accepted), or None for a bad one (reported)."""
        self.channel.recv_into(self.header)
        got, tokens, accepted = HEADER.unpack_from(self.header, 0)
        if got != seq or not 1 <= tokens <= self.info.k + 1:
            self.on_bad_seq(seq, self.header)
            return None
        return int(tokens), int(accepted)

    def predrafted(self, accepted: int, ready: int, now: int) -> bool:
        """Whether the header's outcome was drafted between `ready` (the previous cycle's
        reply sent) and `now` (this header read): then it is answered at once."""
        return False

    def states(self, tokens: int) -> None:
        self.recv_states(tokens, self.views[tokens])

    def draft(self, tokens: int) -> int:
        """The draft on the cycle's rows; the size of the batch it ran in (0: not batched)."""
        return self.work.run(self.clock, self.views[tokens], tokens)

    def answer(self, seq: int, draft_ns: int, hit: bool, batch: int) -> None:
        self.ids.pack(self.reply, seq)
        TAIL.pack_into(self.reply, self.span, draft_ns, (HIT if hit else 0) | min(batch, BATCH_MASK) << BATCH_SHIFT)
        self.channel.send(self.reply)


class OverlapDrafter(SyncDrafter):
    """overlap: from the moment the drafter is ready (the previous hidden states in), it
    pre-drafts the F most likely outcomes, most likely first, t_draft each, not preempted; a
    hit is answered on the header, a miss waits for the pre-draft in progress."""

    def __init__(self, *args: Any, ranked: list[int], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.rank = {a: r for r, a in enumerate(ranked)}

    def predrafted(self, accepted: int, ready: int, now: int) -> bool:
        fanout = self.info.fanout
        step = int((self.work.nominal_ms() or 0.0) * 1e6)
        done = min(fanout, (now - ready) // step) if step > 0 else self.work.predrafted(fanout)
        if self.rank.get(accepted, self.info.k + 1) < done:
            return True
        if done < fanout and step > 0:  # the pre-draft in progress is not preempted
            wait_until(self.clock, ready + (done + 1) * step)
        return False


class StreamDrafter(SyncDrafter):
    """stream: the cycle's chunks (each's running counter checked), then the header; the
    hidden states came during the forward. `recv_chunk(buffer)` receives one chunk and
    returns its counter (a codec plan: a frame decoded into the buffer); default raw."""

    def __init__(self, *args: Any, recv_chunk: Callable[[Any], int] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.chunk = bytearray(self.info.chunk_bytes)
        self.recv_chunk = recv_chunk or self._raw_chunk

    def _raw_chunk(self, chunk: bytearray) -> int:
        self.channel.recv_into(chunk)
        return int(STREAM_COUNTER.unpack_from(chunk, 0)[0])

    def intake(self, seq: int) -> tuple[int, int] | None:
        chunks = self.info.chunks
        for j in range(chunks):
            if self.recv_chunk(self.chunk) != seq * chunks + j:
                self.on_bad_seq(seq, self.chunk)
                return None
        return super().intake(seq)

    def states(self, tokens: int) -> None:
        pass


class SpecDrafter(ServingPath):
    """The drafter's side of a spec plan: its mode's steps (SyncDrafter, OverlapDrafter,
    StreamDrafter) in hopbench.core.timing.spec_drafter_cycles."""

    name = "spec drafter"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        assert plan.spec is not None
        try:
            self.info = info = spec_info_from_wire(plan.spec, plan.k, plan.id_bytes, plan.cycles, plan.warmup)
            if plan.request_bytes != info.request_bytes or plan.reply_bytes != info.reply_bytes:
                return (f"a spec plan's request_bytes/reply_bytes must be {info.request_bytes}/{info.reply_bytes} "
                        f"(K + 1 tokens of hidden states; K ids + 16)")
            self.draft = parse_work(plan.spec.draft, plan.spec.scale or 1.0, files=False)
            if plan.spec.draft == "model":
                wrong = _model_refusal(plan, ctx)
                if wrong:
                    return wrong
            if plan.codec is not None:
                self.parse_codec(plan)
        except HopbenchError as exc:
            return f"cannot run this spec plan: {exc}"
        return None

    @staticmethod
    def hooked(draft: Work, plan: P.Plan, ctx: PlanContext) -> Work:
        """The draft work with what this server lends it: the start group's batcher (a
        `batch:A+B` draft of targets started together) or the server's drafter model."""
        assert plan.spec is not None
        batcher = model = None
        if draft.batch_ms is not None and plan.group is not None and ctx.groups is not None:
            gid, groups = plan.group.id, ctx.groups  # the targets' drafts that arrive together: one batch
            window_s = (plan.spec.batch_window_ms or 0.0) / 1000.0
            most = plan.spec.max_batch or plan.group.size

            def batcher(a_ms: float, b_ms: float) -> int:
                n: int = groups.draft(gid, a_ms, b_ms, window_s, most)
                return n
        if draft.kind == "model":  # the server's drafter model on the cycle's states, batched across targets
            drafter, k = ctx.drafter, plan.k

            def model(rows: Any, tokens: int) -> tuple[int, float]:
                ask = drafter.submit(bytes(rows), tokens, k)  # its forward's ms: what overlap's pre-drafts take
                return int(ask.batch_rows // max(1, tokens)), ask.draft_ns / 1e6
            drafter.join()
        return dataclasses.replace(draft, batcher=batcher, model=model)

    def steps(self, chan: Channel, plan: P.Plan, ctx: PlanContext, draft: Work) -> SyncDrafter:
        """The plan's mode as the drafter's steps; a codec plan's states and chunks are frames,
        decoded inside the hop."""
        assert plan.spec is not None
        info, sized = self.info, dataclasses.replace(plan, reply_bytes=self.info.reply_bytes)

        def bad(seq: int, header: Any) -> None:
            bad_request(ctx, chan, header, seq, sized)

        kw: dict[str, Any] = {}
        if plan.codec is not None:  # the hidden states cross encoded: decoded here, inside the hop
            from hopbench.core import codec_wire

            frames = codec_wire.FrameReceiver(self.codec, info.request_bytes, ctx.clock)
            kw["recv_states"] = lambda tokens, view: frames.recv(chan, np.frombuffer(view, dtype=np.uint8))
            if info.mode == "stream":  # each chunk a frame, its seq the running counter
                kw["recv_chunk"] = lambda buf: int(frames.recv(chan, np.frombuffer(buf, dtype=np.uint8))[0])
        if info.mode == "overlap":
            kw["ranked"] = list(plan.spec.ranked or range(plan.k + 1))
        mode = DRAFTER_STEPS[info.mode]
        return mode(chan, info, draft, P.ReplyIds(plan.k, plan.id_bytes), bad, ctx.clock, **kw)

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        draft = self.hooked(self.draft, plan, ctx)  # as check() parsed it
        try:
            return spec_drafter_cycles(self.steps(chan, plan, ctx, draft), self.info.total, ctx.clock, ctx.progress)
        except ProtocolError as exc:
            if plan.codec is None:
                raise
            abort(chan, str(exc), dataclasses.replace(plan, reply_bytes=self.info.reply_bytes))  # a frame that
            raise  # does not decode: the target is told why (abort raises Ended)
        finally:
            if draft.kind == "model":
                ctx.drafter.leave()


#: the drafter's steps of each mode the server runs (the target's: SpecTarget.steps)
DRAFTER_STEPS: dict[str, type[SyncDrafter]] = {"sync": SyncDrafter, "overlap": OverlapDrafter,
                                               "stream": StreamDrafter}


def _model_refusal(plan: P.Plan, ctx: PlanContext) -> str | None:
    """A spec plan whose draft work is the server's drafter model: why it cannot run, or None."""
    if ctx.config.drafter is None:
        return ("this server runs no drafter model for --draft-remote model: start it with `hopbench serve --drafter "
                "SHAPE`")
    if (wrong := ctx.drafter.model.refusal(plan.k)) is not None:  # K ids a pass: a block drafter's bound
        return f"--draft-remote model: {wrong}"
    shape = ctx.drafter.model.shape
    assert plan.spec is not None
    if plan.spec.bytes_per_token != shape.row_bytes or plan.spec.mode == "stream":
        return (f"--draft-remote model: the {shape.name} drafter takes rows of {shape.row_bytes:,} B (this plan's "
                f"tokens are {plan.spec.bytes_per_token:,} B; mode stream is not served by it yet)")
    return None


__all__ = ["DRAFTER_STEPS", "HopTarget", "LocalTarget", "OverlapDrafter", "SpecDrafter", "SpecTarget", "StreamDrafter",
           "StreamTarget", "SyncDrafter", "TargetSteps", "target_rows"]
