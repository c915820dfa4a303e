"""The server's one drafter, shared by its sessions (docs/DRAFTER.md "Batched across
targets"): the rows of the sessions waiting run as one forward of its DraftModel."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from hopbench.core.inputs import DraftModel
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

    def join(self) -> None:
        with self.cv:
            self.active += 1

    def leave(self) -> None:
        with self.cv:
            self.active -= 1
            self.arrived.notify_all()  # a leader waiting for this session's rows waits no more

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
