"""The drafter kinds' two ends (docs/DRAFTER.md): a plan with a `drafter` block is served by
the server's drafter model (`hopbench serve --drafter SHAPE`: any core.inputs.DraftModel,
hopbench.models.drafter's in practice), whose
forward runs on each cycle's rows and whose argmax ids are the reply. Synchronous plans go
through the server's Batcher (the rows of the sessions waiting, one forward); streamed plans
start the forward on the taps that have landed (`early`).

After the last reply the server sends the draft tail (int64 total x 7 per cycle: draft_ns,
queue_ns, batch_rows, early_ns, stage_ns, back_ns, server_ns; protocol.DRAFT_TAIL); the client
records them as stages beside `hop_ex_draft_ns` (the reply time without the drafter's) and
`hop_ex_server_ns` (without the server's whole time: the wire's part, the ledger's check)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.batcher import Cycles
from hopbench.core.client_paths import DataPath, PlanRun
from hopbench.core.inputs import StreamedWork
from hopbench.core.kinds.roundtrip import HostRoundTrip
from hopbench.core.kinds.stream import StreamDrafter, StreamedRoundTrip
from hopbench.core.serving import PlanContext, ServingPath, abort, bad_request
from hopbench.core.transport import Channel, ControlChannel, Transport, plan_poll
from hopbench.errors import HopbenchError

NO_DRAFTER = ("this server runs no drafter model: start it with `hopbench serve --drafter SHAPE` "
              "(a preset or the drafter's config.json)")


class DraftIds(P.ReplyIds):
    """A drafter's reply: its K ids are the model's, so the client cannot predict them; they
    are checked once, after the loop (within the id width, the bytes after them zero)."""

    def checker(self, buf: Any) -> Any:
        return lambda seq: None


def _refusal(plan: P.Plan, ctx: PlanContext) -> str | None:
    """Why this server's drafter cannot serve the plan's rows (a REFUSE line), or None."""
    batcher = ctx.config.drafter
    if batcher is None:
        return NO_DRAFTER
    shape = batcher.model.shape
    if plan.uses_gpu or plan.verify or (plan.codec is not None):
        return ("a drafter plan sends raw rows from host memory (the drafter copies them to its own device): "
                "not with --memory cuda, --verify or --codec")
    if (wrong := batcher.model.refusal(plan.k)) is not None:
        return wrong
    if shape.vocab_size > 1 << (8 * plan.id_bytes):
        return f"the {shape.name} drafter's {shape.vocab_size:,} ids need id_bytes of at least 4"
    rows_bytes = plan.stream.chunk_bytes * plan.stream.chunks if plan.stream is not None else plan.request_bytes
    if rows_bytes % shape.row_bytes:
        return (f"the {shape.name} drafter's rows are {shape.row_bytes:,} B ({shape.fc_in_features} BF16 values: "
                f"{shape.taps} taps x {shape.hidden_size}); this plan's {rows_bytes:,} B are not whole rows")
    return None


class DraftEcho(ServingPath):
    """A drafter plan: each request's rows run the shared drafter's forward (batched with the
    other sessions' waiting rows), the reply carries its K argmax ids."""

    name = "drafter"
    python_only = "the drafter's forward runs in Python (torch)"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        return _refusal(plan, ctx)

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        batcher = ctx.drafter
        shape = batcher.model.shape
        request, reply = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        rows = plan.request_bytes // shape.row_bytes
        times = np.zeros((plan.total, P.DRAFT_TAIL.columns), dtype=np.int64)
        ids_view = np.frombuffer(reply, dtype=np.dtype(f"<u{plan.id_bytes}"), count=plan.k)
        if isinstance(chan, ControlChannel):  # its messages arrive on a socket: the batcher's loop serves it
            return self._looped(chan, plan, ctx, Cycles(chan, request, reply, ids_view, times, rows, plan.k, plan.total,
                                                        ctx.config.idle_timeout_s))
        clock = time.perf_counter_ns
        seq = 0
        batcher.join()
        try:
            for seq in range(plan.total):
                chan.recv_into(request)
                t_in = clock()
                if P.SEQ.unpack_from(request, 0)[0] != seq:
                    bad_request(ctx, chan, request, seq, plan)
                    return seq
                try:
                    ask = batcher.submit(request, rows, plan.k)
                except HopbenchError as exc:
                    abort(chan, str(exc), plan)
                ids_view[:] = ask.ids
                t_out = clock()  # the reply handed to the transport (after its send returns, it may be in)
                chan.send(reply)
                times[seq] = (ask.draft_ns, ask.queue_ns, ask.batch_rows, 0, ask.stage_ns, ask.back_ns, t_out - t_in)
            seq = plan.total
        finally:
            batcher.leave()
            ctx.progress.done = seq
        P.send_tails(chan, plan, {P.DRAFT_TAIL.name: times})
        return plan.total

    def _looped(self, chan: Channel, plan: P.Plan, ctx: PlanContext, c: Cycles) -> int:
        """A session whose messages arrive on a socket: the batcher's Loop serves its cycles,
        with every other such session's, in one thread (docs/DRAFTER.md "Batched across
        targets"); this thread waits, then ends the plan as serve does."""
        batcher = ctx.drafter
        batcher.join()
        try:
            batcher.loop(plan_poll(ctx.config.poll, True) == "busy").serve(c)
        finally:
            batcher.leave()
            ctx.progress.done = c.seq
        if c.error is not None:
            raise c.error
        if c.bad:
            bad_request(ctx, chan, c.request, c.seq, plan)
            return c.seq
        if c.failed is not None:
            abort(chan, str(c.failed), plan)
        P.send_tails(chan, plan, {P.DRAFT_TAIL.name: c.times})
        return plan.total


class StreamDraft(StreamDrafter):
    """A streamed plan to the drafter model: each tap's chunk feeds the drafter as it lands
    (the model's `streamed` work, hopbench.models.streamed: early off, fc or all), the reply's
    ids are its."""

    name = "stream drafter model"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        wrong = _refusal(plan, ctx)
        if wrong:
            return wrong
        assert plan.stream is not None and plan.drafter is not None
        shape = ctx.drafter.model.shape
        if plan.stream.chunks != shape.taps or plan.stream.chunk_bytes % (shape.hidden_size * 2):
            return (f"the {shape.name} drafter takes {shape.taps} taps of {shape.hidden_size} BF16 values a row: "
                    f"a streamed plan of {plan.stream.chunks} chunks of {plan.stream.chunk_bytes:,} B does not split so")
        if plan.drafter.early == "all" and shape.needs_tokens:
            return (f"early=all: the {shape.name} drafter is conditioned on the bonus token too (needs_tokens), "
                    "so its forward cannot run before the accept count; use early=fc or off")
        if plan.drafter.early == "all" and shape.block_size:
            return (f"early=all: the {shape.name} drafter drafts a block over every accepted row (block_size "
                    f"{shape.block_size}), so its forward cannot run before the accept count; use early=fc or off")
        return None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        assert plan.stream is not None and plan.drafter is not None
        model, early, chunks = ctx.drafter.model, plan.drafter.early, plan.stream.chunks
        rows = plan.stream.chunk_bytes // (model.shape.hidden_size * 2)
        times = np.zeros((plan.total, P.DRAFT_TAIL.columns), dtype=np.int64)
        ids_view: list[Any] = []
        state: list[StreamedWork] = []  # this cycle's work, made at its first chunk

        def on_chunk(seq: int, j: int, buf: Any) -> None:
            if j == 0:
                state[:] = [model.streamed(rows, plan.k, early)]
            state[0].chunk(j, buf)
            if j == chunks - 1:
                state[0].end()

        def on_end(seq: int, accepted: int, reply: Any) -> None:
            if not ids_view:
                ids_view.append(np.frombuffer(reply, dtype=np.dtype(f"<u{plan.id_bytes}"), count=plan.k))
            ids, waited = state[0].answer(accepted)
            ids_view[0][:] = ids
            times[seq] = (waited, 0, rows, state[0].early_ns, 0, 0, 0)

        return self.run_stream(chan, plan, ctx, on_chunk, on_end, {P.DRAFT_TAIL.name: times})


class DraftRoundTrip(HostRoundTrip):
    """The client's end of a drafter plan: the host round trip in the Python loop, the ids
    the drafter's (checked after the loop); the reply time without the drafter's forward is
    `hop_ex_draft_ns`."""

    name = "drafter round trip"

    def cycles(self, data: DataPath, run: PlanRun) -> int:
        from hopbench.core.timing import run_cycles

        chan, plan = data.channel, run.plan
        request, self.reply_host = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        body = np.frombuffer(memoryview(request).cast("B"), dtype=np.uint8)
        body[:] = np.random.default_rng(0).integers(0, 256, body.size, dtype=np.uint8)  # the rows: random states
        return run_cycles(chan, request, self.reply_host, DraftIds(plan.k, plan.id_bytes), run.m.samples_ns,
                          **run.loop_args("python"))

    def after(self, data: DataPath, run: PlanRun) -> None:
        super().after(data, run)
        add_ex_draft(run)


class StreamedDraftRoundTrip(StreamedRoundTrip):
    """A streamed plan to the drafter model: the streamed hop, its ids the drafter's."""

    name = "streamed drafter round trip"

    def ids(self, run: PlanRun) -> P.ReplyIds:
        return DraftIds(run.plan.k, run.plan.id_bytes)

    def after(self, data: DataPath, run: PlanRun) -> None:
        super().after(data, run)
        add_ex_draft(run)


def add_ex_draft(run: PlanRun) -> None:
    """The hop without the drafter: each cycle's sample minus its forward's (what the
    cycle waited for the drafter)."""
    st = run.m.stages
    if "draft_ns" in st:
        st["hop_ex_draft_ns"] = run.m.samples_ns - st["draft_ns"]
    if "server_ns" in st and st["server_ns"].any():  # streamed plans time the drafter from the end message
        st["hop_ex_server_ns"] = run.m.samples_ns - st["server_ns"]


__all__ = ["DraftEcho", "DraftIds", "DraftRoundTrip", "NO_DRAFTER", "StreamDraft",
           "StreamedDraftRoundTrip", "add_ex_draft"]
