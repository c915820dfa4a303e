"""The target's side of the streamed hop made real (issue 65, docs/STREAM.md "A real
producer"): a target-shaped layer stack runs each cycle's verify forward on the client's
device, and each aux tap's K + 1 rows leave it as they are computed.

The stack: `layers` decoder-sized layers over (K + 1, hidden) BF16 rows, each
h += silu(h @ W_up) @ W_down, every layer reading the same two weight matrices (each far
larger than the GPU's L2, so every layer reads them from memory: a decode forward is weight-
read bound, as the target's own is). Their width is sized at start so the forward takes
`forward_ms`: one layer timed at a trial width, the width scaled to forward_ms / layers (the
time is linear in the bytes read), and the whole forward timed again; both are recorded.

At each aux tap (after layer t) the rows are copied to pinned host memory on a side stream
that waits for the tap's event, and the sender ships the chunk once the copy has landed. Two
ways under CUDA graphs (`graphs`):

- **piecewise** (vLLM's way around its layer-wise connectors' hooks): one graph per segment
  between taps, replayed back to back; the copies and their events between them;
- **full**: one graph with the side-stream copies inside and, after each, the cycle's number
  copied into a pinned flag word that the host watches (the copy's landing made visible
  without leaving the graph).

The same forward with no taps (one graph of every layer) is what the taps cost against:
`extraction_cost` times both in ABBA blocks and gives the median paired difference with its
distribution-free interval. On a CPU (the tests' stand-in) the layers run in a worker thread,
each tap's rows copied into host memory and an event set per tap; graphs do not apply."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopbench.errors import ConfigError

#: graph modes of the GPU producer
GRAPHS = ("piecewise", "full", "off")
#: the trial width a layer is timed at before it is sized (the weights' inner dimension)
TRIAL_WIDTH = 4096
#: the sizing's rounds (the forward timed, the width rescaled) and the error it stops within
SIZING_ROUNDS, SIZING_TOLERANCE = 6, 0.03
#: layers run before the sizing's first timing (a GPU idle before it runs at low clocks)
WARM_LAYERS = 200
#: the longest a producer waits for a tap or the forward's end before it gives up
WAIT_S = 60.0


@dataclass(frozen=True)
class TargetShape:
    """What the producer's forward is shaped by: its layer count, the aux taps (layer numbers,
    1-based: tap t is the residual stream after t layers), the hidden width and the rows a
    verify forward computes (K + 1)."""

    layers: int
    taps: tuple[int, ...]
    hidden: int
    rows: int

    def check(self) -> None:
        if self.layers < 1 or not self.taps or min(self.taps) < 1 or max(self.taps) > self.layers:
            raise ConfigError(f"the target's taps {list(self.taps)} must be layers 1..{self.layers}")
        if list(self.taps) != sorted(set(self.taps)):
            raise ConfigError(f"the target's taps {list(self.taps)} must rise, each once")
        if self.hidden < 8 or self.rows < 1:
            raise ConfigError(f"the target's rows: {self.rows} x {self.hidden} values")

    @property
    def chunk_bytes(self) -> int:
        return self.rows * self.hidden * 2


def check_gpu(torch: Any, asked: str) -> None:
    """The one-line refusal of a GPU producer on a host where torch sees no GPU."""
    if not torch.cuda.is_available():
        raise ConfigError(f"{asked}: torch sees no GPU on this host (the target's forward runs on the client's GPU); "
                          "stream from the clock instead (--stream layers,forward=MS,times=FILE)")


class TargetForward:
    """The producer: `start()` begins a cycle's forward (asynchronous), `tap(j)` waits until tap
    j's rows are in host memory and returns that chunk (a writable byte view), `end()` waits
    for the forward's end; `times()` is the last cycle's device-side times (ns from the
    forward's start: each tap ready, each copy landed, the forward's end)."""

    def __init__(self, shape: TargetShape, forward_ms: float, device: str, graphs: str = "piecewise",
                 width: int | None = None) -> None:
        from hopbench.models.drafter import load_torch

        shape.check()
        if graphs not in GRAPHS:
            raise ConfigError(f"the target's graphs: one of {', '.join(GRAPHS)}")
        torch = self.torch = load_torch()
        if device == "cuda":
            check_gpu(torch, "--target gpu")
        self.shape, self.device, self.forward_ms = shape, device, forward_ms
        self.graphs = graphs if device == "cuda" else "off"
        self.cycles = 0
        self.h = torch.zeros(shape.rows, shape.hidden, dtype=torch.bfloat16, device=device)
        self.host = [torch.zeros(shape.rows, shape.hidden, dtype=torch.bfloat16, pin_memory=device == "cuda")
                     for _ in shape.taps]
        self.views = [h.view(torch.uint8).numpy().reshape(-1) for h in self.host]
        self.width = width or self._sized()
        rounds = SIZING_ROUNDS if width is None else 1
        #: the sizing's rounds as run: (width, the forward's ms), recorded (a device run that
        #: did not settle shows how it moved)
        self.sizing: list[tuple[int, float]] = []
        for done in range(1, rounds + 1):  # the whole forward timed, the width scaled by what it missed
            self._weights(self.width)
            self._runner: _GpuRun | _CpuRun = _GpuRun(self) if device == "cuda" else _CpuRun(self)
            self.measured_ms = self._forward_ms()
            self.sizing.append((self.width, self.measured_ms))
            if done == rounds or abs(self.measured_ms / forward_ms - 1) <= SIZING_TOLERANCE:
                break
            self.width = self._capped(int(self.width * forward_ms / self.measured_ms))

    # -- the forward ----------------------------------------------------------------------
    def _weights(self, width: int) -> None:
        torch, hsz = self.torch, self.shape.hidden
        gen = torch.Generator(device=self.device).manual_seed(0)
        self.w_up = (torch.randn(hsz, width, generator=gen, device=self.device) / hsz ** 0.5).to(torch.bfloat16)
        self.w_down = (torch.randn(width, hsz, generator=gen, device=self.device) / width ** 0.5).to(torch.bfloat16)

    def layer(self) -> None:
        """One layer, in place on the rows (a decode layer's weight reads, its output added)."""
        torch = self.torch
        self.h.add_(torch.nn.functional.silu(self.h @ self.w_up) @ self.w_down)
        self.h.clamp_(-8.0, 8.0)  # random weights: the rows stay finite cycle after cycle

    def run_layers(self, layers: range) -> None:
        for _ in layers:
            self.layer()

    def segments(self) -> list[range]:
        """The layers between taps: segment j ends at tap j; the last runs to the forward's end."""
        bounds = [0, *self.shape.taps, self.shape.layers]
        return [range(a, b) for a, b in zip(bounds, bounds[1:])]

    def _sized(self) -> int:
        """The width that makes the forward take forward_ms: one layer timed at TRIAL_WIDTH, the
        width scaled (a layer's time is linear in the bytes it reads), capped by memory."""
        self._weights(TRIAL_WIDTH)
        for _ in range(WARM_LAYERS):  # the device's clocks up before anything is timed
            self.layer()
        per_layer = _best_ms(self, lambda: self.layer(), 5)
        want = self.forward_ms / self.shape.layers
        return self._capped(int(TRIAL_WIDTH * want / per_layer))

    def _capped(self, width: int) -> int:
        """A width between 64 and what half the device's free memory holds (both matrices; the
        current weights' bytes counted free, as they are replaced)."""
        from hopbench.models.drafter import memory_free

        held = 2 * self.w_up.numel() * 2 if getattr(self, "w_up", None) is not None else 0
        most = (memory_free(self.torch, self.device) + held) // (4 * self.shape.hidden * 2)
        return int(max(64, min(width, most)))

    def _forward_ms(self) -> float:
        """The forward without taps, measured (best of 5): what the sizing achieved."""
        return _best_ms(self, self._runner.plain, 5)

    # -- a cycle (the Producer protocol: hopbench.core.inputs) ------------------------------
    def start(self) -> None:
        self.cycles += 1
        self._runner.start(self.cycles)

    def tap(self, j: int) -> Any:
        self._runner.wait_tap(j, self.cycles)
        return self.views[j]

    def end(self) -> None:
        self._runner.wait_end()

    def times(self) -> tuple[list[int], list[int], int]:
        return self._runner.times()

    def extraction_cost(self, blocks: int = 10, reps: int = 5) -> dict[str, Any]:
        """The forward with taps against the same forward without, in ABBA blocks of `reps`
        each: the median paired difference (ms) and its distribution-free interval."""
        from hopbench.estimate import median_interval

        with_ms, without_ms, diffs = [], [], []
        self._tapped()  # each side warmed once, before the blocks
        self._runner.plain()
        for b in range(blocks):
            order = (True, False, False, True) if b % 2 == 0 else (False, True, True, False)
            got: dict[bool, list[float]] = {True: [], False: []}
            for tapped in order:
                got[tapped].append(_best_ms(self, self._tapped if tapped else self._runner.plain, reps, best=False,
                                            warm=False))
            w, wo = float(np.mean(got[True])), float(np.mean(got[False]))
            with_ms.append(w)
            without_ms.append(wo)
            diffs.append(w - wo)
        lo, hi, level = median_interval(diffs)
        return {"with_taps_ms": float(np.median(with_ms)), "without_taps_ms": float(np.median(without_ms)),
                "cost_ms": float(np.median(diffs)), "cost_lo_ms": lo, "cost_hi_ms": hi, "level": level,
                "blocks": blocks, "reps": reps, "graphs": self.graphs}

    def tap_times(self, forwards: int = 10) -> dict[str, Any]:
        """Medians over `forwards` tapped forwards (ms from the forward's start): each tap's
        ready time, its copy's landing, the copy's own time, and the forward's end (the taps'
        are absent where a full graph hides them)."""
        ready, copied, ends = [], [], []
        for _ in range(forwards):
            self._tapped()
            r, c, e = self.times()
            ready.append(r)
            copied.append(c)
            ends.append(e)
        out: dict[str, Any] = {"forward_with_taps_ms": float(np.median(ends)) / 1e6}
        if ready[0]:
            r_ns, c_ns = np.array(ready), np.array(copied)
            out.update(tap_ready_ms=[float(v) / 1e6 for v in np.median(r_ns, axis=0)],
                       tap_copied_ms=[float(v) / 1e6 for v in np.median(c_ns, axis=0)],
                       tap_copy_ms=[float(v) / 1e6 for v in np.median(c_ns - r_ns, axis=0)])
        return out

    def _tapped(self) -> None:
        self.start()
        for j in range(len(self.shape.taps)):
            self._runner.wait_tap(j, self.cycles)
        self.end()

    def layer_times_ms(self, reps: int = 5) -> list[float]:
        """Each layer's end time within the forward (ms, medians of `reps` eager forwards timed
        per layer): what `--stream layers,times=FILE` reads, for a host without this GPU."""
        return self._runner.layer_times(reps)

    @property
    def chunk_bytes(self) -> int:
        """The bytes `tap(j)` returns: K + 1 rows of the hidden width, BF16."""
        return self.shape.chunk_bytes

    @property
    def ready_ns(self) -> tuple[int, ...]:
        """The taps' ready times as a schedule would give them (the Schedule protocol): each
        tap's share of the layers of the measured forward."""
        return tuple(int(t / self.shape.layers * self.measured_ms * 1e6) for t in self.shape.taps)

    @property
    def end_ns(self) -> int:
        return int(self.measured_ms * 1e6)

    def record(self) -> dict[str, Any]:
        """What the run keeps about its producer."""
        return {"kind": "gpu" if self.device == "cuda" else "cpu", "device": self._device_name(),
                "graphs": self.graphs, "layers": self.shape.layers, "taps": list(self.shape.taps),
                "hidden": self.shape.hidden, "rows": self.shape.rows, "width": self.width,
                "weight_bytes_per_layer": 2 * self.shape.hidden * self.width * 2,
                "forward_ms_asked": self.forward_ms, "forward_ms_measured": self.measured_ms,
                "sizing": [{"width": w, "forward_ms": ms} for w, ms in self.sizing]}

    def _device_name(self) -> str:
        return str(self.torch.cuda.get_device_name()) if self.device == "cuda" else "cpu"


def _best_ms(t: TargetForward, fn: Any, reps: int, best: bool = True, warm: bool = True) -> float:
    """fn's time in ms, the best (or the mean) of `reps` runs, after one warm-up run unless
    `warm` is off (CUDA events on a GPU, the process clock on a CPU)."""
    torch = t.torch
    if warm:
        fn()
    out = []
    for _ in range(reps):
        if t.device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e6)
    return min(out) if best else float(np.mean(out))


class _CpuRun:
    """The CPU stand-in: the forward in a worker thread, each tap's rows copied into host
    memory and its event set; the sender waits on the events."""

    def __init__(self, t: TargetForward) -> None:
        self.t = t
        self.tapped = [threading.Event() for _ in t.shape.taps]
        self.done = threading.Event()
        self.done.set()
        self.ns: tuple[list[int], list[int], int] = ([], [], 0)
        self.error: BaseException | None = None

    def plain(self) -> None:
        for _ in range(self.t.shape.layers):
            self.t.layer()

    def start(self, cycle: int) -> None:
        if not self.done.wait(WAIT_S):
            raise ConfigError("the target's forward did not end")
        for e in self.tapped:
            e.clear()
        self.done.clear()
        threading.Thread(target=self._forward, name="target-forward", daemon=True).start()

    def _forward(self) -> None:
        t, ready, copied = self.t, [], []
        t0 = time.perf_counter_ns()
        try:
            for j, seg in enumerate(t.segments()):
                for _ in seg:
                    t.layer()
                if j < len(t.shape.taps):
                    ready.append(time.perf_counter_ns() - t0)
                    t.host[j].copy_(t.h)
                    copied.append(time.perf_counter_ns() - t0)
                    self.tapped[j].set()
            self.ns = (ready, copied, time.perf_counter_ns() - t0)
        except BaseException as exc:  # the sender learns it at its next wait
            self.error = exc
            for e in self.tapped:
                e.set()
        finally:
            self.done.set()

    def _raise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise ConfigError(f"the target's forward failed: {err}")

    def wait_tap(self, j: int, cycle: int) -> None:
        if not self.tapped[j].wait(WAIT_S):
            raise ConfigError(f"the target's tap {j} did not land within {WAIT_S:g} s")
        self._raise()

    def wait_end(self) -> None:
        if not self.done.wait(WAIT_S):
            raise ConfigError(f"the target's forward did not end within {WAIT_S:g} s")
        self._raise()

    def times(self) -> tuple[list[int], list[int], int]:
        return self.ns

    def layer_times(self, reps: int) -> list[float]:
        runs = []
        for _ in range(reps):
            t0, ends = time.perf_counter_ns(), []
            for _ in range(self.t.shape.layers):
                self.t.layer()
                ends.append((time.perf_counter_ns() - t0) / 1e6)
            runs.append(ends)
        return [float(v) for v in np.median(np.array(runs), axis=0)]


class _GpuRun:
    """The GPU producer: the forward's launches queued at start (graphed piecewise or whole,
    or eager), the taps' copies on a side stream; the host waits on each copy's event (or, in
    a full graph, watches each tap's pinned flag word)."""

    def __init__(self, t: TargetForward) -> None:
        torch = self.torch = t.torch
        self.t = t
        n = len(t.shape.taps)
        self.side = torch.cuda.Stream()
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n + 2)]  # start, taps, copies, end
        self.flags = torch.zeros(n, dtype=torch.int64, pin_memory=True)
        self.flag_view = self.flags.numpy()
        self.counter = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.plain_graph = self._capture(lambda: t.run_layers(range(t.shape.layers)))
        if t.graphs == "piecewise":
            self.pieces = [self._capture(lambda seg=seg: t.run_layers(seg)) for seg in t.segments()]
        elif t.graphs == "full":
            self.full = self._capture(self._full_body)
            torch.cuda.synchronize()
            self.counter.zero_()  # the capture's warm-up ran the body once: cycles count from 0
            self.flags.zero_()
            torch.cuda.synchronize()

    def _capture(self, fn: Any) -> Any:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g

    def _full_body(self) -> None:
        """The forward with its taps inside one graph: after tap j the side stream copies the
        rows down, then the cycle's number into flag j (the host watches the flags)."""
        torch, t = self.torch, self.t
        self.counter.add_(1)
        main = torch.cuda.current_stream()
        for j, seg in enumerate(t.segments()):
            for _ in seg:
                t.layer()
            if j < len(t.shape.taps):
                mark = torch.cuda.Event()
                mark.record(main)
                self.side.wait_event(mark)
                with torch.cuda.stream(self.side):
                    t.host[j].copy_(t.h, non_blocking=True)
                    self.flags[j:j + 1].copy_(self.counter, non_blocking=True)
                back = torch.cuda.Event()
                back.record(self.side)
                main.wait_event(back)  # the graph joins the side stream before it ends

    def plain(self) -> None:
        if self.t.graphs == "off":
            for _ in range(self.t.shape.layers):
                self.t.layer()
        else:
            self.plain_graph.replay()

    def start(self, cycle: int) -> None:
        torch, t, ev = self.torch, self.t, self.ev
        n = len(t.shape.taps)
        main = torch.cuda.current_stream()
        ev[0].record(main)
        if t.graphs == "full":
            self.full.replay()
            ev[-1].record(main)
            return
        for j, seg in enumerate(t.segments()):
            if t.graphs == "piecewise":
                self.pieces[j].replay()
            else:
                for _ in seg:
                    t.layer()
            if j < n:
                ev[1 + j].record(main)
                self.side.wait_event(ev[1 + j])
                with torch.cuda.stream(self.side):
                    t.host[j].copy_(t.h, non_blocking=True)
                    ev[1 + n + j].record(self.side)
        main.wait_stream(self.side)
        ev[-1].record(main)

    def wait_tap(self, j: int, cycle: int) -> None:
        if self.t.graphs != "full":
            self.ev[1 + len(self.t.shape.taps) + j].synchronize()
            return
        deadline = time.monotonic() + WAIT_S
        spins = 0
        while self.flag_view[j] < cycle:  # the graph's flag word, written after the rows landed
            spins += 1
            if spins & 0xFFF == 0 and time.monotonic() > deadline:
                raise ConfigError(f"the target's tap {j} did not land within {WAIT_S:g} s")

    def wait_end(self) -> None:
        self.ev[-1].synchronize()

    def times(self) -> tuple[list[int], list[int], int]:
        ev, n = self.ev, len(self.t.shape.taps)
        end = int(ev[0].elapsed_time(ev[-1]) * 1e6)
        if self.t.graphs == "full":  # no timing events inside a graph: its end only
            return [], [], end
        return ([int(ev[0].elapsed_time(ev[1 + j]) * 1e6) for j in range(n)],
                [int(ev[0].elapsed_time(ev[1 + n + j]) * 1e6) for j in range(n)], end)

    def layer_times(self, reps: int) -> list[float]:
        torch, t = self.torch, self.t
        runs = []
        for _ in range(reps + 1):
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(t.shape.layers + 1)]
            evs[0].record()
            for i in range(t.shape.layers):
                t.layer()
                evs[i + 1].record()
            evs[-1].synchronize()
            runs.append([evs[0].elapsed_time(e) for e in evs[1:]])
        return [float(v) for v in np.median(np.array(runs[1:]), axis=0)]


__all__ = ["GRAPHS", "TargetForward", "TargetShape"]
