"""One streamed cycle's drafter work (docs/DRAFTER.md "Started on what has arrived"): the
drafter model's forward begun on the aux taps that have landed, as hopbench serve's
stream-draft kind feeds them (hopbench.core.kinds.draft.StreamDraft, through the core's
DraftModel.streamed)."""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np


class Forward(Protocol):
    """What the streamed work calls of its model (hopbench.models.drafter.Model): the fc
    slice of a tap, the forward after fc, the whole forward on a cycle's rows."""

    torch: Any
    device: str
    shape: Any  # its taps

    def fc(self, x: Any, tap: int | None = None) -> Any: ...

    def tap_rows(self, body: Any, rows: int) -> Any: ...

    def tail(self, h: Any, k: int, every: bool) -> Any: ...

    def run_bodies(self, bodies: list[Any], rows: int, k: int) -> tuple[Any, int, int, int]: ...


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

    def __init__(self, model: Forward, rows: int, k: int, early: str) -> None:
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
                host = m.run_bodies([body.reshape(-1)], self.rows, self.k)[0][0]  # its forward alone
            else:
                ids = m.tail(self.acc, self.k, every=False)[0] if self.early == "fc" else \
                    self.ids[min(accepted, self.rows - 1)]
                host = ids.to("cpu").numpy()
        waited = time.perf_counter_ns() - t0
        if self._events:
            self.early_ns = int(round(sum(a.elapsed_time(b) for a, b in self._events) * 1e6))
        return host, waited
