"""The drafter kinds' two ends (docs/DRAFTER.md): a plan with a `drafter` block is served by
the server's drafter model (`hopbench serve --drafter SHAPE`, hopbench.core.drafter), whose
forward runs on each cycle's rows and whose argmax ids are the reply. Synchronous plans go
through the server's Batcher (the rows of the sessions waiting, one forward); streamed plans
start the forward on the taps that have landed (`early`).

After the last reply the server sends the draft tail (int64 total x 4: draft_ns, queue_ns,
batch_rows, early_ns per cycle; protocol.DRAFT_TAIL); the client records them as stages
beside `hop_ex_draft_ns`, the reply time without the drafter's."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.client_paths import DataPath, HostRoundTrip, PlanRun, StreamedRoundTrip
from hopbench.core.serving import PlanContext, ServingPath, StreamDrafter, abort, bad_request
from hopbench.core.transport import Channel, Transport
from hopbench.errors import ConfigError, HopbenchError


@dataclass
class Ask:
    """One session's rows waiting for a batch: filled in by whoever runs the batch."""

    body: Any
    rows: int
    k: int
    t_in: int
    ids: Any = None
    draft_ns: int = 0
    queue_ns: int = 0
    batch_rows: int = 0
    error: BaseException | None = None
    done: bool = False


class Batcher:
    """The server's one drafter, shared by its sessions: a session's rows wait up to
    `window_s` for the others' (sessions with the same rows and K; never for more sessions
    than are serving a drafter plan now), then run in one forward of at most `max_batch`
    sessions; each is answered when its batch ends. The first waiter
    leads: it waits for the window (the batching policy, a timed wait on a condition that the
    others' arrivals signal), takes the queue and runs the forward; the rest wait to be
    woken. window 0: each session's rows run at once, alone unless others are already queued."""

    def __init__(self, model: Any, window_s: float = 0.0, max_batch: int = 8) -> None:
        self.model, self.window_s, self.max_batch = model, window_s, max(1, max_batch)
        self.cv = threading.Condition()
        self.queue: list[Ask] = []
        self.running = False
        self.gpu = threading.Lock()  # one forward at a time on the device
        self.active = 0  # sessions serving a drafter plan now: a batch waits for no more than these

    def join(self) -> None:
        with self.cv:
            self.active += 1

    def leave(self) -> None:
        with self.cv:
            self.active -= 1
            self.cv.notify_all()

    def submit(self, body: Any, rows: int, k: int) -> Ask:
        ask = Ask(body, rows, k, time.perf_counter_ns())
        with self.cv:
            self.queue.append(ask)
            self.cv.notify_all()
            while not ask.done:
                if not self.running:
                    self.running = True
                    break
                self.cv.wait()
            if ask.done:
                return self._raise(ask)
        self._lead()
        return self._raise(ask)

    @staticmethod
    def _raise(ask: Ask) -> Ask:
        if ask.error is not None:
            raise ask.error
        return ask

    def _lead(self) -> None:
        """Run batches until the queue is empty (this thread's own ask is among them)."""
        try:
            while True:
                with self.cv:
                    deadline = time.monotonic() + self.window_s
                    want = max(1, min(self.max_batch, self.active))  # nobody else to wait for: no wait
                    while len(self.queue) < want and (left := deadline - time.monotonic()) > 0:
                        self.cv.wait(left)
                    if not self.queue:
                        return
                    first = self.queue[0]
                    batch = [a for a in self.queue if (a.rows, a.k) == (first.rows, first.k)][:self.max_batch]
                    self.queue = [a for a in self.queue if a not in batch]
                self._run(batch)
                with self.cv:
                    self.cv.notify_all()
                    if not self.queue:
                        return
        finally:
            with self.cv:
                self.running = False
                self.cv.notify_all()

    def _run(self, batch: list[Ask]) -> None:
        m = self.model
        t_start = time.perf_counter_ns()
        try:
            with self.gpu:
                ids, ns = m.run_bodies([a.body for a in batch], batch[0].rows, batch[0].k)
        except Exception as exc:  # the batch's sessions all learn why (an OOM, a capture that failed)
            err = exc if isinstance(exc, HopbenchError) else ConfigError(f"the drafter's forward failed: {exc}")
            for a in batch:
                a.error, a.done = err, True
            return
        for j, a in enumerate(batch):
            a.ids, a.draft_ns, a.queue_ns = ids[j], ns, t_start - a.t_in
            a.batch_rows, a.done = len(batch) * a.rows, True


EARLY = ("off", "fc", "all")


class StreamedDraft:
    """One streamed cycle's drafter work (docs/DRAFTER.md "Started on what has arrived"):
    `chunk(j, body)` as tap j's rows land, `end()` once the last is in, `answer(accepted)`
    after the accept count. off: the whole forward after the accept count; fc: each tap's
    slice of fc as its chunk lands, the rest after; all: the whole forward for every candidate
    row once the last tap is in (the accept count only picks the row: valid for a drafter
    conditioned on the states alone). On a GPU with graphs, off runs the staged graphed
    forward, fc and all a graph of the forward after fc; fc's slices run eager as they land.
    Times: `early_ns` the early work from the last tap's arrival on (its own device time:
    what the forward's tail must hide), `draft_ns` the work after the accept count (the
    host's clock from the accept count to the ids on the host: what the cycle waits for)."""

    def __init__(self, model: Any, rows: int, k: int, early: str) -> None:
        self.m, self.rows, self.k, self.early = model, rows, k, early
        self.last_tap = model.shape.taps - 1  # a streamed drafter plan's chunks are its taps (StreamDraft.check)
        self.taps: list[Any] = []
        self.acc: Any = None
        self.ids: Any = None
        self.early_ns = 0
        self._events: list[Any] = []

    def _timed(self, work: Any, counted: bool = True) -> Any:
        """Run one piece of early work; with `counted` its own time is kept (CUDA events on a
        GPU, summed at the answer; the clock on a CPU). Counted is the work from the last
        tap's arrival on, what the forward's tail must hide: the earlier taps' slices run while
        the target's forward still has layers to go, and the gaps between chunks are not work."""
        m = self.m
        if not counted:
            return work()
        if m.device == "cuda":
            start, end = m.torch.cuda.Event(enable_timing=True), m.torch.cuda.Event(enable_timing=True)
            start.record()
            out = work()
            end.record()
            self._events.append((start, end))
            return out
        t0 = time.perf_counter_ns()
        out = work()
        self.early_ns += time.perf_counter_ns() - t0
        return out

    def chunk(self, j: int, body: Any) -> None:
        if self.early == "off":
            self.taps.append(np.frombuffer(body, dtype=np.uint8).copy())
            return
        with self.m.torch.inference_mode():
            part = self._timed(lambda: self.m.fc(self.m.tap_rows(body, self.rows), tap=j), counted=j == self.last_tap)
            self.acc = part if self.acc is None else self.acc + part

    def end(self) -> None:
        """The last tap is in: 'all' launches the rest of the forward now (asynchronous on a GPU)."""
        if self.early != "all":
            return
        with self.m.torch.inference_mode():
            self.ids = self._timed(lambda: self.m.tail(self.acc, self.k, every=True))  # every candidate

    def answer(self, accepted: int) -> tuple[Any, int]:
        """The K ids once the accept count is in, and the ns the cycle waited for them."""
        t0 = time.perf_counter_ns()
        m = self.m
        with m.torch.inference_mode():
            if self.early == "off":
                body = np.concatenate([t.reshape(self.rows, -1) for t in self.taps], axis=1)
                host = m.run_bodies([body.reshape(-1)], self.rows, self.k)[0][0]
            else:
                ids = m.tail(self.acc, self.k, every=False)[0] if self.early == "fc" else \
                    self.ids[min(accepted, self.rows - 1)]
                host = ids.to("cpu").numpy()
        waited = time.perf_counter_ns() - t0
        if self._events:
            self.early_ns = int(round(sum(a.elapsed_time(b) for a, b in self._events) * 1e6))
        return host, waited


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
        batcher = ctx.config.drafter
        shape = batcher.model.shape
        request, reply = chan.alloc(plan.request_bytes), chan.alloc(plan.reply_bytes)
        rows = plan.request_bytes // shape.row_bytes
        times = np.zeros((plan.total, 4), dtype=np.int64)
        ids_view = np.frombuffer(reply, dtype=np.dtype(f"<u{plan.id_bytes}"), count=plan.k)
        seq = 0
        batcher.join()
        try:
            for seq in range(plan.total):
                chan.recv_into(request)
                if P.SEQ.unpack_from(request, 0)[0] != seq:
                    bad_request(ctx, chan, request, seq, plan)
                    return seq
                try:
                    ask = batcher.submit(request, rows, plan.k)
                except HopbenchError as exc:
                    abort(chan, str(exc), plan)
                ids_view[:] = ask.ids
                chan.send(reply)
                times[seq] = (ask.draft_ns, ask.queue_ns, ask.batch_rows, 0)
            seq = plan.total
        finally:
            batcher.leave()
            ctx.progress.done = seq
        P.send_tails(chan, plan, {P.DRAFT_TAIL.name: times})
        return plan.total


class StreamDraft(StreamDrafter):
    """A streamed plan to the drafter model: each tap's chunk feeds the drafter as it lands
    (hopbench.core.drafter.StreamedDraft: early off, fc or all), the reply's ids are its."""

    name = "stream drafter model"

    def check(self, plan: P.Plan, ctx: PlanContext, transport: Transport) -> str | None:
        wrong = _refusal(plan, ctx)
        if wrong:
            return wrong
        assert plan.stream is not None and plan.drafter is not None
        shape = ctx.config.drafter.model.shape
        if plan.stream.chunks != shape.taps or plan.stream.chunk_bytes % (shape.hidden_size * 2):
            return (f"the {shape.name} drafter takes {shape.taps} taps of {shape.hidden_size} BF16 values a row: "
                    f"a streamed plan of {plan.stream.chunks} chunks of {plan.stream.chunk_bytes:,} B does not split so")
        if plan.drafter.early == "all" and shape.needs_tokens:
            return (f"--early all: the {shape.name} drafter is conditioned on the bonus token too (needs_tokens), "
                    "so its forward cannot run before the accept count; use --early fc or off")
        return None

    def serve(self, chan: Channel, plan: P.Plan, ctx: PlanContext) -> int:
        assert plan.stream is not None and plan.drafter is not None
        model = ctx.config.drafter.model
        rows = plan.stream.chunk_bytes // (model.shape.hidden_size * 2)
        times = np.zeros((plan.total, 4), dtype=np.int64)
        ids_view: list[Any] = []
        state: list[Any] = [None]

        def on_chunk(seq: int, j: int, buf: Any) -> None:
            if j == 0:
                state[0] = StreamedDraft(model, rows, plan.k, plan.drafter.early)  # type: ignore[union-attr]
            state[0].chunk(j, buf)
            if j == plan.stream.chunks - 1:  # type: ignore[union-attr]
                state[0].end()

        def on_end(seq: int, accepted: int, reply: Any) -> None:
            if not ids_view:
                ids_view.append(np.frombuffer(reply, dtype=np.dtype(f"<u{plan.id_bytes}"), count=plan.k))
            ids, waited = state[0].answer(accepted)
            ids_view[0][:] = ids
            times[seq] = (waited, 0, rows, state[0].early_ns)

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


__all__ = ["Ask", "Batcher", "DraftEcho", "DraftIds", "DraftRoundTrip", "EARLY", "NO_DRAFTER", "StreamDraft",
           "StreamedDraft", "StreamedDraftRoundTrip", "add_ex_draft"]
