"""The server's one drafter, shared by its sessions (docs/DRAFTER.md "Batched across
targets"): the rows of the sessions waiting run as one forward of its DraftModel."""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hopbench.core import protocol as P
from hopbench.core.inputs import DraftModel
from hopbench.errors import ConfigError, HopbenchError, PeerClosed, Timeout, TransportError


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
    stage_ns: int = 0  # the batch's bodies into the forward's input (host copies, H2D)
    back_ns: int = 0  # its ids back on the host (D2H)
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

    def __init__(self, model: DraftModel, window_s: float = 0.0, max_batch: int = 8) -> None:
        self.model, self.window_s, self.max_batch = model, window_s, max(1, max_batch)
        lock = threading.Lock()
        #: the leader waits on `arrived` (an ask queued), the others on `cv` (a batch answered,
        #: the lead taken or free): an arrival wakes the leader alone, not every waiter (at M = 8
        #: a batch's arrivals made 7 x 8 wake-ups, each a turn at the interpreter's lock)
        self.cv, self.arrived = threading.Condition(lock), threading.Condition(lock)
        self.queue: list[Ask] = []
        self.running = False
        self.gpu = threading.Lock()  # one forward at a time on the device
        self.active = 0  # sessions serving a drafter plan now: a batch waits for no more than these
        self._loop: Loop | None = None

    def loop(self, spin: bool) -> Loop:
        """The one thread that serves socket sessions' cycles (Loop), made at the first."""
        with self.cv:
            if self._loop is None:
                self._loop = Loop(self, spin)
            return self._loop

    def join(self) -> None:
        with self.cv:
            self.active += 1

    def leave(self) -> None:
        with self.cv:
            self.active -= 1
            self.arrived.notify_all()  # a leader waiting for this session's rows waits no more
            if self._loop is not None:
                self._loop.poke()  # nor does the loop's window

    def submit(self, body: Any, rows: int, k: int) -> Ask:
        ask = Ask(body, rows, k, time.perf_counter_ns())
        with self.cv:
            self.queue.append(ask)
            self.arrived.notify()
            while not ask.done:
                if not self.running:
                    self.running = True
                    self.cv.notify_all()  # the lead taken (a test waits for it)
                    break
                self.cv.wait()
            if ask.done:
                return self._raise(ask)
        self._lead(ask)
        return self._raise(ask)

    @staticmethod
    def _raise(ask: Ask) -> Ask:
        if ask.error is not None:
            raise ask.error
        return ask

    def _lead(self, mine: Ask) -> None:
        """Run batches until this thread's own ask is answered, then hand the lead to a waiter:
        a leader that went on leading would hold its own reply for the next window and forward
        (measured at 8 targets on an H100: batches of 5 and 3 in turn, each target queued a
        whole forward; docs/DRAFTER.md "Capacity")."""
        try:
            while not mine.done:
                with self.cv:
                    deadline = time.monotonic() + self.window_s
                    want = max(1, min(self.max_batch, self.active))  # nobody else to wait for: no wait
                    while len(self.queue) < want and (left := deadline - time.monotonic()) > 0:
                        self.arrived.wait(left)
                    first = self.queue[0]
                    batch = [a for a in self.queue if (a.rows, a.k) == (first.rows, first.k)][:self.max_batch]
                    self.queue = [a for a in self.queue if a not in batch]
                self._run(batch)
                with self.cv:
                    self.cv.notify_all()
        finally:
            with self.cv:
                self.running = False
                self.cv.notify_all()

    def _run(self, batch: list[Ask]) -> None:
        m = self.model
        t_start = time.perf_counter_ns()
        try:
            with self.gpu:
                ids, ns, staged, back = m.run_bodies([a.body for a in batch], batch[0].rows, batch[0].k)
        except Exception as exc:  # the batch's sessions all learn why (an OOM, a capture that failed)
            err = exc if isinstance(exc, HopbenchError) else ConfigError(f"the drafter's forward failed: {exc}")
            for a in batch:
                a.error, a.done = err, True
            return
        for j, a in enumerate(batch):
            a.ids, a.draft_ns, a.queue_ns, a.stage_ns, a.back_ns = ids[j], ns, t_start - a.t_in, staged, back
            a.batch_rows, a.done = len(batch) * a.rows, True


#: how often the Loop looks for sessions silent past their timeout (s)
_CHECK_S = 0.5


@dataclass(eq=False)
class Cycles:
    """One session's drafter plan, served by the Loop: its channel (whose messages arrive on
    `chan.socket`), its buffers, where it is (`seq`; `got` bytes of the request coming in), how
    long it may stay silent (`timeout_s`, from the last byte that moved), and how it ended
    (`failed`: the forward's error, told to the client on the data stream; `error`: the
    channel's; `bad`: a request out of place)."""

    chan: Any
    request: Any
    reply: Any
    ids: Any  # the reply's ids, a view into `reply`
    times: Any  # (total, DRAFT_TAIL columns) int64: the draft tail's rows
    rows: int
    k: int
    total: int
    timeout_s: float
    seq: int = 0
    got: int = 0
    deadline: float = 0.0  # time.monotonic() by which more of the next request must have come
    t_in: int = 0
    body: Any = None  # where this cycle's request was received: a slot of the model's, or `request`
    slot: int | None = None
    failed: BaseException | None = None
    error: BaseException | None = None
    bad: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class Loop:
    """One thread serves every socket session's drafter cycles (SGLang's scheduler, vLLM's
    engine core: one loop receives the requests, forms the batch, runs the forward, sends the
    replies). With a thread per session, each cycle of M targets took 3-4 turns at the
    interpreter's lock per session, one wake-up each, and full batches left ~1 ms between
    forwards on an H100 (docs/DRAFTER.md "Capacity"). Here a session's thread hands its
    channel over (`serve`) and waits; the loop waits for readable sockets (spinning where the
    host has CPUs to spare: `spin`), takes what each has without waiting for the rest (a slow
    sender holds up nobody else), and runs a batch once the sessions serving now have all
    asked (at most `max_batch`) or the window since the first ask ended. A session silent for
    its timeout ends with Timeout, as its own thread's receive would."""

    def __init__(self, batcher: Batcher, spin: bool = False) -> None:
        self.b, self.spin = batcher, spin
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: list[Cycles] = []
        self._lock = threading.Lock()
        self.held: set[Cycles] = set()  # sessions in the loop
        self.dead: BaseException | None = None
        self.asked: list[Cycles] = []  # sessions whose request is in, waiting for a batch
        #: per (rows, K): the model's slots (DraftModel.slots) and those holding an asked request
        self._slots: dict[tuple[int, int], tuple[list[Any], set[int]]] = {}
        self.thread = threading.Thread(target=self._run, name="drafter-loop", daemon=True)
        self.thread.start()

    def serve(self, c: Cycles) -> Cycles:
        """Serve this session's cycles in the loop; returns once they ended, one way or another."""
        with self._lock:
            if self.dead is not None:
                c.error = ConfigError(f"the drafter's serving loop failed: {self.dead!r}")
                return c
            self._new.append(c)
        self.poke()
        c.ended.wait()
        return c

    def poke(self) -> None:
        """Wake the loop: a session came, or one left (a batch waits for no more than are serving)."""
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:  # a wake-up is pending already
            pass

    def _run(self) -> None:
        try:
            self._serve_all()
        except BaseException as exc:  # a fault of the loop's own: every session it holds learns it
            with self._lock:
                self.dead, held = exc, [*self._new, *self.held]
            for c in held:
                c.error = ConfigError(f"the drafter's serving loop failed: {exc!r}")
                c.ended.set()

    def _serve_all(self) -> None:
        checked = time.monotonic()
        while True:
            wait: float | None = None if not self.held else _CHECK_S  # the sessions' timeouts are looked at
            if self.spin and self.held:
                wait = 0.0
            elif self.asked:
                wait = max(0.0, self.asked[0].t_in / 1e9 + self.b.window_s - time.perf_counter())
            for key, _ in self.sel.select(wait):
                if key.data is None:
                    self._take()
                else:
                    self._receive(key.data)
            if self.asked and self._due():
                self._batch()
            if (now := time.monotonic()) - checked >= _CHECK_S:
                checked = now
                self._expire(now)

    def _expire(self, now: float) -> None:
        """End the sessions whose next request has not moved for their timeout."""
        waiting = set(self.asked)
        for c in [c for c in self.held if c not in waiting and now > c.deadline]:
            self.sel.unregister(c.chan.socket)
            self._release(c)
            c.error = Timeout(f"receive timed out after {c.timeout_s} s")
            self._end(c)

    def _take(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            new, self._new = self._new, []
        for c in new:
            self.held.add(c)
            c.deadline = time.monotonic() + c.timeout_s
            self.sel.register(c.chan.socket, selectors.EVENT_READ, c)

    def _due(self) -> bool:
        want = max(1, min(self.b.max_batch, self.b.active))
        same = sum(1 for c in self.asked if (c.rows, c.k) == (self.asked[0].rows, self.asked[0].k))
        return same >= want or time.perf_counter() >= self.asked[0].t_in / 1e9 + self.b.window_s

    def _end(self, c: Cycles) -> None:
        """The session's cycles ended (all served, or a fault): its thread goes on."""
        self.held.discard(c)
        c.ended.set()

    def _receive(self, c: Cycles) -> None:
        """Take what the socket has of c's next request (never waiting for the rest); a whole
        one joins the asked. A request starts in the first free slot of the model's, if any."""
        if c.got == 0:
            slots, taken = self._slots.get((c.rows, c.k)) or self._slots.setdefault(
                (c.rows, c.k), (self.b.model.slots(c.rows, c.k), set()))
            c.slot = next((j for j in range(len(slots)) if j not in taken), None)
            c.body = c.request if c.slot is None else slots[c.slot]  # a slot: the forward's stage, no copy
            if c.slot is not None:
                taken.add(c.slot)
        view = memoryview(c.body).cast("B")
        try:
            moved = c.chan.socket.recv_into(view[c.got:], len(view) - c.got, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError as exc:
            return self._fail(c, PeerClosed("peer reset the connection") if isinstance(exc, ConnectionResetError)
                              else TransportError(f"receive failed: {exc}"))
        if moved == 0:
            return self._fail(c, PeerClosed("peer closed the connection" + (
                f" mid-message ({c.got} of {len(view)} bytes)" if c.got else "")))
        c.got += moved
        c.deadline = time.monotonic() + c.timeout_s
        if c.got < len(view):
            return
        c.got = 0
        self.sel.unregister(c.chan.socket)  # nothing more from it until it is answered
        c.t_in = time.perf_counter_ns()
        if P.SEQ.unpack_from(c.body, 0)[0] != c.seq:
            if c.body is not c.request:
                memoryview(c.request).cast("B")[:] = c.body  # the session's thread reads what came
            self._release(c)
            c.bad = True
            return self._end(c)
        self.asked.append(c)

    def _fail(self, c: Cycles, exc: BaseException) -> None:
        self.sel.unregister(c.chan.socket)
        self._release(c)
        c.error = exc
        self._end(c)

    def _release(self, c: Cycles) -> None:
        """c's slot is free again."""
        if c.slot is not None:
            self._slots[c.rows, c.k][1].discard(c.slot)
            c.slot = None

    def _batch(self) -> None:
        first = self.asked[0]
        batch = [c for c in self.asked if (c.rows, c.k) == (first.rows, first.k)][:self.b.max_batch]
        self.asked = [c for c in self.asked if c not in batch]
        asks = [Ask(c.body, c.rows, c.k, c.t_in) for c in batch]
        self.b._run(asks)
        for c in batch:
            self._release(c)
        for c, a in zip(batch, asks):
            if a.error is not None:
                c.failed = a.error
                self._end(c)
                continue
            c.ids[:] = a.ids
            t_out = time.perf_counter_ns()
            try:
                c.chan.send(c.reply)
            except BaseException as exc:
                c.error = exc
                self._end(c)
                continue
            c.times[c.seq] = (a.draft_ns, a.queue_ns, a.batch_rows, 0, a.stage_ns, a.back_ns, t_out - c.t_in)
            c.seq += 1
            if c.seq == c.total:
                self._end(c)
            else:
                c.deadline = time.monotonic() + c.timeout_s
                self.sel.register(c.chan.socket, selectors.EVENT_READ, c)
